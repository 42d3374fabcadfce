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

Thread-safety: a stream's state is guarded by its condition (a leaf lock); the backend's
object table is written under the backend's lock, which is never taken while holding it.
"""
import concurrent.futures
import threading

from ray_adapter.core import errors
from ray_adapter.core.ids import TASK_ID_SIZE, IdFactory
from ray_adapter.core.yuanrong import shell
from ray_adapter.core.yuanrong.shell import SINKS, Collected

_item = IdFactory.stream_item


class Stream:
    """The items of one streaming call, for its consumer (and, in local mode, its producer)."""

    def __init__(self, backend, task_id, limit, actor_id=None):
        self.backend = backend
        self.task_id = task_id
        self.actor_id = actor_id
        self.limit = limit
        self._cond = threading.Condition(threading.Lock())
        self.produced = 0
        self.consumed = 0
        self.end = None
        self.closed = False
        self.cancelled = False
        self._next_entry()

    def _next_entry(self):
        """Create the pending entry of item ``produced``."""
        self.backend._new_id(None, None, None, _item(self.task_id, self.produced))
        self.backend._objects[_item(self.task_id, self.produced)].future = concurrent.futures.Future()

    # -- producer side (the shell's thread, or the completion callback) ----------------------
    def put(self, box, block=True):
        """Add the next item (a :class:`shell.Box`); with ``block``, waits while backpressure
        says so. Returns False once the consumer no longer wants items (closed, cancelled)."""
        backend = self.backend
        with self._cond:
            if self.end is not None or self.closed or self.cancelled:
                return False
            index = self.produced
            self.produced += 1
        with backend._lock:
            self._next_entry()
            entry = backend._objects.get(_item(self.task_id, index))
            if self.closed:  # closed meanwhile: nobody will take these
                backend._drop_object_ref(_item(self.task_id, index + 1))
        if entry is not None:
            entry.future.set_result(box)
        with self._cond:
            while (block and self.limit > 0 and self.produced - self.consumed >= self.limit
                   and not self.closed and not self.cancelled):
                self._cond.wait()
            return not (self.closed or self.cancelled)

    def finish(self, drop_untaken=False):
        """No more items (the call completed, failed or was cancelled)."""
        backend = self.backend
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
        with backend._lock:
            marker = backend._objects.get(marker_id)
            for object_id in untaken:
                backend._drop_object_ref(object_id)
        if marker is not None and not marker.future.done():
            marker.future.set_result(shell.Box(True, None))

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
        entry = self.backend._objects.get(_item(self.task_id, cursor))
        if entry is not None:
            try:
                entry.future.result(timeout)
            except concurrent.futures.TimeoutError:
                raise errors.GetTimeout(timeout) from None
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
        """The consumer dropped the stream (runs under the backend's lock, from the release
        thread): untaken items and the next entry are released; the producer never pauses."""
        with self._cond:
            if self.closed:
                return
            self.closed = True
            self._cond.notify_all()
            last = self.end if self.end is not None and self.end < self.produced else self.produced
            held = [_item(self.task_id, i) for i in range(self.consumed, last)]
            held.append(_item(self.task_id, self.produced))
        for object_id in held:
            self.backend._drop_object_ref(object_id)


class StreamsMixin:
    """The yuanrong backend's streams (state: ``_streams``, guarded by ``_lock``)."""

    def _open_stream(self, task_id, limit, actor_id=None):
        stream = Stream(self, task_id, limit, actor_id)
        with self._lock:
            self._streams[task_id] = stream
        if self.local_mode:
            SINKS[task_id] = stream
        return stream

    def _stream_of(self, generator_id):
        return self._streams.get(generator_id[:TASK_ID_SIZE])

    def stream_next(self, generator_id, timeout):
        self._check_started()
        stream = self._stream_of(generator_id)
        return None if stream is None else stream.take(timeout)

    def stream_peek(self, generator_id):
        stream = self._stream_of(generator_id)
        if stream is None:
            return _item(generator_id[:TASK_ID_SIZE], 0), True
        return stream.peek()

    def stream_close(self, generator_id):
        self._releases.put(self._close_stream, generator_id)  # from a finalizer: deferred

    def _close_stream(self, generator_id):
        stream = self._streams.pop(generator_id[:TASK_ID_SIZE], None)
        if stream is not None:
            stream.close()

    def _end_streams_of(self, actor_id):
        """The actor is gone: its streams end (their completions hold its death)."""
        for stream in [s for s in self._streams.values() if s.actor_id == actor_id]:
            stream.finish()

    def _stream_completed(self, stream, completion, box):
        """The streaming call's yr result arrived: feed what a cluster call collected, end
        the stream, resolve the completion object (None, or the call's failure)."""
        value = box.value if isinstance(box, shell.Box) and box.ok else None
        if isinstance(value, Collected):
            for item in value.boxes:
                stream.put(item, block=False)
        if isinstance(box, shell.Box) and not box.ok:
            failure = box
        elif isinstance(box, BaseException):
            failure = shell.Box(False, box if isinstance(box, errors.CoreError) else self._from_yr_error(box))
        else:
            failure = None
        stream.finish(drop_untaken=stream.cancelled)
        if not completion.done():
            completion.set_result(failure or shell.Box(True, None))
