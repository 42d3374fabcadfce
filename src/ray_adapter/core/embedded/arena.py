"""The driver's shared-memory arena: large object buffers in reusable, pre-faulted segments.

A fresh memfd per object costs the kernel zeroing and faulting every page (slower than the copy
itself); the arena keeps a few large memfd segments (``MAP_POPULATE``: faulted once) and
hands out blocks of them, first fit, coalescing freed neighbours, so ``put`` is one ``memcpy``
into memory that is already there and ``get`` maps without copying.

Who holds a block (it is reused only when none does):

- :class:`ArenaBuffer` objects (the buffers of Serialized values the object table, a message in
  flight or a pin holds): Python's reference counting counts them;
- views handed out by ``get`` (an exporter array whose finalizer holds an ArenaBuffer);
- worker processes that received it: :class:`Pins` (per worker) holds an ArenaBuffer per
  reference sent until the worker reports the views it made of it are gone (or dies).

Segments are created up to ``capacity`` bytes (the node's object store memory); past it,
buffers fall back to a memfd of their own (:class:`~ray_adapter.core.shm.ShmBuffer`). Freed
memory above :data:`RETAIN_BYTES` is given back to the kernel (the pages are punched out; a
later block there faults them in again).

Thread-safety: ``Arena._lock`` (a leaf lock) guards the free lists. ``ArenaBuffer.__del__``
runs in any thread at any point: a release that finds the lock taken is queued (a deque
append) and applied by the next allocation or release.
"""
import bisect
import collections
import mmap
import os
import threading

from ray_adapter.core import shm

ALIGN = 64
SEGMENT_MIN = 64 << 20
SEGMENT_ROUND = 2 << 20
RETAIN_BYTES = 512 << 20


class Segment:
    __slots__ = ("seg_id", "fd", "map", "size", "free", "__weakref__")

    def __init__(self, seg_id, size):
        self.seg_id = seg_id
        self.size = size
        self.fd = os.memfd_create(f"ray-adapter-arena-{seg_id}", os.MFD_CLOEXEC)
        try:
            os.ftruncate(self.fd, size)
            self.map = mmap.mmap(self.fd, size, flags=mmap.MAP_SHARED | shm.POPULATE)
        except BaseException:
            os.close(self.fd)
            raise
        self.free = [(0, size)]  # sorted (offset, size) ranges

    def close(self):
        try:
            self.map.close()
        except BufferError:  # views still exported: the mapping lives on with them
            pass
        try:
            os.close(self.fd)
        except OSError:
            pass


class Block:
    """``size`` bytes at ``offset`` of ``segment``; ``refs``: live ArenaBuffers."""

    __slots__ = ("segment", "offset", "size", "refs")

    def __init__(self, segment, offset, size):
        self.segment = segment
        self.offset = offset
        self.size = size
        self.refs = 0

    @property
    def key(self):
        return self.segment.seg_id, self.offset


class ArenaBuffer:
    """One holder of a block; ``view`` is the block's read-only memory, ``nbytes`` its size."""

    is_shared_buffer = True
    __slots__ = ("arena", "block", "nbytes", "__weakref__")

    def __init__(self, arena, block, nbytes):
        self.arena = arena
        self.block = block
        self.nbytes = nbytes
        block.refs += 1  # under the arena's lock or before the block is visible to others

    @property
    def view(self):
        return self.arena.export(self)

    def writable(self):
        b = self.block
        return memoryview(b.segment.map)[b.offset:b.offset + self.nbytes]

    def __del__(self):
        arena = self.arena
        if arena is not None:
            arena.release(self.block)


class Arena:
    def __init__(self, capacity):
        self.capacity = int(capacity)
        self._lock = threading.Lock()
        self._segments = {}
        self._blocks = {}            # key -> live Block
        self._next_id = 1
        self._total = 0              # bytes of all segments
        self._free_bytes = 0
        self._deferred = collections.deque()
        self._closed = False

    # -- allocation --------------------------------------------------------------------------
    def copy_of(self, raw):
        """An ArenaBuffer holding a copy of ``raw`` (a contiguous memoryview), or None when the
        arena is full (the caller falls back to a memfd of its own)."""
        n = raw.nbytes
        block = self._alloc(n)
        if block is None:
            return None
        buf = ArenaBuffer(self, block, n)
        buf.writable()[:] = raw.cast("B")
        return buf

    def _alloc(self, n):
        size = (n + ALIGN - 1) // ALIGN * ALIGN
        with self._lock:
            self._apply_deferred()
            if self._closed:
                return None
            for segment in self._segments.values():
                block = self._take(segment, size)
                if block is not None:
                    return block
            seg_size = max(SEGMENT_MIN, (size + SEGMENT_ROUND - 1) // SEGMENT_ROUND * SEGMENT_ROUND)
            if self._total + seg_size > self.capacity:
                return None
            try:
                segment = Segment(self._next_id, seg_size)
            except OSError:  # no memory for a whole segment: the caller tries a memfd of n bytes
                return None
            self._next_id += 1
            self._segments[segment.seg_id] = segment
            self._total += seg_size
            self._free_bytes += seg_size
            return self._take(segment, size)

    def _take(self, segment, size):
        for i, (offset, free) in enumerate(segment.free):
            if free >= size:
                if free == size:
                    del segment.free[i]
                else:
                    segment.free[i] = (offset + size, free - size)
                self._free_bytes -= size
                block = Block(segment, offset, size)
                self._blocks[block.key] = block
                return block
        return None

    # -- release -----------------------------------------------------------------------------
    def release(self, block):
        """One ArenaBuffer of ``block`` is gone (from ``__del__``: never waits for a hold of
        its own thread; another thread's, of this leaf lock, is short). Not ``acquire(False)``
        then ``try``: a signal handler that raises as the acquire returns would leave the lock
        held for good; ``with`` has no such gap."""
        if self._lock.locked():
            self._deferred.append(block)
            return
        with self._lock:
            self._release_locked(block)
            self._apply_deferred()

    def _apply_deferred(self):
        while self._deferred:
            self._release_locked(self._deferred.popleft())

    def _release_locked(self, block):
        block.refs -= 1
        if block.refs > 0 or self._closed:
            return
        self._blocks.pop(block.key, None)
        segment = block.segment
        free = segment.free
        start, size = block.offset, block.size
        i = bisect.bisect(free, (start, 0))
        if i < len(free) and free[i][0] == start + size:  # merge with the next range
            size += free[i][1]
            del free[i]
        if i > 0 and free[i - 1][0] + free[i - 1][1] == start:  # and the previous one
            start, size = free[i - 1][0], free[i - 1][1] + size
            del free[i - 1]
            i -= 1
        free.insert(i, (start, size))
        self._free_bytes += block.size
        if self._free_bytes > RETAIN_BYTES:
            self._punch(segment, block.offset, block.size)

    @staticmethod
    def _punch(segment, offset, size):
        page = mmap.PAGESIZE
        first = (offset + page - 1) // page * page
        last = (offset + size) // page * page
        if last > first:
            try:
                segment.map.madvise(mmap.MADV_REMOVE, first, last - first)
            except (OSError, AttributeError, ValueError):
                pass

    # -- lookups -----------------------------------------------------------------------------
    def adopt(self, key, nbytes):
        """A new ArenaBuffer of the live block ``key`` (a worker returned a view of it; the
        worker's pin keeps it live until this holder exists). None if it is gone."""
        with self._lock:
            block = self._blocks.get(key)
            if block is None:
                return None
            return ArenaBuffer(self, block, nbytes)

    def segment(self, seg_id):
        return self._segments.get(seg_id)

    def export(self, buf):
        """A read-only view of ``buf``'s bytes that keeps ``buf`` (and so the block) alive."""
        b = buf.block
        view = shm.exported_view(b.segment.map, b.offset, buf.nbytes, buf)
        return view

    def close(self):
        with self._lock:
            self._closed = True
            segments = list(self._segments.values())
            self._segments.clear()
            self._blocks.clear()
        for segment in segments:
            segment.close()


class Pins:
    """The blocks one worker received (an ArenaBuffer per reference sent), released as the
    worker reports its views of them gone, or all at once when it dies. Leaf lock."""

    def __init__(self):
        self._lock = threading.Lock()
        self._held = {}  # key -> list of ArenaBuffer

    def add(self, buf):
        with self._lock:
            self._held.setdefault(buf.block.key, []).append(buf)

    def drop(self, key):
        with self._lock:
            held = self._held.get(key)
            if held:
                held.pop()  # its __del__ releases the block (the arena's lock is a leaf too)
                if not held:
                    del self._held[key]

    def clear(self):
        with self._lock:
            held, self._held = self._held, {}
        held.clear()



class DriverCodec:
    """How a driver-side channel sends arena blocks to its worker and reads the blocks the
    worker sends back. ``encode`` runs under the channel's lock, in queue order: a segment is
    announced (its descriptor sent) before the first block of it, once per channel."""

    def __init__(self, arena, pins):
        self.arena = arena
        self.pins = pins
        self._announced = set()

    def encode(self, buf):
        from ray_adapter.core.embedded import channel

        if type(buf) is not ArenaBuffer:
            raise channel.ProtocolError(f"cannot send a {type(buf).__name__} to a worker")
        segment = buf.block.segment
        pieces = []
        if segment.seg_id not in self._announced:
            self._announced.add(segment.seg_id)
            pieces.append([channel.segment_header(segment.seg_id, segment.size), segment.fd, segment])
        self.pins.add(buf)  # until the worker reports its views of it gone
        pieces.append([channel.block_header(segment.seg_id, buf.block.offset, buf.nbytes), None, None])
        return pieces

    def decode(self, key, nbytes):
        buf = self.arena.adopt(key, nbytes)
        if buf is None:
            from ray_adapter.core.embedded.channel import ProtocolError

            raise ProtocolError(f"a worker referred to arena block {key}, which is gone")
        return buf

    def segment(self, seg_id, fd, size):
        from ray_adapter.core.embedded.channel import ProtocolError

        os.close(fd)
        raise ProtocolError("a worker announced an arena segment")


class WorkerCodec:
    """A worker's side: keeps the descriptors of the driver's segments, maps each block
    reference it receives as a :class:`~ray_adapter.core.shm.RemoteBlock` of its own (private),
    sends reused blocks back by reference. ``released(key)`` is called when the views of one
    received reference are all gone. The descriptors stay open for the process's life (a
    runtime has a few segments, never removed while it runs)."""

    def __init__(self, released):
        self._segments = {}  # segment id -> (fd, size)
        self._released = released

    def segment(self, seg_id, fd, size):
        if seg_id in self._segments:  # announced once per channel: never again in practice;
            os.close(fd)              # the first stays (blocks made from it may map it again)
            return
        self._segments[seg_id] = (fd, size)

    def decode(self, key, nbytes):
        segment = self._segments.get(key[0])
        if segment is None or key[1] + nbytes > segment[1]:
            from ray_adapter.core.embedded.channel import ProtocolError

            raise ProtocolError(f"arena block {key} ({nbytes} bytes) of a segment never announced")
        return shm.RemoteBlock(key, nbytes, segment[0], self._released)

    @staticmethod
    def encode(buf):
        from ray_adapter.core.embedded import channel

        if type(buf) is not shm.RemoteBlock:
            raise channel.ProtocolError(f"cannot send a {type(buf).__name__} to the driver")
        return [[channel.block_header(buf.key[0], buf.key[1], buf.nbytes), None, buf]]
