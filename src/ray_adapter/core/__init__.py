"""The runtime core: one interface (:mod:`.interface`), backends found by entry point.

Each process has at most one *current* core: the driver's backend after ``ray.init()``, or, in a
worker process, the worker-side core that talks to the driver. The proxy ``ray`` package reaches
it only through :func:`current` / :func:`start`.
"""
import os
import threading

from ray_adapter.core import errors
from ray_adapter.core.interface import ActorInfo, ActorOptions, ArgRef, InitOptions, RuntimeCore, TaskOptions

__all__ = ["ActorInfo", "ActorOptions", "ArgRef", "InitOptions", "RuntimeCore", "TaskOptions",
           "errors", "current", "is_started", "start", "shutdown", "set_current", "select_backend",
           "find_runtime", "start_head", "stop_heads", "running_runtimes"]

ENTRY_POINT_GROUP = "ray_adapter.backends"
_BUILTIN_BACKENDS = {
    "embedded": "ray_adapter.core.embedded.backend:EmbeddedBackend",
    "yuanrong": "ray_adapter.core.yuanrong.backend:YuanrongBackend",
}

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


def find_runtime(address):
    """The runtime on this machine that ``init(address=...)`` attaches to, as Ray finds one
    (``None``: the one ``ray start --head`` started, if it runs; ``"auto"``: that one or any
    running; ``"host:port"``: the one with that address), as a record for
    ``InitOptions.attach``; None when there is none to attach to (start one, or the address is
    a cluster's). Raises ConnectionError for ``"auto"`` when none runs, as Ray does.
    """
    from ray_adapter.core.embedded import local_runtimes

    try:
        return local_runtimes.find(address)
    except PermissionError:
        if address == "auto":
            raise ConnectionError("Could not find any running Ray instance: this user's "
                                  "registry of runtimes is not private") from None
        return None


def start_head(options):
    """Start a headless runtime of the embedded backend in a process of its own (``ray start
    --head``): ``options`` a dict (``num_cpus``, ``num_gpus``, ``resources``, ``labels``,
    ``object_store_memory``, ``port``). Returns its record (``address``, ``pid``, ``log``:
    the file its output goes to, ...) once drivers can attach; raises RuntimeError (the
    reason) when it cannot start."""
    from ray_adapter.core.embedded import head

    return head.start(options)


def stop_heads(force=False, grace=10.0):
    """Stop every headless runtime of this user on this machine (``ray stop``): SIGTERM, SIGKILL
    after ``grace`` seconds (at once with ``force``); what a killed one left is removed. Returns
    their records."""
    from ray_adapter.core.embedded import head

    return head.stop(force=force, grace=grace)


def running_runtimes():
    """Records of the runtimes of this user running on this machine, newest first."""
    from ray_adapter.core.embedded import local_runtimes

    return local_runtimes.running()


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
            from ray_adapter.core.embedded.attached import AttachedCore as backend_cls
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
