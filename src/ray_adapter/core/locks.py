"""Locks with an owner the code can ask about.

:class:`OwnedRLock` is a re-entrant lock that answers :meth:`~OwnedRLock.held_by_me`:
finalizers (``ObjectRef.__del__``) run in whichever thread happens to drop the last reference,
possibly in the middle of code that holds the lock and is changing what the finalizer would
change; such a finalizer must defer its work instead of re-entering.

It is the interpreter's own re-entrant lock (``_thread.RLock``, written in C), which keeps its
owner anyway: ``held_by_me`` is its ``_is_owned``, the method ``threading.Condition`` relies on
in every Python since 3.2. Tracking the owner in Python instead (an ``acquire`` that takes the
lock and then records who holds it) leaves a gap: a signal handler that raises between the two
(Ctrl-C's KeyboardInterrupt, a timeout's alarm) leaves the lock held for good, as
``tests/test_locks.py`` shows. The C lock takes, records and releases with no bytecode between.
"""
import _thread


class OwnedRLock(_thread.RLock):
    """A re-entrant lock (``with lock:``, ``acquire(blocking=True, timeout=-1)`` / ``release``,
    as ``threading.RLock``) that tells the calling thread whether it holds it. The answer is
    exact for the caller's own thread (another thread's may be stale by the time it is read)."""

    __slots__ = ()

    #: ``held_by_me() -> bool``: True if the calling thread holds the lock (at any depth).
    held_by_me = _thread.RLock._is_owned
