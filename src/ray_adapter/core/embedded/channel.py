"""Framed, thread-safe messaging over a connected stream socket (driver <-> worker).

A message is a tuple of plain values pickled with the stdlib pickle, followed by zero or more
raw buffers (large object payloads) sent as their own frames, so big arrays are never copied
into the message body.
"""
import pickle
import socket
import struct
import threading

_HEADER = struct.Struct("!QI")  # body length, number of buffer frames
_LEN = struct.Struct("!Q")


class ChannelClosed(EOFError):
    """The peer closed the connection (or died)."""


class Channel:
    """One end of a socket pair. ``send`` may be called from any thread; ``recv`` from one."""

    def __init__(self, sock):
        self.sock = sock
        self._send_lock = threading.Lock()
        self._rfile = sock.makefile("rb", buffering=1 << 16)
        self.closed = False

    def send(self, message, buffers=()):
        """Send ``message`` (a picklable tuple) and ``buffers`` (bytes-like) as one unit."""
        body = pickle.dumps(message, protocol=5)
        with self._send_lock:
            if not buffers:
                self.sock.sendall(_HEADER.pack(len(body), 0) + body)
                return
            self.sock.sendall(_HEADER.pack(len(body), len(buffers)) + body)
            for buf in buffers:
                view = memoryview(buf).cast("B")
                self.sock.sendall(_LEN.pack(view.nbytes))
                self.sock.sendall(view)

    def recv(self):
        """Block for the next ``(message, buffers)``; raises ChannelClosed at end of stream."""
        header = self._read_exact(_HEADER.size)
        size, nbuf = _HEADER.unpack(header)
        message = pickle.loads(self._read_exact(size))
        buffers = []
        for _ in range(nbuf):
            (blen,) = _LEN.unpack(self._read_exact(_LEN.size))
            buffers.append(self._read_exact(blen))
        return message, buffers

    def _read_exact(self, n):
        try:
            data = self._rfile.read(n)
        except (OSError, ValueError) as exc:
            raise ChannelClosed(str(exc)) from None
        if data is None or len(data) < n:
            raise ChannelClosed("peer closed the connection")
        return data

    def close(self):
        self.closed = True
        for closer in (self._rfile.close, lambda: self.sock.shutdown(socket.SHUT_RDWR), self.sock.close):
            try:
                closer()
            except OSError:
                pass
