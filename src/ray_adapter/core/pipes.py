"""Named pipes between the processes of one machine, carrying framed values: the channels of
compiled graphs (``ray.dag``'s ``experimental_compile``), set up once and then used with no
runtime in between (one ``write`` and one ``read`` system call per small value).

Setting up (:class:`PipeDir`): the driver makes a private directory (0700) of FIFOs and holds
each one open both ways, so that every process opening an end -- a reader ``O_RDONLY``, a writer
``O_WRONLY`` -- never blocks, whatever the order. A proof file (:meth:`PipeDir.proof`) lets a
process check that it sees the driver's directory, that is, runs on the same machine. Once every
process has opened its ends, the driver lets go of its holds and removes the directory: from
then on a reader sees end of file exactly when every writer of its pipe has closed (the
teardown, or the writer's process died), and nothing is left on disk.

Frames (:class:`FrameWriter` / :class:`FrameReader`): a value is pickled (protocol 5, the
runtime's pickler) with its contiguous buffers -- numpy arrays, torch CPU storages -- out of band,
written in one ``writev`` after the pickle; the reader reads them into buffers of its own and
hands numpy arrays out read-only, as Ray's ``ray.get`` does. A frame carries a ``kind`` (what
the value is: a result, a failure, ...) and a ``tag`` (whose it is) for the user of the pipe.

Threads: a :class:`FrameWriter` and a :class:`FrameReader` belong to one thread at a time (their
owner serializes access); a writer's drain thread finishes what its pipe could not take at once
(see :class:`FrameWriter`).
"""
import collections
import fcntl
import os
import pickle
import secrets
import select
import shutil
import struct
import tempfile
import threading

from ray_adapter.core import serialization
from ray_adapter.core.threads import start_daemon

#: ``kind, tag, pickle length, number of buffers``; each buffer's length (bytes) follows.
_HEADER = struct.Struct("<BIQI")
_LENGTH = struct.Struct("<Q")
#: The pipes' capacity, bytes (Linux's default most: ``/proc/sys/fs/pipe-max-size``): a value up
#: to this size is written without waiting for its reader.
PIPE_BYTES = 1 << 20
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
_READ_CHUNK = 1 << 13  # bytes read at once: a few small frames


class PipeClosed(EOFError):
    """Every writer of the pipe has closed it (or, writing, its reader has): the other side
    ended."""


class FrameUndecodable(Exception):
    """A frame was read whole but its value could not be unpickled here: ``kind`` and ``tag``
    are the frame's, ``cause`` what unpickling raised. The pipe stays usable."""

    def __init__(self, kind, tag, cause):
        super().__init__(kind, tag, cause)
        self.kind = kind
        self.tag = tag
        self.cause = cause


class PipeDir:
    """A private directory of FIFOs that one process (the driver) makes and holds open both
    ways until every other process has opened its ends (see the module's docstring).

    ``paths[name]`` is the FIFO of ``name``; :meth:`release` lets go of the holds and removes
    the directory (idempotent). Raises ``OSError`` when FIFOs cannot be made here."""

    def __init__(self, names):
        self.root = tempfile.mkdtemp(prefix="ray-adapter-cg-")  # 0700: only this user
        self._holds = []
        self.paths = {}
        try:
            token = secrets.token_hex(16)
            with open(os.path.join(self.root, "proof"), "x") as out:
                out.write(token)
            self.token = token
            for name in names:
                path = os.path.join(self.root, f"p{len(self.paths)}")
                os.mkfifo(path, 0o600)
                # O_RDWR on a FIFO never blocks (Linux) and counts as both a reader and a writer.
                self._holds.append(os.open(path, os.O_RDWR | os.O_CLOEXEC))
                _grow(self._holds[-1])
                self.paths[name] = path
        except BaseException:
            self.release()
            raise

    def proof(self):
        """``(path, token)``: :func:`same_machine` of these is True in a process that sees this
        directory."""
        return os.path.join(self.root, "proof"), self.token

    def release(self):
        """Close the holds and remove the directory; readers see end of file once their
        writers close."""
        holds, self._holds = self._holds, []
        for fd in holds:
            os.close(fd)
        shutil.rmtree(self.root, ignore_errors=True)


def same_machine(proof):
    """True when this process sees the :meth:`PipeDir.proof` ``(path, token)`` a driver made:
    it runs on the same machine, with the same files."""
    path, token = proof
    try:
        with open(path) as source:
            return source.read() == token
    except OSError:
        return False


def _grow(fd):
    try:
        fcntl.fcntl(fd, _F_SETPIPE_SZ, PIPE_BYTES)
    except OSError:
        pass  # a lower pipe-max-size: the default capacity serves, only slower for large values


def open_reader(path):
    """A :class:`FrameReader` over the FIFO ``path`` (does not block while its maker holds it)."""
    return FrameReader(os.open(path, os.O_RDONLY | os.O_CLOEXEC))


def open_writer(path):
    """A :class:`FrameWriter` over the FIFO ``path`` (does not block while its maker holds it)."""
    return FrameWriter(os.open(path, os.O_WRONLY | os.O_CLOEXEC))


#: ``value`` as the parts of a frame, ``(pickle bytes, [buffers])``; raises what pickling raises.
encode = serialization.dumps_for_channel


class FrameWriter:
    """The writing end of a pipe: :meth:`write` sends one frame and never blocks its caller.

    What the pipe cannot take at once (its reader is busy, the value is larger than the pipe)
    is copied (the caller may change its arrays right after) and finished by this writer's
    drain thread, started then and ended once it caught up: a graph whose actors wait on each
    other's pipes in any order cannot deadlock on a full one. Frames keep their order.

    Threads: :meth:`write` and :meth:`close` are called by one owner at a time (the caller
    serializes them); ``_lock`` guards the queue and the flags, shared with the drain thread,
    and is never held across a write. While ``_draining`` only the drain thread writes."""

    __slots__ = ("fd", "_lock", "_queue", "_draining", "_broken", "_closing")

    def __init__(self, fd):
        os.set_blocking(fd, False)
        self.fd = fd
        self._lock = threading.Lock()
        self._queue = collections.deque()  # lists of segments still to write, in order
        self._draining = False
        self._broken = False
        self._closing = False

    def write(self, kind, tag, parts):
        """Send ``parts`` (from :func:`encode`) as one frame of ``kind`` and ``tag`` (ints <
        256 and < 2**32). Raises :class:`PipeClosed` when the reader has gone."""
        data, buffers = parts
        header = _HEADER.pack(kind, tag, len(data), len(buffers))
        if buffers:
            header += b"".join(_LENGTH.pack(memoryview(b).nbytes) for b in buffers)
            segments = [memoryview(header), memoryview(data)] + [memoryview(b).cast("B") for b in buffers]
        else:
            segments = [memoryview(header + data)]  # most frames: one write
        # Read without the lock: only this owner sets them, so a False read stays False until
        # this call queues something itself.
        if self._draining or self._broken:
            with self._lock:
                if self._broken:
                    raise PipeClosed("the reader of this pipe has closed it")
                if self._draining:  # frames before this one still wait: after them
                    self._queue.append([bytes(s) for s in segments])
                    return
        try:
            rest = _write_some(self.fd, segments)
        except BrokenPipeError:
            with self._lock:
                self._broken = True
            raise PipeClosed("the reader of this pipe has closed it") from None
        if rest:
            self._queue_rest(rest)

    def _queue_rest(self, rest):
        """What the pipe did not take of a frame: copied, and the drain thread started."""
        with self._lock:
            self._queue.append([bytes(s) for s in rest])
            self._draining = True
        start_daemon(self._drain, "ray-adapter-pipe-writer")

    def _drain(self):
        poller = select.poll()
        poller.register(self.fd, select.POLLOUT)
        while True:
            with self._lock:
                if not self._queue:
                    self._draining = False
                    break
                segments = self._queue[0]
            try:
                poller.poll()
                rest = _write_some(self.fd, [memoryview(s) for s in segments])
            except OSError:  # the reader has gone: what is queued is dropped
                with self._lock:
                    self._broken = True
                    self._queue.clear()
                    self._draining = False
                break
            with self._lock:
                if rest:
                    self._queue[0] = rest
                else:
                    self._queue.popleft()
        with self._lock:
            closing, self._closing = self._closing, False
        if closing:
            self._close_fd()

    def close(self):
        """Close this end (idempotent) once what is queued is written; the reader sees end of
        file once every writer closed."""
        with self._lock:
            if self._draining:
                self._closing = True  # the drain thread closes it after the last frame
                return
        self._close_fd()

    def _close_fd(self):
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)


def _write_some(fd, segments):
    """Write what the pipe takes now of ``segments`` (memoryviews) without blocking; returns
    the rest (empty when all went). Raises ``BrokenPipeError`` when the reader has gone."""
    while segments:
        try:
            written = os.writev(fd, segments[:1024])
        except BlockingIOError:
            return segments
        while written and written >= segments[0].nbytes:
            written -= segments.pop(0).nbytes
        if written:
            segments[0] = segments[0][written:]
    return segments


def _decoded(kind, tag, data, buffers):
    """A read frame as ``(kind, tag, value)``; raises :class:`FrameUndecodable` when its value
    cannot be unpickled (the frame is consumed: the pipe goes on)."""
    try:
        return kind, tag, pickle.loads(data, buffers=buffers) if buffers else pickle.loads(data)
    except Exception as exc:  # noqa: BLE001
        raise FrameUndecodable(kind, tag, exc) from exc


class FrameReader:
    """The reading end of a pipe: :meth:`read` gives the next frame."""

    __slots__ = ("fd", "_pending", "_poller")

    def __init__(self, fd):
        self.fd = fd
        self._pending = bytearray()  # bytes read beyond the last frame given out
        self._poller = None

    def wait(self, timeout):
        """True when a frame (or end of file) can be read without blocking within ``timeout``
        seconds (None: forever)."""
        if self._pending or timeout is None:
            return True
        if self._poller is None:
            self._poller = select.poll()
            self._poller.register(self.fd, select.POLLIN | select.POLLHUP)
        return bool(self._poller.poll(max(0, timeout) * 1000))

    def _fill(self, nbytes):
        """Read until at least ``nbytes`` are pending; raises :class:`PipeClosed` at end of file."""
        while len(self._pending) < nbytes:
            chunk = os.read(self.fd, max(_READ_CHUNK, nbytes - len(self._pending)))
            if not chunk:
                raise PipeClosed("every writer of this pipe has closed it")
            self._pending += chunk

    def _take(self, nbytes):
        if len(self._pending) >= nbytes:
            out = bytes(self._pending[:nbytes])
            del self._pending[:nbytes]
            return out
        out = bytearray(nbytes)
        view = memoryview(out)
        have = len(self._pending)
        view[:have] = self._pending
        self._pending = bytearray()
        while have < nbytes:  # a large part: straight into its own buffer, no second copy
            got = os.readv(self.fd, [view[have:]])
            if not got:
                raise PipeClosed("every writer of this pipe has closed it")
            have += got
        return out

    def read(self):
        """The next frame: ``(kind, tag, value)``. Blocks until it came; raises
        :class:`PipeClosed` at end of file, :class:`FrameUndecodable` when the value cannot be
        unpickled."""
        if not self._pending:  # most frames: one read gives exactly one small frame
            chunk = os.read(self.fd, _READ_CHUNK)
            if not chunk:
                raise PipeClosed("every writer of this pipe has closed it")
            if len(chunk) > _HEADER.size:
                kind, tag, size, count = _HEADER.unpack_from(chunk)
                if not count and len(chunk) == _HEADER.size + size:
                    return _decoded(kind, tag, memoryview(chunk)[_HEADER.size:], None)
            self._pending += chunk
        self._fill(_HEADER.size)
        kind, tag, size, count = _HEADER.unpack_from(self._pending)
        del self._pending[:_HEADER.size]
        lengths = []
        if count:
            self._fill(_LENGTH.size * count)
            raw = self._take(_LENGTH.size * count)
            lengths = [_LENGTH.unpack_from(raw, i * _LENGTH.size)[0] for i in range(count)]
        data = self._take(size)
        return _decoded(kind, tag, data, [memoryview(self._take(n)).toreadonly() for n in lengths])

    def close(self):
        """Close this end (idempotent); the writer's next write fails."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)
