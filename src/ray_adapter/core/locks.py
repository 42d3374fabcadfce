"""Locks with an owner the code can ask about.

:class:`OwnedRLock` is a re-entrant lock that answers :meth:`~OwnedRLock.held_by_me`:
finalizers (``ObjectRef.__del__``) run in whichever thread happens to drop the last reference,
possibly in the middle of code that holds the lock and is changing what the finalizer would
change; such a finalizer must defer its work instead of re-entering. ``threading.RLock``
keeps that answer private (``_is_owned``), so the owner is tracked here.
"""
import threading
from _thread import get_ident


class OwnedRLock:
    """A re-entrant lock (``with lock:``, ``acquire`` / ``release`` as ``threading.RLock``)
    that knows its owner thread. The owner and depth are written only by the thread holding
    the lock, so reading them without it is safe for the one question asked:
    "do *I* hold it?" (another thread's answer can be stale, never the caller's own)."""

    __slots__ = ("_lock", "_owner", "_depth")

    def __init__(self):
        self._lock = threading.RLock()
        self._owner = None
        self._depth = 0

    def acquire(self, blocking=True, timeout=-1):
        if not self._lock.acquire(blocking, timeout):
            return False
        self._owner = get_ident()
        self._depth += 1
        return True

    def release(self):
        self._depth -= 1
        if self._depth == 0:
            self._owner = None
        self._lock.release()

    __enter__ = acquire

    def __exit__(self, *exc):
        self.release()

    def held_by_me(self):
        """True if the calling thread holds the lock (at any depth)."""
        return self._owner == get_ident()
