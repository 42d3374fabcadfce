"""The driver's streams: the items of streaming generator calls, in order, for their consumer.

A streaming call's items are ordinary objects of the object table, with ids derived from the
call's task id (:meth:`IdFactory.stream_item`: item ``i`` is return index ``i + 2``; index 1 is
the call's completion object). The entry for the *next* item to be produced always exists,
pending, so a consumer waits on it like on any object: it is sealed with the item when the item
arrives, or with a placeholder when the stream ends (see :meth:`StreamTable.end`).

Life of a stream::

    open --item 0, 1, ...--> ... --call finished--> ended --every item taken, closed--> gone

References: the stream holds one reference to each item until the consumer takes it (the
reference passes to the consumer) or closes the stream (untaken items are released). A retried
call produces its items again from 0: those already received are ignored.

Backpressure: when the call or its actor limits unconsumed items, each take is acknowledged to
the worker producing the stream (a :class:`~.protocol.StreamAck` posted on its channel).

Thread-safety: ``StreamTable._lock`` is a leaf lock (the object table's lock may be taken under
it; sealing, which runs callbacks, and acks happen after it is released). Items arrive on the
producing worker's reader thread; takes come from user threads and from the driver service.
"""
import threading
import time

from ray_adapter.core import errors, serialization
from ray_adapter.core.execution import wait_seconds
from ray_adapter.core.ids import TASK_ID_SIZE, IdFactory
from ray_adapter.core.embedded import protocol
from ray_adapter.core.embedded.protocol import from_payload
from ray_adapter.core.embedded.streaming import UNLIMITED

_item = IdFactory.stream_item
_END = serialization.dumps(None)  # what the entry after the last item is sealed with


class _Stream:
    __slots__ = ("produced", "consumed", "end", "closed", "acks", "sink")

    def __init__(self, acks):
        self.produced = 0     # items received: indexes 0 .. produced-1; the entry `produced` is pending
        self.consumed = 0     # items taken by the consumer
        self.end = None       # once ended: how many items the consumer gets in all
        self.closed = False   # the consumer dropped the stream
        self.acks = acks      # report takes to the producer (backpressure)
        self.sink = None      # the worker producing it now


class StreamTable:
    def __init__(self, objects):
        """Collaborator: the ``objects`` table (each item is an object; a value's contained
        actor handles are adopted through it)."""
        self._lock = threading.Lock()
        self._objects = objects
        self._streams = {}

    # -- producer side -----------------------------------------------------------------------
    def open(self, task_id, acks):
        """A streaming call was submitted; ``acks``: its producer pauses on backpressure."""
        with self._lock:
            self._streams[task_id] = _Stream(acks)
            self._objects.create([_item(task_id, 0)], 1, task_id)

    def attach(self, task_id, worker):
        """``worker`` runs the call now (first run or a retry): it hears of what was taken."""
        with self._lock:
            stream = self._streams.get(task_id)
            if stream is None:
                return
            stream.sink = worker
            consumed = UNLIMITED if stream.closed else stream.consumed
            ack = stream.acks and consumed > 0
        if ack:
            self._send_ack(worker, task_id, consumed)

    def on_item(self, worker, message, buffers):
        """A worker's :class:`~.protocol.StreamItem` (on its reader thread): the item is kept,
        and the actor handles inside it held, unless it is a repeat or the stream closed."""
        data = from_payload(message.value, buffers)
        if self.item(message.task_id, message.index, data, not message.ok):
            self._objects.adopt_contained((data,))

    @staticmethod
    def _send_ack(worker, task_id, consumed):
        worker.post(protocol.StreamAck(task_id, consumed))

    def item(self, task_id, index, data, is_error):
        """Item ``index`` arrived; False if it was not kept (a repeat, or the stream closed)."""
        with self._lock:
            stream = self._streams.get(task_id)
            if stream is None or stream.end is not None or index != stream.produced:
                return False
            stream.produced += 1
            keep = not stream.closed
            if keep:
                self._objects.create([_item(task_id, index + 1)], 1, task_id)
        # A closed stream released its hold on this entry: sealing it frees it.
        self._objects.seal(_item(task_id, index), data, is_error)
        return keep

    def end(self, task_id, drop_untaken=False):
        """The call finished (or failed for good): no more items. ``drop_untaken``: the items
        not taken yet are discarded (a cancelled stream ends at once, as in Ray)."""
        with self._lock:
            stream = self._streams.get(task_id)
            if stream is None or stream.end is not None:
                return
            untaken = []
            if drop_untaken and not stream.closed:
                untaken = [_item(task_id, i) for i in range(stream.consumed, stream.produced)]
                stream.end = stream.consumed
            else:
                stream.end = stream.produced
            if stream.closed:
                del self._streams[task_id]
            marker = _item(task_id, stream.produced)
        self._objects.seal(marker, _END, False)  # wakes whoever waits for the next item
        if untaken:
            self._objects.release(untaken)

    # -- consumer side -----------------------------------------------------------------------
    def next(self, generator_id, timeout):
        """Take the next item: its id (the reference passes to the caller), or None once the
        stream ended and every item was taken. Raises GetTimeout after ``timeout`` seconds."""
        task_id = generator_id[:TASK_ID_SIZE]
        deadline = None if wait_seconds(timeout) is None else time.monotonic() + timeout
        while True:
            with self._lock:
                stream = self._streams.get(task_id)
                if stream is None:
                    return None
                cursor = stream.consumed
                if stream.end is not None and cursor >= stream.end:
                    return None
                if cursor < stream.produced:
                    stream.consumed += 1
                    ack = (stream.sink, stream.consumed) if stream.acks and stream.sink else None
                    break
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self._objects.wait([_item(task_id, cursor)], 1, left):
                raise errors.GetTimeout(timeout)
        if ack is not None:
            self._send_ack(ack[0], task_id, ack[1])
        return _item(task_id, cursor)

    def peek(self, generator_id):
        """``(id, finished)``: the id of the entry of the next item, ready once it was produced
        or the stream ended (missing ids count as ready), and whether the stream ended with
        every item taken."""
        task_id = generator_id[:TASK_ID_SIZE]
        with self._lock:
            stream = self._streams.get(task_id)
            if stream is None:
                return _item(task_id, 0), True
            finished = stream.end is not None and stream.consumed >= stream.end
            return _item(task_id, stream.consumed), finished

    def close(self, generator_id):
        """The consumer dropped the stream: release what it did not take; the producer is
        told never to pause again."""
        task_id = generator_id[:TASK_ID_SIZE]
        with self._lock:
            stream = self._streams.get(task_id)
            if stream is None or stream.closed:
                return
            stream.closed = True
            held = [_item(task_id, i) for i in range(stream.consumed, stream.produced)]
            if stream.end is None:
                held.append(_item(task_id, stream.produced))  # pending: freed once sealed
                sink = stream.sink if stream.acks else None
            else:
                if stream.end == stream.produced:
                    held.append(_item(task_id, stream.produced))
                else:  # ended by a cancel: the untaken items were released already
                    held = [_item(task_id, stream.produced)]
                del self._streams[task_id]
                sink = None
        self._objects.release(held)
        if sink is not None:
            self._send_ack(sink, task_id, UNLIMITED)

    def clear(self):
        with self._lock:
            self._streams.clear()
