"""Reference drops that arrive from ``__del__`` and weakref finalizers.

Those run inside whatever thread the garbage collector interrupts, possibly one that holds the
runtime's lock (a deadlock if they waited for it) or one in the middle of updating the same
counters (a lost update if they did not). So they only enqueue here (``SimpleQueue.put`` is
reentrant) and one thread applies them (under ``lock`` when one is given: a backend whose
state sits behind one lock passes it; one whose components lock themselves passes none).
"""
import contextlib
import queue
import threading
import traceback

from ray_adapter.core.threads import start_daemon

_STOP = object()


class DeferredReleases:
    """Runs ``release(target)`` callbacks in order, under ``lock`` if given, on a daemon thread."""

    def __init__(self, lock=None, name="ray-adapter-refs"):
        self._lock = lock if lock is not None else contextlib.nullcontext()
        self._queue = queue.SimpleQueue()
        start_daemon(self._loop, name)

    def put(self, release, target):
        """Queue ``release(target)``; safe to call from ``__del__`` and finalizers."""
        self._queue.put((release, target))

    def flush(self, timeout=10.0):
        """Wait until every release queued so far has been applied."""
        done = threading.Event()
        self._queue.put((lambda _: done.set(), None))
        done.wait(timeout)

    def close(self):
        """Stop the thread after the releases queued so far."""
        self._queue.put(_STOP)

    def _loop(self):
        while True:
            item = self._queue.get()
            with self._lock:
                while True:  # apply everything already queued under one acquisition
                    if item is _STOP:
                        return
                    release, target = item
                    try:
                        release(target)
                    except Exception:  # one bad drop must not stop every later one
                        traceback.print_exc()
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
