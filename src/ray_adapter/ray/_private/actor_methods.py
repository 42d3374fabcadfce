"""Actor classes' methods on the proxy side: the class Ray makes of the user's class, the method
table a handle carries, and the core options of one method call.

As Ray does, ``ray.remote(Cls)`` works on a *modified class*: a subclass of ``Cls`` with
``__ray_actor_class__`` (the user's class), ``__ray_ready__``, ``__ray_call__`` and
``__ray_terminate__``; the actor
class object derives from both :class:`~ray_adapter.ray.actor.ActorClass` and it, so
``isinstance``, ``dir``, class attributes and the user's decorator metadata are visible on it.
The worker still builds an instance of the user's own class (``type(self)`` is ``Cls`` there,
as in Ray); every actor answers ``__ray_ready__``, ``__ray_call__`` and ``__ray_terminate__``.
"""

from ray_adapter.ray._private import generators
from ray_adapter.ray._private.core_access import context_if_started
from ray_adapter.ray._private.core_access import core as _ensure_core

METHOD_OPTIONS_ATTR = "__ray_method_options__"
#: Ray's own attribute names for ``@ray.method`` options (frameworks read them).
RAY_METHOD_ATTRS = {
    "num_returns": "__ray_num_returns__", "max_task_retries": "__ray_max_task_retries__",
    "retry_exceptions": "__ray_retry_exceptions__", "concurrency_group": "__ray_concurrency_group__",
    "_generator_backpressure_num_objects": "__ray_generator_backpressure_num_objects__",
    "_num_objects_per_yield": "__ray_num_objects_per_yield__",
    "enable_task_events": "__ray_enable_task_events__", "tensor_transport": "__ray_tensor_transport__",
}
#: Methods every actor answers besides its class's own (dunders otherwise are not methods).
BUILTIN_METHODS = ("__ray_ready__", "__ray_call__", "__ray_terminate__")


_MODIFIED = {}


def modify_class(cls):
    """Ray's modified class of ``cls``: a subclass adding ``__ray_actor_class__``,
    ``__ray_ready__`` and ``__ray_call__`` (``cls`` itself if it is one already); made once
    per class."""
    if "__ray_actor_class__" in vars(cls):
        return cls
    modified = _MODIFIED.get(cls)
    if modified is None:
        modified = _MODIFIED[cls] = _modify_class(cls)
    return modified


def _modify_class(cls):
    class Class(cls):
        __ray_actor_class__ = cls

        def __ray_ready__(self):
            return True

        def __ray_call__(self, fn, *args, **kwargs):
            """Run ``fn(self, *args, **kwargs)`` on the actor; returns its result."""
            return fn(self, *args, **kwargs)

        def __ray_terminate__(self):
            """End the actor after the calls queued before this one (``exit_actor()``); the
            call's own result raises ActorDiedError, as every later call does."""
            exit_actor()

    Class.__module__ = cls.__module__
    return Class


def method_table(cls):
    """``({name: options}, [generator method names])`` for every method a handle can call:
    public and single-underscore methods, ``__call__``, and the builtin ones."""
    import inspect  # at first use: not loaded by ``import ray``

    table, streaming = {}, []
    for name, member in inspect.getmembers(cls):
        if not callable(member):
            continue
        if name.startswith("__") and name not in ("__call__",) + BUILTIN_METHODS:
            continue
        table[name] = dict(getattr(member, METHOD_OPTIONS_ATTR, {}))
        if generators.is_generator_callable(member):
            streaming.append(name)
    return table, streaming


def check_groups(class_name, methods, groups):
    """Every ``@ray.method(concurrency_group=...)`` names a declared group (Ray asserts so at
    actor creation)."""
    for name, options in methods.items():
        group = options.get("concurrency_group")
        if group is not None and group not in groups:
            raise AssertionError(
                f"The method {class_name}.{name} uses concurrency group {group!r}, which the "
                f"actor does not declare (concurrency_groups={dict(groups)}).")


def call_options(meta, method_name, options):
    """``(TaskOptions, dynamic)`` of one call of ``method_name`` with merged ``options``
    (the method's ``@ray.method`` options under its ``.options()``)."""
    is_generator = method_name in (meta.get("generators") or ())
    num_returns = options.get("num_returns")
    generator, count = generators.call_mode(is_generator, num_returns)
    group = options.get("concurrency_group")
    groups = meta.get("concurrency_groups") or {}
    if group is not None and group not in groups and meta.get("methods") is not None:
        raise ValueError(f"The concurrency group {group!r} is not defined for actor "
                         f"{meta['class_name']} (concurrency_groups={dict(groups)}).")
    backpressure = options.get("_generator_backpressure_num_objects")
    retry = options.get("retry_exceptions") or False
    from ray_adapter.core.interface import TaskOptions

    opts = TaskOptions(
        name=options.get("name") or f"{meta['class_name']}.{method_name}",
        num_returns=count, generator=generator,
        generator_backpressure=-1 if backpressure is None else backpressure,
        concurrency_group=group, max_task_retries=options.get("max_task_retries"),
        retry_exceptions=tuple(retry) if isinstance(retry, list) else retry,
        refused_at_submit=bool(meta.get("pending_limit", True)))
    return opts, num_returns == generators.DYNAMIC


def exit_actor():
    """End the current actor from inside one of its methods (mirrors ``ray.actor.exit_actor``):
    the actor is not restarted and later calls raise ``ActorDiedError``. Raises ``TypeError``
    outside an actor."""
    ctx = context_if_started()
    if ctx is None or ctx.actor_id is None:
        from ray_adapter.ray._private.global_worker import global_worker

        # Ray's words, its missing space included
        raise TypeError(f"exit_actor API is called on a non-actor worker, {global_worker.mode}. "
                        "Call this API inside an actor methodsif you'd like to exit the actor "
                        "gracefully.")
    if _ensure_core().exit_current_actor():  # an asyncio actor, as in Ray
        from ray_adapter.ray.exceptions import AsyncioActorExit

        raise AsyncioActorExit()
    raise SystemExit(0)
