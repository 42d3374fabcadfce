"""Streaming generators on the yuanrong backend (yr has no streaming returns).

In yr's local mode the call runs in this process: the shell (:mod:`.shell`) finds the call's
:class:`Stream` in ``shell.SINKS`` and hands it each item as the generator yields it, so the
consumer gets the first item before the last is produced, and backpressure pauses the shell's
thread. On a cluster the call runs in another process: the shell runs the generator to its end
and returns every item at once (``shell.Collected``); the backend feeds them to the stream when
the call completes.

Each item is an object of the backend's table, ids as Ray's (item ``i`` is return ``i + 2``;
return 1 is the call's completion object). The entry of the next item always exists with an
unresolved future, so ``wait`` and async iteration wait on it like on any object; it resolves
with the item, or with None when the stream ends.

Thread-safety: a stream's state is guarded by its condition (a leaf lock); its items are
entries of the object table (its own lock, never taken while holding the condition). The
table of streams (``StreamTable._streams``) is guarded by its own leaf lock.
"""
import concurrent.futures
import threading

from ray_adapter.core import errors
from ray_adapter.core.ids import TASK_ID_SIZE, IdFactory
from ray_adapter.core.yuanrong import shell
from ray_adapter.core.yuanrong.completions import completion_of
from ray_adapter.core.yuanrong.objects import fresh_error, from_yr_error, settle
from ray_adapter.core.yuanrong.shell import SINKS, Collected

_item = IdFactory.stream_item


class Stream:
    """The items of one streaming call, for its consumer (and, in local mode, its producer)."""

    def __init__(self, objects, task_id, limit, actor_id=None):
        self.objects = objects
        self.task_id = task_id
        self.actor_id = actor_id
        self.limit = limit
        self._cond = threading.Condition(threading.Lock())
        self.produced = 0
        self.consumed = 0
        self.end = None
        self.closed = False
        self.cancelled = False
        self._next_entry(0)

    def _next_entry(self, index):
        """Create the pending entry of item ``index``."""
        self.objects.new_pending(_item(self.task_id, index))

    # -- producer side (the shell's thread, or the completion callback) ----------------------
    def put(self, box, block=True):
        """Add the next item (a :class:`shell.Box`); with ``block``, waits while backpressure
        says so. Returns False once the consumer no longer wants items (closed, cancelled)."""
        objects = self.objects
        with self._cond:
            if self.end is not None or self.closed or self.cancelled:
                return False
            index = self.produced
            self.produced += 1
        self._next_entry(index + 1)
        future = objects.pending_future(_item(self.task_id, index))
        with self._cond:
            closed = self.closed
        if closed:  # closed meanwhile: nobody will take the next one (dropping twice is harmless)
            objects.drop(_item(self.task_id, index + 1))
        if future is not None:
            settle(future, box)  # unless cancelled or shut down meanwhile
        with self._cond:
            while (block and self.limit > 0 and self.produced - self.consumed >= self.limit
                   and not self.closed and not self.cancelled):
                self._cond.wait()
            return not (self.closed or self.cancelled)

    def finish(self, drop_untaken=False):
        """No more items (the call completed, failed or was cancelled)."""
        with self._cond:
            if self.end is not None:
                return
            untaken = []
            if drop_untaken:
                untaken = [_item(self.task_id, i) for i in range(self.consumed, self.produced)]
                self.end = self.consumed
            else:
                self.end = self.produced
            self._cond.notify_all()
            marker_id = _item(self.task_id, self.produced)
        SINKS.pop(self.task_id, None)
        marker = self.objects.pending_future(marker_id)
        for object_id in untaken:
            self.objects.drop(object_id)
        if marker is not None:
            settle(marker, shell.Box(True, None))

    def cancel(self):
        """A cancel arrived: the producer stops at its next item; what was not taken is dropped."""
        with self._cond:
            self.cancelled = True
            self._cond.notify_all()
        self.finish(drop_untaken=True)

    # -- consumer side -----------------------------------------------------------------------
    def take(self, timeout):
        with self._cond:
            if self.end is not None and self.consumed >= self.end:
                return None
            cursor = self.consumed
        future = self.objects.pending_future(_item(self.task_id, cursor))
        if future is not None:
            try:
                failure = future.exception(timeout)
            except concurrent.futures.TimeoutError:
                raise errors.GetTimeout(timeout) from None
            if failure is not None:  # a copy: the error object is shared (objects.fresh_error)
                raise fresh_error(failure) from None
        with self._cond:
            if self.end is not None and self.consumed >= self.end:
                return None
            self.consumed += 1
            self._cond.notify_all()
        return _item(self.task_id, cursor)

    def peek(self):
        with self._cond:
            finished = self.end is not None and self.consumed >= self.end
            return _item(self.task_id, self.consumed), finished

    def close(self):
        """The consumer dropped the stream (on the release thread): untaken items and the next
        entry are released; the producer never pauses."""
        with self._cond:
            if self.closed:
                return
            self.closed = True
            self._cond.notify_all()
            last = self.end if self.end is not None and self.end < self.produced else self.produced
            held = [_item(self.task_id, i) for i in range(self.consumed, last)]
            held.append(_item(self.task_id, self.produced))
        for object_id in held:
            self.objects.drop(object_id)


class StreamTable:
    """The streams of this driver's streaming calls, by task id.

    Collaborators: ``objects`` (the :class:`~.objects.ObjectTable` holding the items),
    ``releases`` (the release thread: a dropped generator is closed there), ``local_mode``
    (local mode: the shell finds a call's stream in ``shell.SINKS``)."""

    def __init__(self, objects, releases, local_mode):
        self.objects = objects
        self._releases = releases
        self.local_mode = local_mode
        self._lock = threading.Lock()
        self._streams = {}  # task id -> Stream

    def open_call(self, invoke, task_id, limit, actor_id=None, name=""):
        """A streaming call: open its stream (before ``invoke()`` runs it: in local mode the
        shell looks the stream up), invoke it, and return ``[completion id]``."""
        stream = Stream(self.objects, task_id, limit, actor_id)
        with self._lock:
            self._streams[task_id] = stream
        if self.local_mode:
            SINKS[task_id] = stream
        completion_id = IdFactory.returns(task_id, 1)[0]
        completion = self.objects.new_pending(completion_id, actor_id, name)
        try:
            ref = invoke()
        except BaseException as exc:
            self._completed(stream, completion, exc)
            raise
        completion_of(ref).add(lambda value, exc: self._completed(
            stream, completion, exc if exc is not None else value))
        return [completion_id]

    def _stream_of(self, generator_id):
        return self._streams.get(generator_id[:TASK_ID_SIZE])

    def next(self, generator_id, timeout):
        """The id of the stream's next item (None at its end); GetTimeout after ``timeout``."""
        stream = self._stream_of(generator_id)
        return None if stream is None else stream.take(timeout)

    def peek(self, generator_id):
        """``(id of the next item, whether the stream has ended)``."""
        stream = self._stream_of(generator_id)
        if stream is None:
            return _item(generator_id[:TASK_ID_SIZE], 0), True
        return stream.peek()

    def close(self, generator_id):
        """The consumer's generator is gone (from a finalizer: deferred)."""
        self._releases.put(self._close, generator_id)

    def _close(self, generator_id):
        with self._lock:
            stream = self._streams.pop(generator_id[:TASK_ID_SIZE], None)
        if stream is not None:
            stream.close()

    def cancel(self, task_id):
        """The call ``task_id`` was cancelled: its stream, if it has one, stops."""
        stream = self._streams.get(task_id)
        if stream is not None:
            stream.cancel()

    def end_of(self, actor_id):
        """The actor is gone: its streams end (their completions hold its death)."""
        with self._lock:
            streams = [s for s in self._streams.values() if s.actor_id == actor_id]
        for stream in streams:
            stream.finish()

    def close_all(self):
        """Shutdown: every producer paused by backpressure stops."""
        with self._lock:
            streams, self._streams = list(self._streams.values()), {}
        for stream in streams:
            stream.cancel()

    def _completed(self, stream, completion, box):
        """The streaming call's yr result arrived: feed what a cluster call collected, end
        the stream, resolve the completion object (None, or the call's failure)."""
        value = box.value if isinstance(box, shell.Box) and box.ok else None
        if isinstance(value, Collected):
            for item in value.boxes:
                stream.put(item, block=False)
        if isinstance(box, shell.Box) and not box.ok:
            failure = box
        elif isinstance(box, BaseException):
            failure = shell.Box(False, box if isinstance(box, errors.CoreError) else from_yr_error(box))
        else:
            failure = None
        stream.finish(drop_untaken=stream.cancelled)
        settle(completion, failure or shell.Box(True, None))
