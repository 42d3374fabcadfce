"""Which thread of the driver reads one worker's socket: the reader thread, or a caller of
``ray.get`` that waits for that worker's reply (the driver's *read role*).

Each worker's channel has a reader thread (:meth:`WorkerPool._reader`) that decodes what the
worker sends and hands it to the dispatcher. A synchronous ``ray.get`` of one object whose
producer runs on a known worker need not wait for that thread to read the reply and then wake
it (two wake-ups per round trip): the caller *borrows* the role and reads the worker's frames
itself, one at a time, until its object is sealed (:meth:`ReadRole.read_until`). The worker
side's counterpart is :mod:`.worker_reading`. A driver attached to another process's runtime
(:mod:`.attached`) reads its one connection the same way: a caller waiting for a reply borrows
that connection's role.

- The reader thread sleeps in ``epoll`` on the socket, never in a blocking ``recv``: it takes
  :attr:`ReadRole.token`, reads the frames that are there, gives it back.
- A borrower takes the token without waiting (if the reader holds it, the borrower waits for
  its object as before: the reader dispatches the reply), disarms the socket in the reader's
  ``epoll`` (so the reply wakes one thread, not two), waits in ``poll`` on the socket and a
  wake-up pipe, reads and dispatches one frame and any whole frames already read ahead with
  it, re-arms, and gives the token back. It reads only frames that have arrived whole
  (``Channel.read_ready``, without waiting): a frame still arriving is waited for in ``poll``,
  with the caller's deadline and wake-ups, never in a blocking ``recv`` (a worker stopped
  mid-frame would hold the caller past its timeout and its Ctrl-C); one larger than the read
  buffer is left to the reader thread. Wake-up pipes are kept in a free list, one per
  borrower at a time, closed only when the runtime shuts down (a late wake-up never writes
  to a reused descriptor while it runs).
- Frames are read in order by one thread at a time, whichever holds the token; a frame is
  always dispatched by the thread that read it.
- Callbacks that a borrower's dispatch completes and that may run user code (a future's
  done-callbacks) run on another thread (the object table's ``run_elsewhere``): the caller
  of ``get`` may hold the user's locks, and user code never runs with a role held. The
  runtime's own callbacks (a dependent task submitted, a waiter woken) run at once, as on
  the reader thread.
- A frame is read and dispatched whole: on the main thread, the Python handlers of the
  signals a program may handle (SIGINT, SIGTERM, the timers', the user signals:
  :class:`.threads.SignalsDeferred`) are replaced for the borrowed read (a KeyboardInterrupt,
  or a timeout's exception, between ``recv`` and dispatch would lose the frame, or split it);
  such a signal meanwhile wakes the ``poll``, ends the read, and is delivered again to the
  handler that was in place once the role is given back. A handler of
  another signal that raises in the middle of a frame leaves the stream unusable: the channel
  is shut down, so the worker is reaped as a lost worker.
- A frame a borrower cannot handle (bytes that do not decode, a handler's bug) is treated as
  the reader treats it: reported on stderr, the channel ended, the worker reaped as lost (its
  task fails with WorkerCrashedError); the caller's wait goes on until then. Only a
  KeyboardInterrupt or SystemExit reaches the caller.
- Whoever seals the awaited object on another thread (a retry on another worker, a cancel, the
  worker's death, shutdown) wakes the borrower through :meth:`ReadRole.wake`.
- Whoever ends a channel from outside its reader ends it with ``Channel.abort`` (shutdown both
  ways), never ``close``: the reader sees the end of the stream and closes the socket as it
  leaves. (A socket closed while the reader sleeps in ``epoll`` leaves the epoll set without
  waking it: the thread would sleep for good.)

State: ``token`` is held by the reader while it reads and by a borrower for one frame;
``closed`` is set under the token by whichever thread met the channel's end or a frame it
could not handle (no borrower reads it again; the reader returns and its worker is reaped);
``_borrower`` (the borrower's wake-up pipe) is written by the thread that holds the token as
a borrower.
"""
import collections
import math
import os
import select
import sys
import threading
import time
import traceback

from ray_adapter.core.embedded.channel import ChannelClosed
from ray_adapter.core.embedded.posts import flush_posted
from ray_adapter.core.threads import SignalsDeferred, drain_wakeups

_free_wakes = collections.deque()  # _Wake objects not in use (deque: pop/append are atomic)


class _Wake:
    """A borrower's wake-up: a non-blocking pipe and a ``poll`` object watching its end."""

    __slots__ = ("r", "w", "poll")

    def __init__(self):
        self.r, self.w = os.pipe()
        os.set_blocking(self.r, False)
        os.set_blocking(self.w, False)
        self.poll = select.poll()
        self.poll.register(self.r, select.POLLIN)

    def drain(self):
        drain_wakeups(self.r)

    def ring(self):
        try:
            os.write(self.w, b"\0")  # the wait in poll ends
        except OSError:  # wake-ups pending already: one is enough
            pass


def _take_wake():
    try:
        return _free_wakes.pop()
    except IndexError:
        return _Wake()


def close_free_wakes():
    """Close the wake-up pipes not in use (a runtime shut down; one taken later is new)."""
    while True:
        try:
            wake = _free_wakes.pop()
        except IndexError:
            return
        for fd in (wake.r, wake.w):
            try:
                os.close(fd)
            except OSError:
                pass


class ReadRole:
    """The read role of one worker's channel in the driver (see the module notes).

    ``receive()``, given to :meth:`serve`, reads and dispatches one frame; it returns False
    when the reader must stop (read by a borrower: the channel is aborted, so the reader sees
    the end), and raises :class:`ChannelClosed` at the end of the stream."""

    def __init__(self, channel):
        self._channel = channel
        self._sock_fd = channel.sock.fileno()
        self._epoll = select.epoll()
        self._epoll.register(self._sock_fd, select.EPOLLIN)
        self._ready = select.poll()      # the socket has bytes now? (the reader, no blocking)
        self._ready.register(self._sock_fd, select.POLLIN)
        self.token = threading.Lock()
        self.closed = False
        self._borrower = None
        self._borrower_ident = None  # its thread (its own dispatch needs no wake-up)
        self._receive = None
        self.borrowed_frames = 0  # frames read by borrowers (tests; written under the token)

    # -- the reader thread ------------------------------------------------------------------
    def serve(self, receive):
        """The reader thread's loop: sleep until the socket has bytes (or a wake-up), then read
        frames with ``receive()`` while there are some. Returns when ``receive()`` returns
        False, or a borrower ended the channel (:attr:`closed`); raises what ``receive()``
        raises (the channel is then closed to borrowers)."""
        self._receive = receive
        channel, ready, poll = self._channel, self._ready.poll, self._epoll.poll
        while True:
            flush_posted()  # about to block: what this thread posted goes out first
            poll()
            with self.token:
                if self.closed:  # a borrower met the end, or a frame it could not handle
                    return
                try:
                    while channel.buffered() or ready(0):
                        if not receive():
                            self.closed = True
                            return
                except BaseException:
                    self.closed = True
                    raise

    def close(self):
        """Release the epoll (after the reader ended), and ``receive`` (which refers to the
        worker's handle, which refers to this role: the handle goes with its last reference)."""
        self.closed = True
        self._receive = None
        self._epoll.close()

    # -- a borrower --------------------------------------------------------------------------
    def wake(self):
        """Wake a borrower waiting in :meth:`read_until` (its object was sealed by another
        thread). Any thread; a no-op when nobody borrows the role."""
        wake = self._borrower
        if wake is not None and threading.get_ident() != self._borrower_ident:
            wake.ring()

    def read_until(self, until, deadline):
        """Read this channel's frames on the calling thread until ``until()`` is true, the
        ``deadline`` (``time.monotonic()``; None: none) passes, the reader holds the role, or
        the channel ended. Returns True when ``until()`` is true. On the main thread the Python
        handlers of the signals a program handles are deferred meanwhile
        (:class:`.threads.SignalsDeferred`): a signal ends the read and is delivered again once
        the role is given back (a Ctrl-C raises KeyboardInterrupt from here, by the handler
        that was in place)."""
        receive = self._receive
        if receive is None or self.closed or self.token.locked():
            return until()  # (locked: the reader or another caller reads; none is taken here)
        wake = None
        try:
            try:
                wake = _take_wake()
            except OSError:  # out of descriptors (EMFILE): the reader thread reads, as before
                return until()
            deferral = SignalsDeferred(wake.ring)
            with deferral:
                while not until() and not deferral.caught:
                    read = self._borrow(deadline, receive, wake)
                    if read is None:
                        break
                    if read:
                        flush_posted()  # what the frame's handling posted goes out now
        finally:
            if wake is not None:
                _free_wakes.append(wake)  # (a late wake-up left in it ends one later poll early)
        return until()

    def _borrow(self, deadline, receive, wake):
        """Take the role for one frame: wait for it, read and dispatch it. True: a frame was
        read; False: none (a wake-up); None: none will be read this way (the reader holds the
        role, time is up, the channel ended)."""
        if self.closed or not self.token.acquire(False):
            return None
        try:
            if self.closed:
                return None
            channel = self._channel
            self._borrower_ident = threading.get_ident()
            self._borrower = wake
            self._epoll.modify(self._sock_fd, 0)  # the reply wakes this thread only
            try:
                if not (channel.buffered() and channel.frame_buffered()):
                    flush_posted()  # about to block: what this thread posted goes out first
                    timeout = None
                    if deadline is not None:
                        timeout = max(0, math.ceil((deadline - time.monotonic()) * 1000))
                    wake.poll.register(self._sock_fd, select.POLLIN)
                    try:
                        events = dict(wake.poll.poll(timeout))
                    finally:
                        wake.poll.unregister(self._sock_fd)
                    if wake.r in events:
                        wake.drain()
                    if self._sock_fd not in events:
                        return False if events else None  # woken, or time is up
                try:
                    # Whole frames only, read without waiting (the deadline and a Ctrl-C hold
                    # mid-frame too). Not ready: False, the rest is to come (waited for in
                    # poll); None, larger than the read buffer (the reader thread reads it).
                    while True:
                        ready = channel.read_ready()
                        if not ready:
                            return ready
                        if not receive():  # the stream's last frame: the reader ends it
                            self.closed = True
                            channel.abort()
                            return None
                        self.borrowed_frames += 1
                        if not (channel.buffered() and channel.frame_buffered()):
                            break
                except ChannelClosed:  # the end, or a malformed stream (ProtocolError): ended
                    self.closed = True
                    channel.abort()    # both ways: the reader wakes, sees the end, reaps it
                    return None
                except BaseException as exc:
                    self.closed = True  # the stream may be cut mid-frame: the reader reads no
                    channel.abort()     # more of it, and reaps the worker
                    if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                        raise
                    # As when the reader meets it (bytes that do not decode, a handler's bug):
                    # reported, the worker stopped, and its task fails as a lost worker's does
                    # -- the caller's wait goes on until the reader has reaped it.
                    sys.stderr.write("ray-adapter: internal error handling a message of a "
                                     f"worker; the worker is stopped:\n{traceback.format_exc()}")
                    return None
                return True
            finally:
                self._borrower = None
                self._epoll.modify(self._sock_fd, select.EPOLLIN)
        finally:
            self.token.release()

