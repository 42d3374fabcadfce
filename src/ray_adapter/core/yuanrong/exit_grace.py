"""Interpreter exit on the yuanrong backend: calls already submitted get a grace period to finish
(so a task fired just before the driver ends still prints its output), from one hook per
process that runs early enough. Thread-safety: ``ExitGrace._lock`` (a leaf) guards which
backend is current.

yr's local mode also starts a worker thread of its own for a new instance when a call finds
its instances busy (a scale-out), and that thread hands the instance's creation to a thread
pool. When it gets there after the interpreter began to exit (on a loaded machine, after every
call of the program had ended), the pool refuses it and the thread dies printing
``RuntimeError: cannot schedule new futures after interpreter shutdown``: an instance nobody
needs any more, which a Ray driver's exit never shows. :func:`quiet_yr_exit_noise` keeps
exactly that one traceback off stderr (any other exception of any thread is printed as
before)."""
import atexit
import concurrent.futures.thread  # registers its exit hook before ours (see register)
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
        quiet_yr_exit_noise()
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


_REFUSED_AT_EXIT = "cannot schedule new futures after interpreter shutdown"


def is_yr_exit_noise(args):
    """True for ``threading.excepthook`` ``args`` of a yr local-mode worker thread refused by
    its thread pool because the interpreter is exiting (see the module notes)."""
    if args.exc_type is not RuntimeError or _REFUSED_AT_EXIT not in str(args.exc_value):
        return False
    if not concurrent.futures.thread._shutdown:
        return False
    try:
        from yr.local_mode.worker import Worker
    except ImportError:
        return False
    return isinstance(args.thread, Worker)


def quiet_yr_exit_noise():
    """Install (once per process) a ``threading.excepthook`` that drops
    :func:`is_yr_exit_noise` and passes everything else to the hook that was there."""
    previous = threading.excepthook
    if getattr(previous, "_ray_adapter_quiet", False):
        return

    def hook(args):
        if not is_yr_exit_noise(args):
            previous(args)

    hook._ray_adapter_quiet = True
    threading.excepthook = hook
