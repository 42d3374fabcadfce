"""Worker side of streaming generators: running a call's generator, one message per item.

A streaming call's function returns a generator (or an async generator); :func:`produce` /
:func:`produce_async` send each value it yields as a :class:`~.protocol.StreamItem`, written at
once (an item yielded just before the process dies still reaches the caller), in order. An exception
the generator raises becomes its last item (not ok) and the call still completes normally (its
completion object holds None), as in Ray; a cancel or the worker's death ends the call instead.

Backpressure (:class:`Budget`): with a limit, the producer pauses after a yield while that many
of its items are unconsumed, until the driver reports consumption (:class:`~.protocol.StreamAck`,
delivered by the reader thread to :meth:`Budget.ack`). An actor may also cap the unconsumed
items of all its streams together. Threads wait on the budget's condition (a task in the main
thread is still interruptible by a cancel's signal); coroutines on an event the ack sets
through their loop.

Thread-safety: :class:`Budget` state is guarded by its condition's lock (a leaf lock; nothing
is called out under it).
"""
import inspect
import threading

from ray_adapter.core import errors, serialization
from ray_adapter.core.embedded import protocol
from ray_adapter.core.embedded.protocol import to_payload
from ray_adapter.core.embedded.results import pack_error, pack_results
from ray_adapter.core.execution import task_failure

#: Consumption reported when the consumer dropped its stream: never pause again.
UNLIMITED = 1 << 62


class _Stream:
    __slots__ = ("limit", "produced", "acked", "event", "loop")

    def __init__(self, limit):
        self.limit = limit
        self.produced = 0
        self.acked = 0
        self.event = None  # asyncio.Event of a coroutine producer, on its loop
        self.loop = None


class Budget:
    """Unconsumed items of the streams of one worker (a task's, or all of one actor's calls):
    per stream at most its limit, and in all at most ``total_limit`` (-1: no total cap)."""

    def __init__(self, total_limit=-1):
        self._cond = threading.Condition(threading.Lock())
        self._streams = {}
        self._total_limit = total_limit
        self._unconsumed = 0

    def open(self, task_id, limit):
        with self._cond:
            self._streams[task_id] = _Stream(limit)

    def close(self, task_id):
        with self._cond:
            stream = self._streams.pop(task_id, None)
            if stream is not None:
                self._unconsumed -= max(0, stream.produced - stream.acked)
                self._cond.notify_all()
        self._wake_coroutines()

    def _blocked(self, stream):
        """Lock held: must this stream's producer pause?"""
        if stream.limit > 0 and stream.produced - stream.acked >= stream.limit:
            return True
        return 0 < self._total_limit <= self._unconsumed

    def produced(self, task_id):
        """One more item of ``task_id`` went out; True if its producer must now pause."""
        with self._cond:
            stream = self._streams[task_id]
            stream.produced += 1
            if stream.produced > stream.acked:
                self._unconsumed += 1
            return self._blocked(stream)

    def wait(self, task_id, cancelled):
        """Block the calling thread while the stream must pause (or until ``cancelled()``)."""
        with self._cond:
            stream = self._streams.get(task_id)
            while stream is not None and self._blocked(stream) and not cancelled():
                self._cond.wait()

    async def wait_async(self, task_id):
        """Wait on the running loop while the stream must pause."""
        while True:
            with self._cond:
                stream = self._streams.get(task_id)
                if stream is None or not self._blocked(stream):
                    return
                if stream.event is None:  # a coroutine producer: asyncio is loaded already
                    import asyncio

                    stream.event, stream.loop = asyncio.Event(), asyncio.get_running_loop()
                stream.event.clear()
                event = stream.event
            await event.wait()

    def ack(self, task_id, consumed):
        """The consumer has taken ``consumed`` items of ``task_id`` (reader thread)."""
        with self._cond:
            stream = self._streams.get(task_id)
            if stream is None or consumed <= stream.acked:
                return
            before = max(0, stream.produced - stream.acked)
            stream.acked = consumed
            self._unconsumed -= before - max(0, stream.produced - stream.acked)
            self._cond.notify_all()
        self._wake_coroutines()

    def wake(self):
        """Re-check every waiting producer (a cancel arrived)."""
        with self._cond:
            self._cond.notify_all()
        self._wake_coroutines()

    def _wake_coroutines(self):
        with self._cond:
            targets = [(s.loop, s.event) for s in self._streams.values() if s.event is not None]
        for loop, event in targets:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # the loop is closed
                pass


def _post_item(worker, task_id, index, value):
    """Send one item; False (an error item was sent instead) if the value cannot travel."""
    buffers = []
    try:
        payload = to_payload(serialization.dumps(value), buffers)
    except Exception as exc:  # noqa: BLE001 - an unserializable item ends the stream
        _post_error(worker, task_id, index, task_failure(exc, "", None))
        return False
    _send(worker, protocol.StreamItem(task_id, index, True, payload), buffers)
    return True


def _post_error(worker, task_id, index, failure):
    _, payloads, buffers = pack_error(failure)
    _send(worker, protocol.StreamItem(task_id, index, False, payloads[0]), buffers)


def _send(worker, message, buffers):
    # Sent now, not posted: an item yielded before the process dies (os._exit, a crash)
    # reaches the caller, as in Ray (and a cancel's signal never cuts the frame).
    worker.send(message, buffers)


def not_a_generator(result, name):
    return TypeError(f"the streaming call {name} returned {type(result).__name__}, not a "
                     "generator; num_returns='streaming' needs a generator function")


def produce(worker, task_id, name, result, budget, cancelled=lambda: False, actor=None):
    """Stream the generator ``result`` of call ``task_id`` (a thread); returns the call's
    reply. A cancel checked between items (``cancelled()``) ends it with TaskCancelled; a
    signal's exception (a task's cancel) propagates to the caller."""
    if inspect.isasyncgen(result):
        return _produce_async_in_thread(worker, task_id, name, result, budget, cancelled, actor)
    index = 0
    try:
        if not inspect.isgenerator(result):
            raise not_a_generator(result, name)
        for value in result:
            if cancelled():
                result.close()
                return pack_error(errors.TaskCancelled(task_id))
            if not _post_item(worker, task_id, index, value):
                return pack_results(None, 1)
            index += 1
            if budget.produced(task_id):
                budget.wait(task_id, cancelled)
            if cancelled():
                result.close()
                return pack_error(errors.TaskCancelled(task_id))
    except Exception as exc:  # noqa: BLE001 - the generator's error is its last item
        _post_error(worker, task_id, index, task_failure(exc, name, actor))
    return pack_results(None, 1)


def _produce_async_in_thread(worker, task_id, name, agen, budget, cancelled, actor):
    import asyncio  # here: the driver imports this module, and most programs have no async code

    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(
            produce_async(worker, task_id, name, agen, budget, cancelled, actor))
    finally:
        loop.close()


async def produce_async(worker, task_id, name, result, budget, cancelled=lambda: False,
                        actor=None, flush=None):
    """Stream ``result`` (an async or plain generator) on the running loop; returns the reply.
    ``flush()`` is called after each item (the loop batches its writes per turn)."""
    index = 0
    try:
        if inspect.isasyncgen(result):
            items = result
        elif inspect.isgenerator(result):
            items = _as_async(result)
        else:
            raise not_a_generator(result, name)
        async for value in items:
            if not _post_item(worker, task_id, index, value):
                return pack_results(None, 1)
            index += 1
            if flush is not None:
                flush()
            if budget.produced(task_id):
                await budget.wait_async(task_id)
            if cancelled():
                return pack_error(errors.TaskCancelled(task_id))
    except Exception as exc:  # noqa: BLE001 - the generator's error is its last item
        _post_error(worker, task_id, index, task_failure(exc, name, actor))
    return pack_results(None, 1)


async def _as_async(gen):
    for value in gen:
        yield value
