"""Data a worker hands to its driver's process for a named handler there (``relay``), such as
the state of a ``tqdm_ray`` progress bar: what Ray carries in a magic-token line of the worker's
log, which the driver's log monitor turns back into data.

The driver's proxy registers a handler per topic (:func:`register`); a backend calls
:func:`deliver` in the driver for each relayed item, in the thread that received it (a worker's
reader thread, or the caller's own in the driver). Thread-safety: ``_handlers`` is written
under ``_lock`` and read with one dict lookup; a handler must not block (it may write to the
terminal). A topic with no handler drops its data.
"""
import threading
import traceback

_lock = threading.Lock()
_handlers = {}


def register(topic, handler):
    """Call ``handler(data)`` for each item relayed under ``topic`` (replacing any handler)."""
    with _lock:
        _handlers[topic] = handler


def deliver(topic, data):
    """Hand ``data`` (plain values: str, numbers, None, bool, lists, dicts) to the handler of
    ``topic``; a failing handler is reported on stderr, never raised to the caller."""
    handler = _handlers.get(topic)
    if handler is None:
        return
    try:
        handler(data)
    except Exception:  # noqa: BLE001 - a display handler must not break a reader thread
        traceback.print_exc()
