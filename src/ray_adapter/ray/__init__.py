"""The proxy ``ray`` package served by ray-adapter's import hook.

Public names and their status come from the compat matrix (``compat_matrix/ray.toml``); a name
the adapter does not provide raises :class:`ray_adapter.gaps.RayAdapterGapError` (an
``AttributeError``) that says why and what to use instead. Importing this package starts
nothing: the runtime starts at ``ray.init()`` or at the first ``.remote()``/``ray.get``/``ray.put``.
"""
import sys as _sys
import types as _types

from ray_adapter import RAY_API_VERSION as __version__  # noqa: N811 - Ray's own name
from ray_adapter import gaps as _gaps
from ray_adapter import matrix as _matrix
from ray_adapter.ray import (_common, _private, actor, exceptions, experimental, remote_function, runtime_context,
                             runtime_env, util)
from ray_adapter.ray._private.state import available_resources, cluster_resources, nodes
from ray_adapter.ray._private.worker import (cancel, get, get_actor, get_gpu_ids, init, is_initialized,
                                             kill, put, shutdown, wait)
from ray_adapter.ray._raylet import DynamicObjectRefGenerator, ObjectRefGenerator
from ray_adapter.ray._private.profiling import timeline
from ray_adapter.ray._raylet import ActorID, JobID, NodeID, ObjectRef, PlacementGroupID, TaskID, WorkerID
from ray_adapter.ray.actor import method
from ray_adapter.ray.remote_function import RemoteFunction
from ray_adapter.ray.runtime_context import get_runtime_context

__commit__ = "ray-adapter"

_private.log_setup.configure_at_import()  # as `import ray` does: the "ray" logger's handler


def _auto_init(api):
    """``ray.<api>`` starts the runtime first when nothing has started it, as Ray 2.60 does for
    its AUTO_INIT_APIS (``get``, ``put``, ``wait`` ... and ``get_runtime_context``,
    ``get_gpu_ids``)."""
    import functools

    @functools.wraps(api)
    def call(*args, **kwargs):
        from ray_adapter.ray._private.core_access import core

        core()
        return api(*args, **kwargs)

    return call


get_runtime_context = _auto_init(get_runtime_context)
get_gpu_ids = _auto_init(get_gpu_ids)
# Started before their arguments are checked, as Ray's (``ray.wait([])`` starts it too).
# ``get`` and ``put`` do the same first thing in their own bodies (a hot path: no wrapper).
cancel, kill, wait, get_actor = (_auto_init(api) for api in (cancel, kill, wait, get_actor))


def remote(*args, **kwargs):
    """``@ray.remote`` / ``@ray.remote(**options)`` / ``ray.remote(obj)`` (mirrors ``ray.remote``).

    On a function returns a :class:`RemoteFunction`; on a class an :class:`ActorClass`. Options
    (``num_cpus``, ``num_gpus``, ``resources``, ``memory`` in bytes, ``max_retries``, ...) are
    validated against the compat matrix: an unknown one raises ``ValueError``, an unsupported
    one :class:`ray_adapter.gaps.RayAdapterOptionError`.
    """
    if len(args) == 1 and not kwargs and callable(args[0]):
        return _make_remote(args[0], {})
    # Ray asserts: anything but the bare decorator or keyword options (``@ray.remote(2)``,
    # ``@ray.remote()``) raises AssertionError listing the options.
    assert not args and kwargs, (
        "The @ray.remote decorator must be applied either with no arguments and no parentheses, "
        "for example '@ray.remote', or it must be applied using some of the arguments in the "
        f"list {_remote_option_names()}, for example "
        "'@ray.remote(num_returns=2, resources={\"CustomResource\": 1})'.")
    return lambda obj: _make_remote(obj, kwargs)


def _remote_option_names():
    names = []
    for owner in ("task", "actor"):
        names += [k for k in _matrix.options(owner) if k not in names]
    return names


def _make_remote(obj, options):
    # As Ray: a Python function or a class, nothing else (a functools.partial, a builtin, a
    # callable object, a method, an already remote function or actor class raise TypeError).
    if isinstance(obj, _types.FunctionType):  # (inspect.isfunction; inspect loads at first use)
        return RemoteFunction(obj, options)
    if isinstance(obj, type):
        return actor._make_actor_class(obj, options)
    raise TypeError("The @ray.remote decorator must be applied to either a function or a class.")


def __dir__():
    return sorted(set(globals()) | set(_matrix.public_names("ray")))


def __getattr__(name):
    if name == "cloudpickle":  # Ray binds it at `import ray`; here at first use (imports cloudpickle)
        import ray_adapter.ray.cloudpickle  # not `from . import`: that would ask this __getattr__

        return _sys.modules["ray_adapter.ray.cloudpickle"]
    if name == "__all__":
        return [n for n, e in _matrix.symbols("ray").items() if e.available]
    return _gaps.module_getattr("ray")(name)
