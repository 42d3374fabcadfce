"""Framed messaging over a connected Unix stream socket (driver <-> worker).

A frame is a message body (bytes, encoded by :mod:`.protocol`) followed by its buffers: small
ones inline, shared-memory ones (:class:`~ray_adapter.core.shm.ShmBuffer`) as a file
descriptor passed with SCM_RIGHTS, so large arrays never go through the socket.

Threads: :meth:`Channel.send` / :meth:`Channel.enqueue` may be called from any thread, also
while the caller holds a component's lock (enqueueing is a list append under the channel's own
leaf lock, never I/O). The bytes are written by :meth:`Channel.flush`, outside every lock, by
whichever caller finds no flush under way: frames queued meanwhile by other threads go out in
the same write (batching), in queue order. A caller never waits for a slow peer: what the
socket does not take at once is finished by a short-lived writer thread (at most one per
channel at a time). :meth:`Channel.recv` is called by one thread only.

Deferred flushing (:meth:`Channel.post`, :meth:`Channel.mark_posted`) is :mod:`.posts`:
frames posted in a burst go out in a few large writes, flushed before the posting thread
blocks or by the kick thread soon after.
"""
import array
import collections
import os
import socket
import struct
import threading
import time
from threading import get_ident

from ray_adapter.core.embedded.posts import flush_posted, posted as _posted
from ray_adapter.core.shm import ShmBuffer
from ray_adapter.core.threads import SignalsDeferred, main_thread_ident, start_daemon

_HEADER = struct.Struct("!II")   # body length, number of buffers
_BUF = struct.Struct("!BQ")      # buffer kind, length in bytes
_HEADER_SIZE, _BUF_SIZE = _HEADER.size, _BUF.size
_MSG_CTRUNC = int(socket.MSG_CTRUNC)
_MSG_DONTWAIT = int(socket.MSG_DONTWAIT)
# Sends never raise SIGPIPE (a program may have set it to its default: a dead peer must not
# end this process; the reader reports the peer's exit).
_MSG_NOSIGNAL = int(getattr(socket, "MSG_NOSIGNAL", 0))
_RECV_BUFFER = 1 << 18           # read-ahead buffer per channel (bytes)
_INLINE, _SHARED, _ARENA, _SEGMENT = 0, 1, 2, 3
_ARENA_REF = struct.Struct("!IQ")  # after an _ARENA / _SEGMENT frame header: segment id, offset
_ARENA_REF_SIZE = _ARENA_REF.size
_CHUNK = 1 << 16
#: Descriptors per sendmsg at most; the receiver's ancillary buffer holds exactly this many.
MAX_FDS = 32
_COALESCE = 1 << 18  # join small pieces up to this many bytes into one write


class ChannelClosed(EOFError):
    """The peer closed the connection (or died)."""


class ProtocolError(ChannelClosed):
    """The byte stream broke the framing rules (truncated descriptors, a missing fd...)."""


class Channel:
    """One end of a socket pair."""

    def __init__(self, sock):
        self.sock = sock
        self._lock = threading.Lock()     # leaf lock: guards _segments, _flushing, _closed
        self._written = threading.Condition(self._lock)  # a flush ended (wait_written)
        self._out = collections.deque()  # [data, fd or None] pieces of queued frames
        self._flushing = False
        self._closed = False
        self._last_post = 0.0  # time.monotonic() of the last post (burst detection)
        self._deferred = False  # posted frames wait for a flush (a burst under way)
        self._rbuf = bytearray(_RECV_BUFFER)  # read ahead: bytes _rpos.._rend are unread
        self._rview = memoryview(self._rbuf)
        self._rpos = self._rend = 0
        self._fds = collections.deque()
        self._anc = socket.CMSG_SPACE(MAX_FDS * array.array("i").itemsize)
        self.codec = None  # arena blocks: set by the owner (driver: pins; worker: mappings)

    # -- sending -----------------------------------------------------------------------------
    def enqueue(self, body, buffers=()):
        """Queue one frame: ``body`` (bytes) and ``buffers`` (bytes-like, or shared buffers:
        :mod:`ray_adapter.core.shm`). Never blocks on I/O; call :meth:`flush` after releasing
        any lock held."""
        pieces = [[_HEADER.pack(len(body), len(buffers)) + body, None, None]]
        blocks = None
        for buf in buffers:
            kind = type(buf)
            if kind is bytes or kind is memoryview or kind is bytearray:
                view = memoryview(buf).cast("B")
                pieces.append([_BUF.pack(_INLINE, view.nbytes), None, None])
                pieces.append([view, None, None])
            elif kind is ShmBuffer:
                # The header carries the descriptor; the buffer stays alive until it is sent.
                pieces.append([_BUF.pack(_SHARED, buf.nbytes), buf.fd, buf])
            else:  # an arena block: the codec encodes it, in queue order (below)
                pieces.append(buf)
                blocks = True
        with self._lock:
            if self._closed:
                return
            if blocks:
                encoded = []
                for piece in pieces:
                    if type(piece) is list:
                        encoded.append(piece)
                    else:
                        encoded.extend(self.codec.encode(piece))
                pieces = encoded
            self._out.extend(pieces)

    def wait_written(self, timeout=None):
        """:meth:`flush`, then block until what was queued is written, also by another thread
        that holds the flushing role now (or the channel closed), or ``timeout`` seconds
        passed (None: no limit). Returns True when it was written."""
        self.flush()
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while self._flushing and not self._closed:  # it writes until the queue is empty
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._written.wait(left)
            return not self._out

    def send(self, body, buffers=()):
        """:meth:`enqueue` then :meth:`flush`."""
        self.enqueue(body, buffers)
        self.flush()

    def post(self, body, buffers=()):
        """:meth:`enqueue`, and have it flushed soon (see the module notes)."""
        if get_ident() == main_thread_ident:  # (a frame queued and never posted would wait)
            with SignalsDeferred():
                self.enqueue(body, buffers)
                _posted.add(self)
        else:
            self.enqueue(body, buffers)
            _posted.add(self)

    def mark_posted(self):
        """Have what is queued flushed soon (after :meth:`enqueue` under a lock)."""
        _posted.add(self)

    def flush(self):
        """Write every queued frame, unless another thread is doing so (it writes ours too).

        Never blocks on a slow peer: bytes go out without waiting (MSG_DONTWAIT) while the
        socket takes them; if the peer stops reading, the rest is handed to a writer thread of
        this channel (which may wait) and the caller returns. A broken connection drops what
        is queued; the reader side reports the peer's exit.

        On the main thread signals are deferred meanwhile (:class:`.threads.SignalsDeferred`):
        a handler that raised between taking the writer's role and giving it back, or between
        a write and its bookkeeping, would leave the queue unwritten for good or a frame cut."""
        self._deferred = False
        if self._flushing or not self._out:  # (a hint without the lock: checked again under it)
            return
        if get_ident() == main_thread_ident:
            with SignalsDeferred():
                self._take_role_and_drain()
        else:
            self._take_role_and_drain()

    def _take_role_and_drain(self):
        with self._lock:
            if self._flushing or not self._out:
                return
            self._flushing = True
        self._drain(_MSG_DONTWAIT | _MSG_NOSIGNAL)

    def _drain(self, flags):
        """Write queued segments; the calling thread holds the flushing role."""
        segments = self._out
        while True:
            with self._lock:
                if not segments:
                    self._flushing = False
                    self._written.notify_all()
                    return
                data, fd, keep = segments.popleft()
                if fd is None and len(data) < _COALESCE and segments and segments[0][1] is None:
                    run, size = [data], len(data)  # join small pieces into one write
                    while segments and segments[0][1] is None and size < _COALESCE:
                        piece = segments.popleft()[0]
                        run.append(piece)
                        size += len(piece)
                    data = b"".join(run)
            try:
                if fd is not None:
                    sent = self.sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                                       array.array("i", [fd]))], flags)
                else:
                    sent = self.sock.send(data, flags)
            except BlockingIOError:
                sent = -1
            except (OSError, ValueError):
                with self._lock:
                    self._closed = True
                    segments.clear()
                    self._flushing = False
                    self._written.notify_all()
                return
            if sent == len(data):
                continue
            with self._lock:  # put back what is left (its descriptor went with the first byte)
                if sent <= 0:
                    segments.appendleft([data, fd, keep])
                else:
                    segments.appendleft([memoryview(data).cast("B")[sent:], None, keep])
            if flags & _MSG_DONTWAIT:  # the peer is not reading now: a writer thread finishes
                start_daemon(self._drain, "ray-adapter-channel-writer", (_MSG_NOSIGNAL,))
                return

    # -- receiving ---------------------------------------------------------------------------
    def recv(self):
        """Block for the next ``(body, buffers)``; raises ChannelClosed at the end of the
        stream and ProtocolError for a malformed one. ``body`` is a memoryview valid until the
        next ``recv`` (decode it at once); small inline buffers come back as bytes, large ones
        as read-only memoryviews of their own, shared ones as :class:`ShmBuffer`."""
        self._need(_HEADER_SIZE)
        size, nbuf = _HEADER.unpack_from(self._rbuf, self._rpos)
        self._rpos += _HEADER_SIZE
        if size > _RECV_BUFFER - _HEADER_SIZE:
            body = self._read_large(size)
        else:
            self._need(size)
            body = self._rview[self._rpos:self._rpos + size]
            self._rpos += size
        if not nbuf:
            return body, ()
        if type(body) is memoryview and nbuf:
            body = bytes(body)  # the buffers below may move the read buffer under it
        buffers = []
        while len(buffers) < nbuf:  # (a segment announcement is a frame without a buffer)
            self._need(_BUF_SIZE)
            kind, length = _BUF.unpack_from(self._rbuf, self._rpos)
            self._rpos += _BUF_SIZE
            if kind == _SHARED:
                buffers.append(ShmBuffer.from_fd(self._take_fd(), length))
            elif kind == _ARENA:
                self._need(_ARENA_REF_SIZE)
                seg_id, offset = _ARENA_REF.unpack_from(self._rbuf, self._rpos)
                self._rpos += _ARENA_REF_SIZE
                buffers.append(self.codec.decode((seg_id, offset), length))
            elif kind == _SEGMENT:
                self._need(_ARENA_REF_SIZE)
                seg_id, _ = _ARENA_REF.unpack_from(self._rbuf, self._rpos)
                self._rpos += _ARENA_REF_SIZE
                self.codec.segment(seg_id, self._take_fd(), length)
            elif kind == _INLINE:
                if length >= _CHUNK:
                    buffers.append(self._read_large(length))
                else:
                    self._need(length)
                    buffers.append(bytes(self._rview[self._rpos:self._rpos + length]))
                    self._rpos += length
            else:
                raise ProtocolError(f"unknown buffer kind {kind}")
        return body, buffers

    def buffered(self):
        """True when bytes already read ahead wait in the read buffer (a ``recv`` may find a
        whole frame there without touching the socket)."""
        return self._rend > self._rpos

    def read_ready(self):
        """Read what the socket holds now into the read buffer, without waiting. True when a
        whole frame waits there (a ``recv`` then returns it without touching the socket);
        False while the next frame is incomplete; None when it is larger than the read buffer
        (only a blocking ``recv`` can read it). Raises :class:`ChannelClosed` at the end of
        the stream. For a reader that must never block mid-frame: a ``get`` that reads its
        reply itself keeps its timeout and its Ctrl-C (``driver_reading``)."""
        if self._rpos == self._rend:  # all read (most calls): the buffer starts afresh
            self._rpos = self._rend = 0
        elif self.frame_buffered():
            return True
        else:  # room for the rest of the frame
            self._to_front()
        if self._rend < _RECV_BUFFER:
            self._rend += self._recv_into(self._rview[self._rend:], _MSG_DONTWAIT, True)
            if self.frame_buffered():
                return True
        return None if self._rend == _RECV_BUFFER else False

    def frame_buffered(self):
        """True when the next frame lies whole in the read buffer (its header, body, and the
        headers and bytes of its buffers; a shared buffer's descriptor came with its bytes).
        No I/O."""
        pos, end, buf = self._rpos, self._rend, self._rbuf
        if end - pos < _HEADER_SIZE:
            return False
        size, nbuf = _HEADER.unpack_from(buf, pos)
        pos += _HEADER_SIZE + size
        for _ in range(nbuf):
            if end - pos < _BUF_SIZE:
                return False
            kind, length = _BUF.unpack_from(buf, pos)
            pos += _BUF_SIZE
            if kind == _INLINE:
                pos += length
            elif kind == _ARENA or kind == _SEGMENT:
                pos += _ARENA_REF_SIZE
        return pos <= end

    def _take_fd(self):
        if not self._fds:
            raise ProtocolError("a shared buffer arrived without its file descriptor")
        return self._fds.popleft()

    def _need(self, n):
        """Make ``n`` bytes available at ``_rpos`` in the read buffer (n <= its size)."""
        if self._rend - self._rpos >= n:
            return
        self._to_front()
        while self._rend - self._rpos < n:
            self._rend += self._recv_blocking(self._rview[self._rend:])

    def _to_front(self):
        """Move the unread bytes of the read buffer to its start (room after them to read)."""
        if self._rpos:
            have = self._rend - self._rpos
            self._rview[:have] = self._rview[self._rpos:self._rend]
            self._rpos, self._rend = 0, have

    def _read_large(self, n):
        """``n`` bytes into a buffer of their own (read-only memoryview), what the read buffer
        holds first, the rest straight from the socket."""
        out = bytearray(n)
        view = memoryview(out)
        have = min(self._rend - self._rpos, n)
        view[:have] = self._rview[self._rpos:self._rpos + have]
        self._rpos += have
        filled = have
        while filled < n:
            filled += self._recv_blocking(view[filled:])
        return view.toreadonly()

    def _recv_into(self, view, flags=0, none_ok=False):
        """One recvmsg into ``view``; keeps any descriptors that came with the bytes.
        ``none_ok``: 0 when nothing waits (``flags`` has MSG_DONTWAIT), not an error."""
        try:
            n, ancdata, flags, _addr = self.sock.recvmsg_into([view], self._anc, flags)
        except BlockingIOError:
            if none_ok:
                return 0
            raise ChannelClosed("no bytes on a blocking read") from None
        except (OSError, ValueError) as exc:
            raise ChannelClosed(str(exc)) from None
        if ancdata:
            for level, kind, data in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds = array.array("i")
                    fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
                    self._fds.extend(fds)
        if flags & _MSG_CTRUNC:
            raise ProtocolError("file descriptors were truncated in transit (MSG_CTRUNC)")
        if n == 0:
            raise ChannelClosed("peer closed the connection")
        return n

    def _recv_blocking(self, view):
        flush_posted()  # about to block: write what this process queued first
        return self._recv_into(view)

    def detach(self):
        """In a process forked from this one (``os.fork`` in a task): forget this end. The
        locks are new (a thread of the parent may have held them at the fork), nothing queued
        or received is kept, and this process's copy of the descriptor is closed without a
        shutdown, so the connection stays the parent's alone: the child never writes on it, and
        the peer still sees the end of the stream when the parent dies. Later sends are
        dropped; a receive raises :class:`ChannelClosed`."""
        self._lock = threading.Lock()
        self._written = threading.Condition(self._lock)
        self._closed = True
        self._flushing = False
        self._out.clear()
        self._rpos = self._rend = 0
        while self._fds:
            try:
                os.close(self._fds.popleft())
            except OSError:
                pass
        try:
            self.sock.close()  # close(2) of this process's descriptor only: no shutdown(2)
        except OSError:
            pass

    def abort(self):
        """End the connection both ways without closing this end's descriptor: the reader
        (still watching it) sees the end of the stream and reaps the peer."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def let_go(self):
        """Close this process's descriptor of the socket only, without ending the connection
        (no ``shutdown``, no lock taken): for a process forked from the one that owns it,
        whose parent goes on using the connection."""
        try:
            self.sock.close()
        except OSError:
            pass

    def close(self):
        with self._lock:
            self._closed = True
            self._out.clear()
            self._written.notify_all()
        for closer in (lambda: self.sock.shutdown(socket.SHUT_RDWR), self.sock.close):
            try:
                closer()
            except OSError:
                pass
        while self._fds:  # descriptors received but never claimed by a frame
            try:
                os.close(self._fds.popleft())
            except OSError:
                pass


def segment_header(seg_id, size):
    """The frame header announcing arena segment ``seg_id`` (its descriptor goes with it)."""
    return _BUF.pack(_SEGMENT, size) + _ARENA_REF.pack(seg_id, 0)


def block_header(seg_id, offset, nbytes):
    """The frame header of a buffer that is ``nbytes`` at ``offset`` of arena segment ``seg_id``."""
    return _BUF.pack(_ARENA, nbytes) + _ARENA_REF.pack(seg_id, offset)
