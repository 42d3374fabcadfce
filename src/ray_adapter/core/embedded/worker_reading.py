"""Which thread of a worker process reads the driver's socket: the *read role*.

A worker has two threads that can read its channel, never both at once (the holder of
:attr:`ReadRole.token` reads):

- the **main thread** holds the role while it is idle, blocked in ``recv`` itself, so a task
  or call that arrives wakes it straight from the socket: one wake-up per message, no hand-off
  to another thread;
- while the main thread runs work, the **helper** (the reader thread) reads whatever arrives
  meanwhile: a cancel, the replies a nested ``get`` waits for, stream acks, pipelined tasks,
  the end of the stream when the driver dies. It sleeps in ``epoll`` on the socket, which the
  main thread arms when work starts and disarms when it is idle again (one ``epoll_ctl``
  each, no wake-up): the helper wakes only when something does arrive during work. A
  concurrent actor's helper reads for good (its calls never run in the main thread).

Bytes the main thread read ahead (a burst written at once) are not a socket event: the main
thread wakes the helper through a pipe when work starts with such bytes waiting.

When work ends, the main thread takes the role back *before* its last result goes out, if the
helper is not reading at that moment: the driver may answer with the next task at once (on a
loaded machine, before this thread is idle again), and it is then read here, not handed over.
It never waits for the role with the result unsent (the helper may be running a user's
callback, as a future's done-callback), nor writes pending output first: the result goes out,
then the output, then it waits for the role.

State: ``token`` is held by the main thread while it reads (idle) and by the helper only while
it reads a message during work; ``main_wants`` (the main thread asks the role back: the helper
stops after the message it is reading) and ``permanent`` are written by the main thread.
"""
import os
import select
import threading

from ray_adapter.core.embedded.posts import flush_posted
from ray_adapter.core.threads import drain_wakeups


class ReadRole:
    """The read role of one worker's channel (see the module notes)."""

    def __init__(self, sock):
        self._sock_fd = sock.fileno()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._epoll = select.epoll()
        self._epoll.register(self._wake_r, select.EPOLLIN)
        self._epoll.register(self._sock_fd, 0)  # armed while the main thread runs work
        self._ready = select.poll()  # has the socket bytes now? (without blocking)
        self._ready.register(self._sock_fd, select.POLLIN)
        self.token = threading.Lock()
        self.token.acquire()      # the main thread starts as the reader
        self.main_reading = True  # the main thread holds the token (written by it only)
        self.main_wants = False
        self.permanent = False
        self.helper_reads = 0     # messages the helper read (written by the helper only)

    # -- main thread -------------------------------------------------------------------------
    def start_work(self, read_ahead, for_good=False):
        """The main thread runs work now: the helper reads what comes meanwhile (``for_good``:
        from now on, a concurrent actor). ``read_ahead``: bytes already wait in the channel's
        read buffer."""
        self.permanent = self.permanent or for_good
        self._epoll.modify(self._sock_fd, select.EPOLLIN)
        self.main_reading = False
        self.token.release()
        if read_ahead:
            self._wake()

    def reclaim(self, wait=True):
        """The main thread is idle: True once it is the reader again (after the message the
        helper may be reading); False for a role lent for good. ``wait=False``: None, at once,
        while the helper holds the role (it may be running a user callback); the socket stays
        disarmed until the main thread calls again."""
        if self.permanent:
            return False
        if self.main_reading:
            return True
        self._epoll.modify(self._sock_fd, 0)
        if not self.token.acquire(False):
            if not wait:
                return None
            self.main_wants = True
            self.token.acquire()
            self.main_wants = False
        self.main_reading = True
        return True

    def _wake(self):
        try:
            os.write(self._wake_w, b"\0")
        except BlockingIOError:  # wake-ups pending already: one is enough
            pass

    # -- helper thread -----------------------------------------------------------------------
    def serve(self, channel, receive):
        """The helper's loop: sleep until the socket has bytes during work (or a wake-up),
        then read messages with ``receive()`` while they are there and the main thread does
        not ask for the role. Returns when ``receive()`` returns False (Exit)."""
        ready = self._ready.poll
        while True:
            flush_posted()  # about to block: what this thread posted (a cancel's answer) goes
            for fd, _ in self._epoll.poll():
                if fd == self._wake_r:
                    drain_wakeups(self._wake_r)
            with self.token:  # waits while the main thread reads (it was idle meanwhile)
                while not self.main_wants and (channel.buffered() or ready(0)):
                    self.helper_reads += 1
                    if not receive():
                        return
