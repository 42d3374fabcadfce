"""Deferred flushing of the frames posted on channels (:meth:`.channel.Channel.post`).

Frames posted in a burst (tasks started after a batch of results, thousands of ``.remote()``
calls) go out in a few large writes. A posted channel is flushed by the first of: any thread
about to block (:func:`flush_posted` runs before every blocking receive, ``get`` and
``wait``), or the kick thread, at most :data:`FLUSH_DELAY` seconds later. Synchronous round
trips pay no delay: the caller blocks right after posting, and a post that is not part of a
burst is written at once. Threads that always flush before they block (readers, a worker's
main thread: :func:`flushes_before_blocking`) do not arm the kick thread. The kick thread needs
the GIL: a driver thread that goes on into C code holding it leaves up to
:data:`MAX_DEFERRED_PIECES` frames waiting until it lets go; worker processes defer nothing
(:func:`write_posts_at_once`).

Threads: any thread may post; the set of posted channels and the kick thread's state are
guarded by :attr:`_Posted._cond` (a leaf lock, never held during I/O: channels are flushed
after it is released). A channel's ``_last_post`` / ``_deferred`` are hints written without a
lock (a stale value only moves one frame between "now" and "with the burst").
"""
import threading
from time import monotonic as _monotonic, sleep as _sleep

from ray_adapter.core.threads import SignalsDeferred, start_daemon

#: Longest a posted frame waits to be written when no thread blocks meanwhile (seconds).
FLUSH_DELAY = 0.0005
#: A post this soon (seconds) after the channel's previous post is part of a burst and is
#: batched (thousands of ``.remote()`` calls in a loop, some tens of microseconds apart); a
#: later one is written at once by the posting thread (no delay, no kick). Below a synchronous
#: round trip (about 150-200 us here): a ``ray.get(f.remote())`` loop is no burst, and does not
#: wake the kick thread for each call.
BURST_WINDOW = 0.0001
#: A posting thread writes its channel's queue itself once this many pieces wait in it: the
#: kick thread needs the GIL, so a driver that goes on into C code holding it leaves at most
#: these frames waiting until it lets go (or blocks, or posts again).
MAX_DEFERRED_PIECES = 32


class _Posted:
    """Channels with posted frames not yet flushed, and the kick thread that flushes them at
    most FLUSH_DELAY after the first was posted (it sleeps while nothing is posted). A channel
    is anything with ``flush()``, the queue ``_out`` and the burst hints ``_last_post`` (a
    ``time.monotonic()``) and ``_deferred``."""

    def __init__(self):
        self._cond = threading.Condition(threading.Lock())
        self._channels = set()
        self._armed = False
        self._thread = None

    def add(self, channel):
        now = _monotonic()
        last, channel._last_post = channel._last_post, now
        self_flushing = _local.self_flushing
        if not self_flushing and (
                not _bursts_deferred or len(channel._out) >= MAX_DEFERRED_PIECES
                or (now - last > BURST_WINDOW and not channel._deferred)):
            channel.flush()  # not in a burst (nothing to batch with), or batch enough: write now
            return
        channel._deferred = True  # a burst: later posts join it until it is written
        if self._armed and channel in self._channels:  # the kick writes it soon; lock-free: it
            return  # disarms, then takes the set (not a self-flushing thread's: may stay busy)
        with self._cond:
            self._channels.add(channel)
            if self._armed or self_flushing:
                return
            self._armed = True
            if self._thread is None:
                self._thread = start_daemon(self._run, "ray-adapter-flush")
            else:
                self._cond.notify()

    def flush(self):
        # (signals deferred on the main thread: channels taken off the set and not yet flushed
        # would wait for good if a handler raised between)
        with SignalsDeferred():
            with self._cond:
                if not self._channels:
                    return
                channels, self._channels = self._channels, set()
            for channel in channels:
                channel.flush()

    def _run(self):
        while True:
            with self._cond:
                while not self._armed:
                    self._cond.wait()
            _sleep(FLUSH_DELAY)
            with self._cond:
                self._armed = False
            self.flush()


class _ThreadFlags(threading.local):
    self_flushing = False  # this thread flushes what it posted before it blocks


posted = _Posted()
_local = _ThreadFlags()


def flushes_before_blocking():
    """Declare that the calling thread flushes posted frames itself before it blocks (a
    reader thread), so its posts need no kick."""
    _local.self_flushing = True


_bursts_deferred = True


def write_posts_at_once():
    """In this process a post from a thread that does not flush before it blocks is written
    at once, bursts included (worker processes: a result must never wait for the kick thread,
    which a call holding the GIL in C keeps out, nor be lost if the process ends next)."""
    global _bursts_deferred
    _bursts_deferred = False


def reset_after_fork():
    """In a forked child: no channel is posted and no kick thread runs (the parent's did not
    come along; its lock may have been held at the fork)."""
    posted.__init__()


def flush_posted():
    """Write every posted frame now (call before blocking)."""
    if posted._channels:
        posted.flush()
