"""The runtime's own threads, started so that signals reach the program's main thread.

Python runs signal handlers (``KeyboardInterrupt`` for Ctrl-C, a user's SIGTERM handler, a
worker's cancel) in the main thread only, and a blocking call there (``time.sleep``, a lock
wait) is cut short only when the kernel delivers the process-directed signal to that very
thread. The kernel may hand it to any thread that does not block it: had a reader thread of the
runtime taken it, a driver sleeping in ``time.sleep(60)`` would ignore Ctrl-C for a minute.
Threads started by :func:`start_daemon` block the asynchronous signals programs handle (they
inherit the mask their creator holds while starting them), so those go to the main thread, or
to a thread of the user's.
"""
import contextlib
import os
import signal
import threading

#: The signals a runtime thread never takes: those a program may install handlers for.
BLOCKED = frozenset(getattr(signal, name) for name in (
    "SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGCHLD",
    "SIGWINCH") if hasattr(signal, name))


def unblock_signals():
    """Unblock :data:`BLOCKED` in the calling thread. A process inherits the mask of the thread
    that starts it: the runtime's processes (worker, template) call this first thing."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, BLOCKED)


@contextlib.contextmanager
def blocking_signals():
    """Threads started inside this block block :data:`BLOCKED` (the calling thread blocks
    them meanwhile: one that arrives then is delivered as the block ends)."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, BLOCKED)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def start_daemon(target, name, args=()):
    """Start a daemon thread named ``name`` running ``target(*args)`` with :data:`BLOCKED`
    blocked; returns it (mirrors ``threading.Thread(...).start()``)."""
    thread = threading.Thread(target=target, args=args, name=name, daemon=True)
    with blocking_signals():
        thread.start()
    return thread


def drain_wakeups(fd):
    """Read and drop the bytes waiting in ``fd``, the read end of a non-blocking wake-up pipe
    (a thread woken through it has seen the wake-up; what is left would wake it again)."""
    try:
        while os.read(fd, 64):
            pass
    except BlockingIOError:
        pass
