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
# (signal's wrappers convert each handler to an enum: a few microseconds per critical section)
from _signal import getsignal as _getsignal, raise_signal as _raise_signal, signal as _setsignal

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


#: The main thread's ident (where Python runs signal handlers).
main_thread_ident = threading.main_thread().ident
#: Signals whose Python handler (if one is set) :class:`SignalsDeferred` defers: those a program
#: may install handlers for (:data:`BLOCKED`: Ctrl-C, termination, the alarm, the user signals)
#: and the other timers' (``setitimer`` timeouts raise from theirs).
DEFERRED_SIGNALS = tuple(sorted(int(signum) for signum in BLOCKED | {
    getattr(signal, name) for name in ("SIGVTALRM", "SIGPROF", "SIGXCPU") if hasattr(signal, name)}))
_deferring = [False]  # the main thread is inside a SignalsDeferred section (main thread only)


class SignalsDeferred:
    """``with SignalsDeferred(on_signal):`` on the main thread, the Python handlers of
    :data:`DEFERRED_SIGNALS` are replaced by one that records the signal (and calls
    ``on_signal()``, if given: a wait meanwhile may be woken); once the block is over the
    handlers are back and each recorded signal is delivered again, to the handler in place (a
    KeyboardInterrupt, or a timeout's exception, raises from the ``with``). Python runs a
    handler between any two bytecodes: one that raises in the middle of bookkeeping that must
    be whole (a frame half written to a socket, a flag set for the writer's role) would leave a
    channel unusable for good. Elsewhere than the main thread (no handler runs there), and
    inside another such block, it does nothing. ``caught``: the signals recorded so far."""

    __slots__ = ("_on_signal", "_swapped", "caught", "_active")

    def __init__(self, on_signal=None):
        self._on_signal = on_signal
        self._swapped = []  # (signal, its handler), each added before the handler is replaced
        self.caught = set()
        self._active = False

    def __enter__(self):
        if _deferring[0] or threading.get_ident() != main_thread_ident:
            return self
        _deferring[0] = self._active = True
        try:
            for signum in DEFERRED_SIGNALS:
                handler = _getsignal(signum)
                if callable(handler):
                    self._swapped.append((signum, handler))
                    _setsignal(signum, self._defer)
        except BaseException:  # a signal's own handler raised before it was swapped
            self._leave()
            raise
        return self

    def _defer(self, signum, frame):
        self.caught.add(signum)
        if self._on_signal is not None:
            self._on_signal()

    def _leave(self):
        try:
            _restore(self._swapped)
        finally:
            _deferring[0] = self._active = False

    def __exit__(self, *exc):
        if not self._active:
            return False
        self._leave()
        for signum in sorted(self.caught):
            # Delivered again, to the handler in place: Python runs it at once (a handler that
            # raises, as SIGINT's KeyboardInterrupt or a timeout's alarm, raises from here).
            _raise_signal(signum)
        return False


def _restore(swapped):
    """Put back each ``(signal, handler)`` of ``swapped`` (emptied as it goes). A restored
    handler may raise before the rest are back (its signal came meanwhile): the rest are put
    back all the same, then that exception goes on."""
    try:
        while swapped:
            _setsignal(*swapped[-1])
            swapped.pop()
    finally:
        if swapped:
            _restore(swapped)
