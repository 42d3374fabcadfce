"""``ray.ObjectRefGenerator`` and ``DynamicObjectRefGenerator`` (mirrors
``ray._private.object_ref_generator``).

A generator task or actor method (``num_returns="streaming"``, Ray's default for generator
functions) returns an :class:`ObjectRefGenerator`: each ``next()`` gives the ObjectRef of the
next value the generator yielded, as soon as it was yielded (the first item reaches the caller
before the last is produced). An exception the generator raises arrives as one more item (its
ObjectRef raises on ``ray.get``); a failure that ends the task itself (worker death,
cancellation) arrives as the :meth:`~ObjectRefGenerator.completed` ref, then the iteration
stops.
"""
import sys

from ray_adapter.ray._private.core_access import core as _core, translated
from ray_adapter.ray._private.object_refs import ObjectRef


def _ray():
    """The ``ray`` module: the generator calls the public ``ray.wait`` / ``ray.get``, as
    Ray's does (programs and Ray's own tests patch them). Loaded by then: it imports this."""
    return sys.modules["ray_adapter.ray"]


class ObjectRefGenerator:
    """Iterates the ObjectRefs of a streaming generator call (mirrors ``ray.ObjectRefGenerator``).

    Iterable (``for ref in gen``, ``next(gen)`` raising ``StopIteration`` at the end) and
    async-iterable (``async for ref in gen``). Not thread-safe; cannot be pickled (Ray raises
    ``TypeError`` too). Create it with ``.remote()``, never directly."""

    def __init__(self, generator_ref, worker=None):
        """``worker``: whose ``core_worker`` reads the stream (Ray's global worker by default;
        its ``try_read_next_object_ref_stream`` / ``peek_object_ref_stream`` /
        ``async_delete_object_ref_stream``, as Ray's generator uses them)."""
        if worker is None:
            from ray_adapter.ray._private.global_worker import global_worker as worker
        self._generator_ref = generator_ref
        self._generator_task_raised = False
        self.worker = worker
        self._core = generator_ref._core

    # -- iteration ---------------------------------------------------------------------------
    def __iter__(self):
        return self

    def __next__(self):
        return self._next_sync()

    def __aiter__(self):
        return self

    async def __anext__(self):
        return await self._next_async()

    def send(self, value):
        raise NotImplementedError("`gen.send` is not supported.")

    def throw(self, value):
        raise NotImplementedError("`gen.throw` is not supported.")

    def close(self):
        raise NotImplementedError("`gen.close` is not supported.")

    async def asend(self, value):
        raise NotImplementedError("`gen.asend` is not supported.")

    async def athrow(self, value):
        raise NotImplementedError("`gen.athrow` is not supported.")

    async def aclose(self):
        raise NotImplementedError("`gen.aclose` is not supported.")

    # -- state -------------------------------------------------------------------------------
    def completed(self):
        """An ObjectRef that is ready once the generator task finished; ``ray.get`` on it
        raises the task's failure (worker death, cancellation), else returns None."""
        return self._generator_ref

    def next_ready(self):
        """True if ``next(gen)`` would return at once a ref that is ready (False once the
        stream finished: see :meth:`is_finished`). Never blocks."""
        if self.is_finished():
            return False
        # Ready also once the stream ended: what is left is the failed task's completion ref.
        _, ready = self.worker.core_worker.peek_object_ref_stream(self._generator_ref)
        return ready

    def is_finished(self):
        """True once the generator finished and every item was taken (``next`` then raises
        ``StopIteration``). Never blocks."""
        if self._generator_task_raised:
            return True
        with translated:
            _, finished = self._core.stream_peek(self._generator_ref._id)
        if not finished:
            return False
        try:
            with translated:
                self._core.get([self._generator_ref._id], 0)
        except Exception:  # noqa: BLE001 - a failed task still has its error to give
            return False
        return True

    # -- taking items ------------------------------------------------------------------------
    def _take(self, timeout):
        with translated:
            return self._core.stream_next(self._generator_ref._id, timeout)

    def _end_of_stream(self, stop, timeout=None):
        """No item left: the completion ref once if the task failed, else ``stop``; a nil
        ref if the task's outcome is not known within ``timeout`` seconds (as Ray's
        ``_next_sync``: the wait is bounded by the caller's timeout)."""
        if self._generator_task_raised:
            raise stop from None
        from ray_adapter.ray.exceptions import GetTimeoutError

        try:
            _ray().get(self._generator_ref, timeout=timeout)
        except GetTimeoutError:
            return ObjectRef.nil()
        except Exception:  # noqa: BLE001 - the failure is the last item, as in Ray
            self._generator_task_raised = True
            return self._generator_ref
        raise stop from None

    def _next_sync(self, timeout_s=None):
        """The next ref, waiting up to ``timeout_s`` seconds (None or -1: forever); a nil ref
        if none is ready in time; raises StopIteration at the end.

        Ray's steps over the core worker's stream calls: read the next item if it is there
        (one call when it is: the common case), else peek its ref, ``ray.wait`` for it, and
        read it; at the end of the stream, ``ray.get`` of the completion ref tells a failed
        task (its error is the last item) from a finished one."""
        from ray_adapter.ray.exceptions import ObjectRefStreamEndOfStreamError

        if self._generator_task_raised:
            raise StopIteration
        timeout = None if timeout_s is None or timeout_s < 0 else timeout_s
        core_worker = self.worker.core_worker
        generator_ref = self._generator_ref
        try:
            ref = core_worker.try_read_next_object_ref_stream(generator_ref)
            if ref is None or ref.is_nil():  # not there yet
                ref, is_ready = core_worker.peek_object_ref_stream(generator_ref)
                if not is_ready:
                    ready, _ = _ray().wait([ref], timeout=timeout, fetch_local=False)
                    if not ready:
                        return ObjectRef.nil()
                ref = core_worker.try_read_next_object_ref_stream(generator_ref)
                if ref is None or ref.is_nil():
                    # Another thread took the item this one waited for: as Ray's assertion,
                    # never a nil ref (a get of which would wait for ever).
                    raise AssertionError("an ObjectRefGenerator was read by several threads at "
                                         "once; it is not thread-safe")
        except ObjectRefStreamEndOfStreamError:
            return self._end_of_stream(StopIteration, timeout)
        return ref

    async def _next_async(self, timeout_s=None):
        import asyncio  # here, not at ``import ray``: a program without async code never loads it

        if self._generator_task_raised:
            raise StopAsyncIteration
        with translated:
            peek, _ = self._core.stream_peek(self._generator_ref._id)
            ready, _ = self._core.wait([peek], 1, 0)
        if not ready:
            future = asyncio.wrap_future(self._core.object_future(peek))
            try:
                await asyncio.wait_for(_quietly(future), timeout_s)
            except asyncio.TimeoutError:
                return ObjectRef.nil()
        taken = self._take(0)
        if taken is None:
            if self._generator_task_raised:
                raise StopAsyncIteration
            done = asyncio.wrap_future(self._core.object_future(self._generator_ref._id))
            try:
                await asyncio.wait_for(_quietly(done), timeout_s)
            except asyncio.TimeoutError:
                return ObjectRef.nil()
            return self._end_of_stream(StopAsyncIteration, 0)  # done: never blocks the loop
        return ObjectRef(taken, self._core, _add_ref=False)

    # -- lifetime ----------------------------------------------------------------------------
    def __del__(self):
        worker = getattr(self, "worker", None)
        if worker is not None:
            try:
                worker.core_worker.async_delete_object_ref_stream(self._generator_ref)
            except Exception:  # noqa: BLE001 - interpreter shutdown, or no runtime any more
                pass

    def __getstate__(self):
        raise TypeError("You cannot return or pass a generator to other task. Serializing a "
                        "ObjectRefGenerator is not allowed.")

    def __reduce__(self):
        self.__getstate__()

    def __repr__(self):
        return f"<ray.ObjectRefGenerator object at {hex(id(self))}>"


async def _quietly(future):
    """Wait for ``future``; its failure is the item's, raised when the item is read."""
    try:
        await future
    except Exception:  # noqa: BLE001
        pass


class DynamicObjectRefGenerator:
    """What ``ray.get`` returns for a ``num_returns="dynamic"`` task (deprecated in Ray in
    favour of streaming): the ObjectRefs of every value the generator yielded, in order.
    Iterating takes them (``len`` counts those not taken yet)."""

    def __init__(self, refs):
        import collections

        self._refs = collections.deque(refs)

    def __iter__(self):
        while self._refs:
            yield self._refs.popleft()

    def __len__(self):
        return len(self._refs)


ObjectRefGenerator.__module__ = "ray_adapter.ray"  # Ray 2.60's: ``ray`` (see ``hook.publish``)
