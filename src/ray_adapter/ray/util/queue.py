"""``ray.util.queue``: :class:`Queue`, a FIFO queue held by an async actor, shared by tasks and
actors (mirrors Ray's ``ray.util.queue``), and its :class:`Empty` / :class:`Full` errors.

Built on the public actor API only, so it runs on every backend: the queue lives in one actor
(an ``asyncio.Queue`` on its event loop); a :class:`Queue` object is a small picklable front
holding that actor's handle, so passing it to tasks and actors shares the one queue.
"""
import asyncio
import queue as _std_queue
from collections.abc import Iterable

from ray_adapter import gaps


class Empty(_std_queue.Empty):
    """Raised by :meth:`Queue.get` when no item came (mirrors ``ray.util.queue.Empty``, a
    subclass of the standard library's ``queue.Empty``)."""


class Full(_std_queue.Full):
    """Raised by :meth:`Queue.put` when no slot freed up (mirrors ``ray.util.queue.Full``, a
    subclass of ``queue.Full``)."""


def _check_timeout(timeout):
    if timeout is not None and timeout < 0:
        raise ValueError("'timeout' must be a non-negative number")


class Queue:
    """A first-in, first-out queue on an actor (mirrors ``ray.util.queue.Queue``).

    ``maxsize``: the most items it holds (0: unbounded). ``actor_options``: options of the
    queue's actor (``Queue(actor_options={"num_cpus": 1})``), as ``.options(**actor_options)``.

    ``put``/``get`` block until there is room / an item, at most ``timeout`` seconds (None:
    forever), and raise :class:`Full` / :class:`Empty` when that passes (or at once when
    ``block=False``); a negative timeout raises ``ValueError``. Several producers or consumers
    waiting on one queue are served in no guaranteed order. ``*_async`` variants are
    coroutines; ``*_nowait_batch`` move several items in one call, all or none.
    """

    def __init__(self, maxsize=0, actor_options=None):
        actor_options = actor_options or {}
        self.maxsize = maxsize
        self.actor = _queue_actor_class().options(**actor_options).remote(self.maxsize)

    def __len__(self):
        return self.size()

    def size(self):
        """The number of items in the queue."""
        return _get(self.actor.qsize.remote())

    def qsize(self):
        """The number of items in the queue."""
        return self.size()

    def empty(self):
        """True when the queue holds no item."""
        return _get(self.actor.empty.remote())

    def full(self):
        """True when the queue holds ``maxsize`` items."""
        return _get(self.actor.full.remote())

    # -- putting -----------------------------------------------------------------------------
    def put(self, item, block=True, timeout=None):
        """Add ``item``; see the class notes. Raises :class:`Full`, ``ValueError``."""
        if not block:
            try:
                _get(self.actor.put_nowait.remote(item))
            except asyncio.QueueFull:
                raise Full
        else:
            _check_timeout(timeout)
            _get(self.actor.put.remote(item, timeout))

    async def put_async(self, item, block=True, timeout=None):
        """Coroutine form of :meth:`put`."""
        if not block:
            try:
                await self.actor.put_nowait.remote(item)
            except asyncio.QueueFull:
                raise Full
        else:
            _check_timeout(timeout)
            await self.actor.put.remote(item, timeout)

    def put_nowait(self, item):
        """``put(item, block=False)``."""
        return self.put(item, block=False)

    def put_nowait_batch(self, items):
        """Add every item of ``items`` in order, or none: raises :class:`Full` when they do not
        all fit, ``TypeError`` when ``items`` is not iterable."""
        if not isinstance(items, Iterable):
            raise TypeError("Argument 'items' must be an Iterable")
        _get(self.actor.put_nowait_batch.remote(items))

    # -- getting -----------------------------------------------------------------------------
    def get(self, block=True, timeout=None):
        """Remove and return the next item; see the class notes. Raises :class:`Empty`,
        ``ValueError``."""
        if not block:
            try:
                return _get(self.actor.get_nowait.remote())
            except asyncio.QueueEmpty:
                raise Empty
        _check_timeout(timeout)
        return _get(self.actor.get.remote(timeout))

    async def get_async(self, block=True, timeout=None):
        """Coroutine form of :meth:`get`."""
        if not block:
            try:
                return await self.actor.get_nowait.remote()
            except asyncio.QueueEmpty:
                raise Empty
        _check_timeout(timeout)
        return await self.actor.get.remote(timeout)

    def get_nowait(self):
        """``get(block=False)``."""
        return self.get(block=False)

    def get_nowait_batch(self, num_items):
        """Remove and return ``num_items`` items in FIFO order, or none: raises :class:`Empty`
        when fewer are there, ``TypeError`` / ``ValueError`` for a count that is not an int
        / is negative."""
        if not isinstance(num_items, int):
            raise TypeError("Argument 'num_items' must be an int")
        if num_items < 0:
            raise ValueError("'num_items' must be nonnegative")
        return _get(self.actor.get_nowait_batch.remote(num_items))

    # -- ending ------------------------------------------------------------------------------
    def shutdown(self, force=False, grace_period_s=5):
        """End the queue's actor and free what it reserved: at once with ``force``, else after
        the calls it already has, killing it if that takes over ``grace_period_s`` seconds."""
        from ray_adapter.ray._private.worker import kill, wait

        if self.actor:
            if force:
                kill(self.actor, no_restart=True)
            else:
                done, not_done = wait([self.actor.terminate.remote()], timeout=grace_period_s)
                if not_done:
                    kill(self.actor, no_restart=True)
        self.actor = None


def _get(ref):
    from ray_adapter.ray._private.worker import get

    return get(ref)


class _QueueActor:
    """The actor holding the items. Every method is a coroutine, so all of them run on the
    actor's one event loop (``asyncio.Queue`` is not thread-safe); the queue is made there."""

    def __init__(self, maxsize):
        self.maxsize = maxsize
        self._queue = None

    def _q(self):
        if self._queue is None:
            self._queue = asyncio.Queue(self.maxsize)
        return self._queue

    async def qsize(self):
        return self._q().qsize()

    async def empty(self):
        return self._q().empty()

    async def full(self):
        return self._q().full()

    async def put(self, item, timeout=None):
        try:
            await asyncio.wait_for(self._q().put(item), timeout)
        except asyncio.TimeoutError:
            raise Full

    async def get(self, timeout=None):
        try:
            return await asyncio.wait_for(self._q().get(), timeout)
        except asyncio.TimeoutError:
            raise Empty

    async def put_nowait(self, item):
        self._q().put_nowait(item)

    async def put_nowait_batch(self, items):
        q = self._q()
        if self.maxsize > 0 and len(items) + q.qsize() > self.maxsize:
            raise Full(f"Cannot add {len(items)} items to queue of size {q.qsize()} and "
                       f"maxsize {self.maxsize}.")
        for item in items:
            q.put_nowait(item)

    async def get_nowait(self):
        return self._q().get_nowait()

    async def get_nowait_batch(self, num_items):
        q = self._q()
        if num_items > q.qsize():
            raise Empty(f"Cannot get {num_items} items from queue of size {q.qsize()}.")
        return [q.get_nowait() for _ in range(num_items)]

    async def terminate(self):
        from ray_adapter.ray.actor import exit_actor

        exit_actor()


_actor_class = None


def _queue_actor_class():
    global _actor_class
    if _actor_class is None:
        from ray_adapter.ray import remote

        _actor_class = remote(_QueueActor)
    return _actor_class


__getattr__ = gaps.module_getattr("ray.util.queue")
