"""The proxy package's one door to the runtime core.

Every proxy module reaches the core through here: :func:`core` (the running core, started on
first use as Ray does), :func:`context` (the caller's :class:`~ray_adapter.core.CallContext`)
and :data:`translated` (a context manager turning the core's neutral errors into the Ray
exceptions, with Ray's text, on every call). The bottom of the proxy's layers: it imports only
the proxy's exception translation (:mod:`.errors`), never a module that uses it. Starting the
runtime on first use calls the session's ``init``, which :mod:`.session` registers here when it
loads (:func:`set_starter`): the session sits above this module, as it checks options and
configures logging.
"""
import threading

from ray_adapter import core as _core
from ray_adapter.core import errors as core_errors
# Loaded with ray, not at the first failure: a failure is translated even when the process is
# out of file descriptors, and unread errors are reported from a thread of the core's.
from ray_adapter.ray._private.errors import from_core_error

_start_lock = threading.RLock()
_starter = None  # the session's ``init`` (set_starter); ``ray_adapter.ray`` always loads it


def set_starter(init):
    """Register ``init()`` (the session's ``ray.init`` with no arguments) as what starts the
    runtime on the first call that needs it."""
    global _starter
    _starter = init


def core():
    """The running core; starts the runtime first if nobody called ``ray.init()``, as Ray does."""
    current = _core._current
    if current is not None:
        return current
    with _start_lock:
        if not _core.is_started():
            _starter()
    return _core.current()


def started():
    return _core.is_started()


def context():
    """The caller's :class:`CallContext` (starts the runtime if needed)."""
    return core().context()


def core_if_started():
    """The running core, or None (never starts one: a shutdown racing the caller gives None)."""
    return _core._current


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
            raise from_core_error(value) from None
        return False


translated = _Translated()


def stored_error(value):
    """What ``ray.get`` raises for ``value`` when the value itself is a Ray error (a task
    returned the ``RayTaskError`` it caught, or a ``RayError`` was put), as Ray's get raises
    any ``RayError`` it reads (a ``RayTaskError`` as an instance of its cause); else None."""
    from ray_adapter.ray.exceptions import RayError, RayTaskError

    if not isinstance(value, RayError):
        return None
    return value.as_instanceof_cause() if isinstance(value, RayTaskError) else value


def ray_error(err):
    """The Ray exception for a core error (for code that must build it, not raise it)."""
    return from_core_error(err)
