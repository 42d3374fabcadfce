"""Interpreter exit on the yuanrong backend: calls already submitted get a grace period to finish
(so a task fired just before the driver ends still prints its output), from one hook per
process that runs early enough. Thread-safety: ``ExitGrace._lock`` (a leaf) guards which
backend is current."""
import atexit
import concurrent.futures.thread  # noqa: F401 - registers its exit hook before ours (see register)
import threading

#: Seconds calls still running at interpreter exit are given to finish (see ``_at_exit``).
EXIT_GRACE_S = 1.0


class ExitGrace:
    """One exit hook per process for the started backend. It must run before
    ``concurrent.futures`` marks thread pools shut down at interpreter exit (yr's local mode
    hands queued calls to such a pool, which would then refuse them): hooks registered with
    ``threading._register_atexit`` run in reverse order before that flag is set, and before the
    ``atexit`` handlers (too late). ``concurrent.futures`` loads its thread pools lazily, so
    this module imports them first: their hook is then registered before ours and runs after
    it. Where that hook does not exist, ``atexit`` is used."""

    def __init__(self):
        self._lock = threading.Lock()
        self._backend = None
        self._registered = False

    def register(self, backend):
        with self._lock:
            self._backend = backend
            if self._registered:
                return
            self._registered = True
        hook = getattr(threading, "_register_atexit", None)
        try:
            (hook or atexit.register)(self._run)
        except RuntimeError:  # the interpreter is already exiting
            pass

    def unregister(self, backend):
        with self._lock:
            if self._backend is backend:
                self._backend = None

    def _run(self):
        with self._lock:
            backend = self._backend
        if backend is not None:
            backend._at_exit()


exit_grace = ExitGrace()
