"""The runtime core: one interface (:mod:`.interface`), backends found by entry point.

Each process has at most one *current* core: the driver's backend after ``ray.init()``, or, in a
worker process, the worker-side core that talks to the driver. The proxy ``ray`` package reaches
it only through :func:`current` / :func:`start`.
"""
import os
import threading

from ray_adapter.core import errors

__all__ = ["ActorInfo", "ActorOptions", "ArgRef", "InitOptions", "RuntimeCore", "TaskOptions",
           "errors", "current", "is_started", "start", "shutdown", "set_current", "select_backend"]
#: The interface's types, loaded at first use (``import ray`` does not need its dataclasses,
#: which bring ``dataclasses``, ``inspect`` and ``typing``: about 10 ms of ``import ray``).
_INTERFACE_NAMES = frozenset(("ActorInfo", "ActorOptions", "ArgRef", "InitOptions", "RuntimeCore", "TaskOptions"))


def __getattr__(name):
    if name in _INTERFACE_NAMES:
        from ray_adapter.core import interface

        return getattr(interface, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | _INTERFACE_NAMES)

ENTRY_POINT_GROUP = "ray_adapter.backends"
_BUILTIN_BACKENDS = {
    "embedded": "ray_adapter.core.embedded.backend:EmbeddedBackend",
    "yuanrong": "ray_adapter.core.yuanrong.backend:YuanrongBackend",
}
#: Not a backend one chooses: the core of a driver attached to a runtime another process
#: started (``InitOptions.attach``, see :mod:`ray_adapter.core.runtimes`).
_ATTACHED_CORE = "ray_adapter.core.embedded.attached:AttachedCore"

_current = None
_lock = threading.RLock()


def current():
    """This process's started core; raises errors.NotInitialized if there is none."""
    core = _current
    if core is None:
        raise errors.NotInitialized("the runtime is not started")
    return core


def is_started():
    return _current is not None


def set_current(core):
    """Install ``core`` as this process's core (worker processes do this at boot)."""
    global _current
    _current = core


def select_backend(address=None):
    """The backend for ``init(address=...)``.

    ``RAY_ADAPTER_RUNTIME`` wins (``yr-local``: yuanrong on yr's local mode; or a backend
    name); else a cluster address (``address``, ``RAY_ADDRESS`` or ``YR_SERVER_ADDRESS``)
    selects ``yuanrong``; else ``embedded``.
    """
    runtime = os.environ.get("RAY_ADAPTER_RUNTIME", "").strip().lower()
    if runtime == "yr-local":
        return "yuanrong"
    if runtime:
        return runtime
    if address not in (None, "", "local") or os.environ.get("YR_SERVER_ADDRESS"):
        return "yuanrong"
    return "embedded"


def load_backend_class(name):
    """The class registered for backend ``name`` (entry point group ``ray_adapter.backends``)."""
    target = _BUILTIN_BACKENDS.get(name)
    if target is None:
        registered = _registered_backends()
        for ep in registered:
            if ep.name == name:
                return ep.load()
        known = sorted(set(_BUILTIN_BACKENDS) | {ep.name for ep in registered})
        raise ValueError(f"unknown ray-adapter backend {name!r}; known backends: {', '.join(known)}")
    return _load(target)


def _load(target):
    """The class a ``"module:Class"`` target names."""
    module_name, _, attr = target.partition(":")
    import importlib

    return getattr(importlib.import_module(module_name), attr)


def _registered_backends():
    """Entry points of the ``ray_adapter.backends`` group (importlib.metadata's selection API
    is 3.10+; Python 3.9 returns a dict of groups)."""
    from importlib.metadata import entry_points

    found = entry_points()
    if hasattr(found, "select"):
        return list(found.select(group=ENTRY_POINT_GROUP))
    return list(found.get(ENTRY_POINT_GROUP, ()))


def start(options):
    """Start the selected backend as this process's core; returns (core, address info)."""
    global _current
    with _lock:
        if _current is not None:
            raise RuntimeError("the runtime is already started")
        if options.attach is not None:
            backend_cls = _load(_ATTACHED_CORE)
        else:
            backend_cls = load_backend_class(select_backend(options.address))
        core = backend_cls()
        info = core.start(options)
        _current = core
        return core, info


def shutdown():
    """Shut the current core down (no-op when none is started)."""
    global _current
    with _lock:
        core, _current = _current, None
    if core is not None:
        core.shutdown()
