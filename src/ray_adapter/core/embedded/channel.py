"""Framed, thread-safe messaging over a connected Unix stream socket (driver <-> worker).

A message is a tuple of plain values pickled with the stdlib pickle, followed by zero or more
buffer frames: small buffers inline, shared-memory buffers (:mod:`ray_adapter.core.shm`) as a
file descriptor passed with SCM_RIGHTS, so large arrays are never copied through the socket.
"""
import array
import collections
import pickle
import socket
import struct
import threading

from ray_adapter.core.shm import ShmBuffer

_HEADER = struct.Struct("!QI")   # body length, number of buffer frames
_FRAME = struct.Struct("!BQ")    # frame kind, length
_INLINE, _SHARED = 0, 1
_CHUNK = 1 << 16
_MAX_FDS = 64


class ChannelClosed(EOFError):
    """The peer closed the connection (or died)."""


class Channel:
    """One end of a socket pair. ``send`` may be called from any thread; ``recv`` from one."""

    def __init__(self, sock):
        self.sock = sock
        self._send_lock = threading.Lock()
        self._buf = bytearray()
        self._pos = 0
        self._fds = collections.deque()
        self._anc = socket.CMSG_SPACE(_MAX_FDS * array.array("i").itemsize)

    # -- sending -----------------------------------------------------------------------------
    def send(self, message, buffers=()):
        """Send ``message`` (a picklable tuple) and ``buffers`` (bytes-like or ShmBuffer)."""
        body = pickle.dumps(message, protocol=5)
        with self._send_lock:
            self.sock.sendall(_HEADER.pack(len(body), len(buffers)) + body)
            for buf in buffers:
                if type(buf) is ShmBuffer:
                    frame = _FRAME.pack(_SHARED, buf.nbytes)
                    self.sock.sendmsg([frame], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                                 array.array("i", [buf.fd]))])
                else:
                    view = memoryview(buf).cast("B")
                    self.sock.sendall(_FRAME.pack(_INLINE, view.nbytes))
                    self.sock.sendall(view)

    # -- receiving ---------------------------------------------------------------------------
    def recv(self):
        """Block for the next ``(message, buffers)``; raises ChannelClosed at end of stream."""
        size, nbuf = _HEADER.unpack(self._read_exact(_HEADER.size))
        message = pickle.loads(self._read_exact(size))
        buffers = []
        for _ in range(nbuf):
            kind, length = _FRAME.unpack(self._read_exact(_FRAME.size))
            if kind == _SHARED:
                buffers.append(ShmBuffer.from_fd(self._fds.popleft(), length))
            else:
                buffers.append(self._read_exact(length))
        return message, buffers

    def _recv_into(self, view):
        """One recvmsg into ``view``; keeps any descriptors that came with the bytes."""
        try:
            n, ancdata, _flags, _addr = self.sock.recvmsg_into([view], self._anc)
        except (OSError, ValueError) as exc:
            raise ChannelClosed(str(exc)) from None
        for level, kind, data in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds = array.array("i")
                fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
                self._fds.extend(fds)
        if n == 0:
            raise ChannelClosed("peer closed the connection")
        return n

    def _read_exact(self, n):
        have = len(self._buf) - self._pos
        if have >= n:
            out = bytes(self._buf[self._pos:self._pos + n])
            self._pos += n
            return out
        out = bytearray(n)
        view = memoryview(out)
        view[:have] = self._buf[self._pos:]
        self._buf.clear()
        self._pos = 0
        filled = have
        if n - filled >= _CHUNK:  # a large frame: straight into its own buffer
            while filled < n:
                filled += self._recv_into(view[filled:])
            return memoryview(out).toreadonly()  # read-only, as object payloads must be
        while filled < n:  # small: read ahead into the shared buffer
            chunk = bytearray(_CHUNK)
            got = self._recv_into(memoryview(chunk))
            take = min(got, n - filled)
            view[filled:filled + take] = chunk[:take]
            filled += take
            if got > take:
                self._buf += chunk[take:got]
        return bytes(out)

    def close(self):
        for closer in (lambda: self.sock.shutdown(socket.SHUT_RDWR), self.sock.close):
            try:
                closer()
            except OSError:
                pass
