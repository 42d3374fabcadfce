"""Generator tasks and methods on the proxy side: which mode a call runs in, and its results.

As in Ray, a generator function (or async generator function) called with ``num_returns``
unset streams (``"streaming"``: an :class:`ObjectRefGenerator`); ``"dynamic"`` (deprecated in
Ray) runs the generator to its end and returns one ref to a :class:`DynamicObjectRefGenerator`
of its values' refs, built on the worker (:class:`DynamicGeneratorCall`), so the core needs no
mode of its own for it; an integer keeps the generator's first values as plain returns.
"""
import types
import warnings

from ray_adapter.ray._private.core_access import context, translated
from ray_adapter.ray._private.core_access import core as _ensure_core
from ray_adapter.ray._private.object_refs import ObjectRef, put_object

from ray_adapter.ray._private.options import DYNAMIC, STREAMING, call_mode  # noqa: F401


class RayDeprecationWarning(DeprecationWarning):
    """Ray's deprecation warning (``ray.util.annotations.RayDeprecationWarning``), shown once
    per module as Ray's filter shows it."""


warnings.filterwarnings("module", category=RayDeprecationWarning)

DYNAMIC_WARNING = ("num_returns='dynamic' is deprecated and will be removed in a future Ray release. "
                   "Use num_returns='streaming' instead.")


def is_generator_callable(fn):
    import inspect  # at first use: not loaded by ``import ray``

    return inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn)


def validate_num_returns(is_generator, num_returns, stacklevel=3):
    """Ray's checks of ``num_returns`` (at decoration / ``.options``): ValueError for a
    negative count or a generator mode on a plain function; a deprecation warning for
    ``"dynamic"`` (``stacklevel``: as ``warnings.warn``'s, counted from this function, so
    that it names the user's line)."""
    if num_returns is None:
        return
    if isinstance(num_returns, int) and not isinstance(num_returns, bool) and num_returns < 0:
        raise ValueError(f"num_returns must be >= 0, but got {num_returns}.")
    if num_returns == DYNAMIC:
        warnings.warn(DYNAMIC_WARNING, RayDeprecationWarning, stacklevel=stacklevel)
    if num_returns in (STREAMING, DYNAMIC) and not is_generator:
        raise ValueError(
            f"num_returns='{num_returns}' can only be used with generator functions (functions "
            "that use 'yield'). The decorated function is not a generator function.")


def wrap_returns(ids, generator, num_returns, core):
    """What ``.remote()`` returns: an ObjectRefGenerator, None, one ref or a list of refs."""
    if generator == STREAMING:
        from ray_adapter.ray._private.object_ref_generator import ObjectRefGenerator

        return ObjectRefGenerator(ObjectRef(ids[0], core, _add_ref=False))
    if num_returns == 1:
        return ObjectRef(ids[0], core, _add_ref=False)  # the core counted it
    if num_returns == 0:
        return None
    return [ObjectRef(i, core, _add_ref=False) for i in ids]


class DynamicGeneratorCall:
    """Runs a generator to its end on the worker, stores each value as an object of its own
    and returns a :class:`DynamicObjectRefGenerator` of their refs (``num_returns="dynamic"``).
    ``target`` is the user's function, or for a method call the method's name (then the
    instance comes first: it is used through ``__ray_call__``)."""

    def __init__(self, target, method=False):
        self.target = target
        self.method = method
        if not method:
            self.__name__ = getattr(target, "__name__", "task")
            self.__qualname__ = getattr(target, "__qualname__", self.__name__)
            self.__module__ = getattr(target, "__module__", None)

    def __call__(self, *args, **kwargs):
        if self.method:
            instance, args = args[0], args[1:]
            result = getattr(instance, self.target)(*args, **kwargs)
        else:
            result = self.target(*args, **kwargs)
        if isinstance(result, types.AsyncGeneratorType):
            return _collect_async(result)  # awaited by the actor's loop (or run below)
        return _collect(result)


def _collect(gen):
    from ray_adapter.ray._private.object_ref_generator import DynamicObjectRefGenerator

    refs = []
    try:
        for value in gen:
            refs.append(put_object(value))
    except Exception as exc:  # noqa: BLE001 - the error is the last value, as in Ray
        refs.append(_error_ref(exc))
    return DynamicObjectRefGenerator(refs)


async def _collect_async(agen):
    from ray_adapter.ray._private.object_ref_generator import DynamicObjectRefGenerator

    refs = []
    try:
        async for value in agen:
            refs.append(put_object(value))
    except Exception as exc:  # noqa: BLE001
        refs.append(_error_ref(exc))
    return DynamicObjectRefGenerator(refs)


def _error_ref(exc):
    """A ref whose ``ray.get`` raises ``exc`` as the task's error (RayTaskError(cls)): a task
    of the same name that raises it, submitted to the core as a remote function would be."""
    from ray_adapter.core.interface import TaskOptions

    core = _ensure_core()
    options = TaskOptions(name=context().task_name or "task", max_retries=0, resources={"CPU": 1.0})
    with translated:
        ids = core.submit_task(_reraise, _RERAISE_KEY, (_Raised(exc),), {}, options)
    return ObjectRef(ids[0], core, _add_ref=False)  # the core counted it


_RERAISE_KEY = b"ray_adapter.ray._private.generators._reraise"


class _Raised:
    """An exception carried as an argument, so a task can raise it as its own."""

    def __init__(self, exc):
        self.exc = exc


def _reraise(raised):
    raise raised.exc
