"""A process's descendants: adopting the ones that daemonize, and ending them all.

Used by the processes that must leave nothing behind when they end: a worker (a task's
daemonized subprocess) and a submitted job's runner (whatever its entrypoint started, even with
``setsid`` or a double fork). Linux only; elsewhere a process group still is.

Thread-safety: functions of the calling process; no state.
"""
import os
import signal

_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper():
    """Orphaned descendants are re-parented to this process (not to init), so it can end them
    when it ends."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def signal_descendants(signum, pid=None, outside_group=False):
    """Send ``signum`` to every live descendant of ``pid`` (default: this process); with
    ``outside_group``, only to those that left its process group (the group got it already)."""
    import psutil  # a worker imports this module for become_subreaper alone

    try:
        children = psutil.Process(pid).children(recursive=True)
        group = os.getpgid(pid or 0)
    except (psutil.Error, ProcessLookupError):
        return
    for child in children:
        try:
            if outside_group and os.getpgid(child.pid) == group:
                continue
            child.send_signal(signum)
        except (psutil.Error, ProcessLookupError):
            pass


def end_descendants():
    """SIGKILL every descendant of this process and reap what is re-parented to it."""
    while True:
        signal_descendants(signal.SIGKILL)
        try:
            pid, _ = os.waitpid(-1, 0)
        except ChildProcessError:
            return
        except InterruptedError:
            continue
