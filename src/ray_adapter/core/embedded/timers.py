"""Deadlines: one thread runs callbacks at their due time (timeouts of nested ``get``/``wait``).

A heap of ``(due, seq, callback)`` guarded by a condition; the thread sleeps until the earliest
deadline or until an earlier one is added (no polling). Callbacks run in the timer thread,
outside the lock, and must not block. The thread starts with the first deadline.
"""
import heapq
import itertools
import threading
import time
import traceback

from ray_adapter.core.threads import start_daemon


class Timer:
    __slots__ = ("cancelled",)

    def __init__(self):
        self.cancelled = False

    def cancel(self):
        self.cancelled = True


class Timers:
    def __init__(self):
        self._cond = threading.Condition(threading.Lock())
        self._heap = []
        self._seq = itertools.count()
        self._thread = None
        self._closed = False

    def call_later(self, seconds, callback):
        """Run ``callback()`` after ``seconds``; returns a :class:`Timer` to cancel it."""
        timer = Timer()
        due = time.monotonic() + max(0.0, seconds)
        with self._cond:
            if self._closed:
                return timer
            heapq.heappush(self._heap, (due, next(self._seq), timer, callback))
            if self._thread is None:
                self._thread = start_daemon(self._run, "ray-adapter-timers")
            elif self._heap[0][2] is timer:
                self._cond.notify()
        return timer

    def close(self):
        with self._cond:
            self._closed = True
            self._heap.clear()
            self._cond.notify()

    def _run(self):
        while True:
            with self._cond:
                while True:
                    if self._closed:
                        return
                    if self._heap:
                        delay = self._heap[0][0] - time.monotonic()
                        if delay <= 0:
                            _, _, timer, callback = heapq.heappop(self._heap)
                            break
                        self._cond.wait(delay)
                    else:
                        self._cond.wait()
            if not timer.cancelled:
                try:
                    callback()
                except Exception:  # one bad callback must not stop the timer thread
                    traceback.print_exc()
