"""Which thread of the driver reads one worker's channel: the *read role*, driver side.

Each worker has a reader thread in the driver (``pool.WorkerPool._reader``). A synchronous
``ray.get`` of one object that a worker is computing may borrow that worker's role and read the
reply itself (:meth:`DriverReadRole.lend` / :meth:`~DriverReadRole.give_back`): the reply then
wakes the caller straight from the socket, instead of waking the reader thread, which would
handle it and then wake the caller -- one wake-up of a sleeping thread less per round trip.
The caller handles every message it reads exactly as the reader thread does (same dispatch,
same order), so nothing changes but which thread runs it.

The reader thread sleeps in ``epoll`` on the socket and a wake pipe, not in ``recv``; the
socket is disarmed while a caller holds the role (one ``epoll_ctl`` each way, no wake-up of
the reader), so the two never race for a message. Bytes a caller read ahead beyond its reply
wake the reader through its wake-up when it gives the role back. A caller also waits on a
wake-up of its own thread, set when the object it waits for is sealed by another thread (a
retry on another worker, a death, ``shutdown``): every wait has an owner that wakes it.

State: ``token`` is held by the thread reading the channel (the reader thread while it
handles what arrived, or the caller that borrowed the role); ``is_caller_reading()`` tells a
callback that it runs on a borrowing caller's thread (see ``backend.object_future``).
"""
import os
import select
import threading

_local = threading.local()


class _Wake:
    """A wake-up a thread can sleep on (an eventfd, or a pipe where Python has none): one per
    worker for its reader thread, one per thread that reads for its own get (closed when that
    thread ends, with its thread-local storage)."""

    __slots__ = ("read_fd", "write_fd")

    def __init__(self):
        if hasattr(os, "eventfd"):
            self.read_fd = self.write_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        else:
            self.read_fd, self.write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def set(self):
        """Wake the sleeper (any thread; never blocks)."""
        try:
            os.write(self.write_fd, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        except OSError:
            pass  # already set (full), or closed: nothing sleeps on it

    def clear(self):
        try:
            while os.read(self.read_fd, 512):
                pass
        except OSError:
            pass

    def close(self):
        fds = {self.read_fd, self.write_fd}
        self.read_fd = self.write_fd = -1
        for fd in fds:
            if fd >= 0:
                os.close(fd)

    def __del__(self):
        self.close()


def is_caller_reading():
    """True on a thread that reads a worker's channel for its own ``get`` (user callbacks
    must not run there: the caller may hold the user's locks)."""
    return getattr(_local, "reading", False)


def caller_wake():
    """The calling thread's wake-up (made on first use): set it to end its :meth:`DriverReadRole.caller_wait`."""
    wake = getattr(_local, "wake", None)
    if wake is None:
        wake = _local.wake = _Wake()
    return wake


class DriverReadRole:
    """The read role of one worker's channel in the driver (see the module's docstring).
    Holds two descriptors (an epoll and a wake-up) beside the worker's socket."""

    def __init__(self, sock_fd):
        self._sock_fd = sock_fd
        self.token = threading.Lock()
        self._wake = _Wake()
        self._epoll = select.epoll()
        self._epoll.register(sock_fd, select.EPOLLIN)
        self._epoll.register(self._wake.read_fd, select.EPOLLIN)
        self._ready = select.poll()  # has the socket bytes now? (without blocking)
        self._ready.register(sock_fd, select.POLLIN)
        self._closed = False

    # -- the reader thread ---------------------------------------------------------------------
    def reader_sleep(self):
        """Block the reader thread until the socket (while armed) or its wake-up is set."""
        self._epoll.poll()
        self._wake.clear()

    def readable_now(self):
        """True when the socket has bytes (or its end) now."""
        return bool(self._ready.poll(0))

    # -- a caller of get ----------------------------------------------------------------------
    def lend(self):
        """The role for the calling thread, if no one reads now: True, and the socket is
        disarmed for the reader thread; False (the caller waits as usual)."""
        if self._closed or not self.token.acquire(False):
            return False
        if self._closed:  # reaped meanwhile
            self.token.release()
            return False
        self._epoll.modify(self._sock_fd, 0)
        _local.reading = True
        return True

    def caller_wait(self, wake, timeout):
        """Block the borrowing caller until the socket has bytes (True), or ``wake`` (its
        :func:`caller_wake`) is set or ``timeout`` seconds (None: forever) pass (False)."""
        poller = select.poll()
        poller.register(self._sock_fd, select.POLLIN)
        poller.register(wake.read_fd, select.POLLIN)
        events = poller.poll(None if timeout is None else max(0.0, timeout) * 1000)
        return any(fd == self._sock_fd for fd, _ in events)

    def give_back(self, read_ahead):
        """End the loan: the socket is armed for the reader thread again, which is woken when
        ``read_ahead`` (bytes already in the channel's buffer)."""
        _local.reading = False
        try:
            self._epoll.modify(self._sock_fd, select.EPOLLIN)
        except (OSError, ValueError):
            pass  # the worker is being reaped: nobody reads any more
        if read_ahead:
            self._wake.set()
        self.token.release()

    def close(self):
        """Release the descriptors (the reader thread, at the worker's reaping, holding the
        token: no caller is inside)."""
        self._closed = True
        self._epoll.close()
        self._wake.close()
