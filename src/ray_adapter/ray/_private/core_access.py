"""The proxy package's one door to the runtime core.

Every proxy module reaches the core through here: :func:`core` (the running core, started on
first use as Ray does), :func:`context` (the caller's :class:`~ray_adapter.core.CallContext`)
and :data:`translated` (a context manager turning the core's neutral errors into the Ray
exceptions, with Ray's text, on every call). A leaf module: it imports no other proxy module at
import time, so ``_private.worker``, ``_raylet``, ``actor`` and ``remote_function`` need not
import each other.
"""
import threading

from ray_adapter import core as _core
from ray_adapter.core import errors as core_errors

_start_lock = threading.RLock()


def core():
    """The running core; starts the runtime first if nobody called ``ray.init()``, as Ray does."""
    current = _core._current
    if current is not None:
        return current
    with _start_lock:
        if not _core.is_started():
            from ray_adapter.ray._private.worker import init

            init()
    return _core.current()


def started():
    return _core.is_started()


def context():
    """The caller's :class:`CallContext` (starts the runtime if needed)."""
    return core().context()


def context_if_started():
    """The caller's :class:`CallContext`, or None before ``ray.init()``."""
    current = _core._current
    return current.context() if current is not None else None


class _Translated:
    """``with translated:`` -- a core error raised inside becomes its Ray exception."""

    __slots__ = ()

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if value is not None and isinstance(value, core_errors.CoreError):
            from ray_adapter.ray._private.errors import from_core_error

            raise from_core_error(value) from None
        return False


translated = _Translated()


def ray_error(err):
    """The Ray exception for a core error (for code that must build it, not raise it)."""
    from ray_adapter.ray._private.errors import from_core_error

    return from_core_error(err)
