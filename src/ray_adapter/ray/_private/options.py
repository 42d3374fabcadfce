"""Validation of ``ray.remote`` / ``.options`` / ``ray.init`` keywords against the compat matrix,
and their translation into runtime-core option objects.

Every keyword has a status in ``compat_matrix/options.toml``: an unknown keyword raises
``ValueError`` as Ray does, a ``gap`` raises :class:`ray_adapter.gaps.RayAdapterOptionError`, a
``partial`` one is honoured as far as the matrix says, silently as Ray would be: a correct
program prints nothing of the adapter's own. ``RAY_ADAPTER_WARN_PARTIAL=1`` makes each
partial option warn once per process (and backend), naming what differs; ``ray-adapter scan``
and ``report`` list them without running anything (:func:`partial_notes`).
"""
import contextvars
import os
import warnings

from ray_adapter import gaps, matrix

_OWNER_LABEL = {"task": "remote functions", "actor": "actors", "init": "ray.init",
                "method": "actor methods"}
_OWNER_API = {"task": "ray.remote", "actor": "ray.remote", "init": "ray.init", "method": "ray.method"}
#: The order Ray 2.60 lists a remote function's and an actor's valid options in (its error for an
#: unknown keyword shows them so): the options both take, then each one's own.
_COMMON_ORDER = ("label_selector", "fallback_strategy", "accelerator_type", "memory", "name",
                 "num_cpus", "num_gpus", "object_store_memory", "placement_group",
                 "placement_group_bundle_index", "placement_group_capture_child_tasks",
                 "resources", "runtime_env", "scheduling_strategy", "enable_task_events", "_labels")
_RAY_ORDER = {
    "task": _COMMON_ORDER + ("max_calls", "max_retries", "num_returns", "retry_exceptions",
                             "_generator_backpressure_num_objects", "_num_objects_per_yield"),
    "actor": _COMMON_ORDER + ("concurrency_groups", "enable_tensor_transport", "lifetime",
                              "max_concurrency", "max_restarts", "max_task_retries",
                              "max_pending_calls", "namespace", "get_if_exists",
                              "allow_out_of_order_execution",
                              "_actor_generator_backpressure_num_objects"),
}
_warned = set()
#: Set by :func:`partial_notes`: the messages of partial values are collected, not warned.
_notes = contextvars.ContextVar("ray_adapter_partial_notes", default=None)
WARN_PARTIAL_ENV = "RAY_ADAPTER_WARN_PARTIAL"


def _warn_partial_enabled():
    return os.environ.get(WARN_PARTIAL_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _backend():
    from ray_adapter import core

    return getattr(core._current, "backend_name", None) or core.select_backend()


def check(owner, options, backend=None, *, submitting=True):
    """Validate ``options`` (a dict) for ``owner`` ("task", "actor", "init" or "method") on
    ``backend`` (default: the running one, else the one ``ray.init()`` would pick); returns the
    backend it checked for. Raises ValueError for an unknown keyword (as Ray),
    RayAdapterOptionError for a gap. A partial option given a value the matrix does not list as
    fully supported warns once per process only when ``RAY_ADAPTER_WARN_PARTIAL=1`` (Ray prints
    nothing).

    ``submitting=False`` (decoration and ``.options()``): the fields of a task's or actor's
    ``runtime_env`` the backend does not provide are not judged yet. Ray sets a runtime env up
    (its plugins: nsight, conda, ...) only when the task is submitted or the actor created, so
    a class decorated with one imports fine; :func:`check_runtime_env` judges them then."""
    table = matrix.options(owner)
    backend = backend or _backend()
    if backend not in matrix.BACKENDS:
        backend = matrix.BACKENDS[0]
    _check_all(owner, options, table, backend, submitting or owner not in ("task", "actor"))
    return backend


def check_runtime_env(owner, runtime_env, backend=None):
    """At submission (``.remote()``): raise the documented gap (RayAdapterOptionError naming
    the field, pointing to the matrix) for a ``runtime_env`` field of ``owner`` ("task" or
    "actor") that ``backend`` (default: the running one) does not provide."""
    if not runtime_env:
        return
    backend = backend or _backend()
    if backend not in matrix.BACKENDS:
        backend = matrix.BACKENDS[0]
    entry = matrix.options(owner).get("runtime_env")
    if entry is not None and entry.status(backend) != "supported":
        _judge_partial(owner, "runtime_env", runtime_env, entry, backend)


def _valid_in_ray_order(owner, table):
    """The option names of ``table``, in the order Ray lists them (any it does not list, sorted,
    after them)."""
    order = _RAY_ORDER.get(owner, ())
    return [k for k in order if k in table] + sorted(k for k in table if k not in order)


def _check_all(owner, options, table, backend, submitting=True):
    for key, value in options.items():
        entry = table.get(key)
        if entry is None:
            raise ValueError(
                f"Invalid option keyword {key} for {_OWNER_LABEL[owner]}. Valid ones are "
                f"{_valid_in_ray_order(owner, table)}.")
        _check_value(key, value)
        if owner == "task":
            _check_task_value(key, value)
        status = entry.status(backend)
        if status == "supported" or value is None or (key == "runtime_env" and not submitting):
            continue
        if status == "gap":
            raise gaps.option_gap_error(_OWNER_API[owner], key, entry.note)
        _judge_partial(owner, key, value, entry, backend)


def _judge_partial(owner, key, value, entry, backend):
    """A partial option's value: fully supported per the entry's data, a gap, or a warning."""
    values = entry.get("supported_values")
    if values is not None and _value_in(value, values):
        return
    types = entry.get("supported_types")
    if types and type(value).__name__ in types:
        return
    keys = entry.get(f"supported_keys_{backend}", entry.get("supported_keys"))
    if keys is not None and isinstance(value, dict):
        extra = sorted(k for k, v in dict(value).items() if v is not None and k not in keys)
        if key == "runtime_env":
            # Ray's own fields only: another key names a runtime-env plugin, which Ray skips
            # when none is installed under that name (no error, nothing set up).
            from ray_adapter.ray.runtime_env import RuntimeEnv

            extra = [k for k in extra if k in RuntimeEnv.known_fields or k == "nsight"]
        if not extra:
            return
        raise gaps.option_gap_error(_OWNER_API[owner], f"{key}[{extra[0]!r}]", entry.note)
    if entry.get("otherwise", "warn") == "gap":
        raise gaps.option_gap_error(_OWNER_API[owner], f"{key}={value!r}", entry.note)
    message = f"ray-adapter: {_OWNER_API[owner]} option {key!r} is partially supported: {entry.note}"
    notes = _notes.get()
    if notes is not None:
        notes.append(message)
        return
    marker = (owner, key, backend)
    if marker not in _warned and _warn_partial_enabled():
        _warned.add(marker)
        warnings.warn(message, UserWarning, stacklevel=4)


def partial_notes(owner, options, backend=None):
    """Validate as :func:`check` does (same errors) without warning; returns the messages of
    the values it honours only in part (``[]`` when all are fully supported)."""
    token = _notes.set([])
    try:
        check(owner, options, backend=backend)
        return _notes.get()
    finally:
        _notes.reset(token)


_AMOUNTS = ("num_cpus", "num_gpus", "memory", "object_store_memory", "_memory")
_RETRY_COUNTS = ("max_retries", "max_restarts", "max_task_retries", "max_pending_calls")
_NONE = type(None)
#: Ray's type constraints of the options it types (a wrong type raises TypeError, as in Ray).
_TYPES = {
    "num_cpus": (float, int, _NONE), "num_gpus": (float, int, _NONE), "memory": (float, int, _NONE),
    "object_store_memory": (int, _NONE), "max_calls": (int, _NONE), "max_retries": (int, _NONE),
    "max_restarts": (int, _NONE), "max_task_retries": (int, _NONE),
    "max_pending_calls": (int, _NONE), "max_concurrency": (int, _NONE),
    "num_returns": (int, str, _NONE), "name": (str, _NONE), "namespace": (str, _NONE),
    "resources": (dict, _NONE), "concurrency_groups": (list, dict, _NONE),
    "_generator_backpressure_num_objects": (int, _NONE),
    "_actor_generator_backpressure_num_objects": (int, _NONE),
    "_num_objects_per_yield": (int, _NONE), "concurrency_group": (str, _NONE),
    "retry_exceptions": (bool, list, tuple), "enable_task_events": (bool,),
}


def _is_number(value):
    """An amount as Ray takes one: an int or a float (a bool is an int: ``num_cpus=True`` is 1)."""
    return isinstance(value, (int, float))


def _check_type(key, value):
    types = _TYPES.get(key)
    if types is not None and not isinstance(value, types):
        shown = "(" + ", ".join(str(t) for t in types) + ")" if len(types) > 1 else str(types[0])
        raise TypeError(f"The type of keyword '{key}' must be {shown}, but received type {type(value)}")


def _check_value(key, value):
    """Ray's own checks on option values, raised where Ray raises them (at decoration)."""
    if value is None:
        return
    _check_type(key, value)
    if key == "num_returns":
        if isinstance(value, str) and value not in ("streaming", "dynamic"):
            raise TypeError(_NUM_RETURNS_TEXT)  # Ray: a TypeError (its check compares it to 0)
        if isinstance(value, int) and value < 0:
            raise ValueError(_NUM_RETURNS_TEXT)
        return
    if key in ("_generator_backpressure_num_objects", "_actor_generator_backpressure_num_objects") \
            and value == 0:  # (any negative value disables it, as in Ray)
        raise ValueError(f"{key}={value} is not allowed. Use a value > 0, or -1 to disable this "
                         "feature (1 behaves as a Python generator: one object per next()).")
    if key == "_num_objects_per_yield" and value < 1:
        raise ValueError("_num_objects_per_yield is a private streaming generator option that must "
                         "be set to a positive integer.")
    if key == "lifetime" and value not in ("detached", "non_detached"):
        raise ValueError(LIFETIME_TEXT)
    if key == "concurrency_groups":
        check_concurrency_groups(value)
        return
    if key in _QUANTITIES and _is_number(value):
        _check_quantity(key, value)
    if key in _AMOUNTS and (not _is_number(value) or value < 0):
        raise ValueError(f"The keyword '{key}' only accepts None, 0 or a positive number, got {value!r}.")
    if key in _RETRY_COUNTS and (type(value) is not int or value < -1):
        raise ValueError(f"The keyword '{key}' only accepts None, 0, -1 or a positive integer, "
                         "where -1 represents infinity.")
    if key == "max_calls" and value < 0:  # (an int by now: the type was checked)
        raise ValueError("The keyword 'max_calls' only accepts None, 0 or a positive integer.")
    if key == "max_concurrency" and (type(value) is not int or value < 0):
        raise ValueError("The keyword 'max_concurrency' only accepts None, 0 or a positive integer.")
    if key in ("name", "namespace") and not isinstance(value, str):
        raise TypeError(f"The keyword '{key}' only accepts a string, got {type(value).__name__}.")
    if key == "resources":
        if not isinstance(value, dict):
            raise TypeError(f"The keyword 'resources' only accepts a dict, got {type(value).__name__}.")
        for name, amount in value.items():
            if name in ("CPU", "GPU"):
                raise ValueError("Use the 'num_cpus' and 'num_gpus' keyword instead of 'CPU' and "
                                 "'GPU' in 'resources' keyword")
            if isinstance(name, str) and _is_number(amount):
                _check_quantity(name, amount)
            if not isinstance(name, str) or not _is_number(amount):  # Ray: a TypeError too
                raise TypeError(f"Resources are named by strings and their quantities are numbers, "
                                f"got {name!r}: {amount!r}.")
            if amount < 0:
                raise ValueError(f"Resource quantities must be non-negative numbers, got {name!r}: {amount!r}.")
    if key in _PLACEMENT_KEYS:
        from ray_adapter.ray._private import placement

        placement.check_type(key, value)
    if key == "runtime_env":
        if not isinstance(value, dict):
            raise TypeError(f"runtime_env must be a dict or a ray.runtime_env.RuntimeEnv, got {type(value).__name__}.")
        env_vars = value.get("env_vars")
        if env_vars is not None:
            from ray_adapter.ray._private.runtime_env.validation import check_field

            check_field("env_vars", env_vars)  # Ray's TypeError, naming the key or value
        pip = value.get("pip")  # its type is checked before it is found unsupported, as in Ray
        if pip is not None and not (isinstance(pip, (str, dict)) or (
                isinstance(pip, list) and all(isinstance(dep, str) for dep in pip))):
            raise TypeError(f"runtime_env['pip'] must be of type str or List[str], got {type(pip)}")


def _check_task_value(key, value):
    """Ray's checks of a remote function's own options (not an actor method's)."""
    if key == "object_store_memory" and value is not None:
        raise ValueError("Setting 'object_store_memory' is not implemented for tasks")
    if key == "retry_exceptions" and isinstance(value, (list, tuple)) and not all(
            isinstance(kind, type) and issubclass(kind, Exception) for kind in value):
        raise ValueError("retry_exceptions must be either a boolean or a list of exceptions")


_QUANTITIES = ("num_cpus", "num_gpus", "memory")


def _check_quantity(name, amount):
    """A resource amount as Ray checks it: not negative, at most 4 decimal places."""
    if amount < 0:
        raise ValueError(f"The quantity of resource {name} cannot be negative")
    if isinstance(amount, float) and amount != 0.0 and int(amount * 10000) == 0:
        raise ValueError(f"The precision of the fractional quantity of resource {name} cannot "
                         "go beyond 0.0001")


_PLACEMENT_KEYS = frozenset(("scheduling_strategy", "placement_group", "placement_group_bundle_index",
                             "placement_group_capture_child_tasks", "label_selector",
                             "accelerator_type"))
LIFETIME_TEXT = "actor `lifetime` argument must be one of 'detached', 'non_detached' and 'None'."
_NUM_RETURNS_TEXT = (
    "Default None. When None is passed, The default value is 1 for a task and actor task, and "
    "'streaming' for generator tasks and generator actor tasks. The keyword 'num_returns' only "
    "accepts None, a non-negative integer, 'streaming' (for generators), or 'dynamic'. 'dynamic' "
    "flag will be deprecated in the future, and it is recommended to use 'streaming' instead.")


def check_concurrency_groups(groups):
    """``concurrency_groups`` must map group names (str) to their concurrency (an int >= 1)."""
    if not isinstance(groups, dict):
        raise TypeError("ray-adapter: concurrency_groups must be a dict {group name: max "
                        f"concurrency}}; got {type(groups).__name__} (the list form is Ray's "
                        "cross-language form, not supported).")
    for name, size in groups.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"concurrency group names must be non-empty strings, got {name!r}")
        if type(size) is not int:
            raise TypeError(f"the concurrency of group {name!r} must be an integer, got {size!r}")
        if size < 1:
            raise ValueError(f"the concurrency of group {name!r} must be >= 1, got {size}")


def _value_in(value, allowed):
    return any(value is a or (type(value) is type(a) and value == a) for a in allowed)


def _resources(options, default_cpus):
    """Ray's resource request of a task or actor as ``{name: amount}``."""
    out = {}
    num_cpus = options.get("num_cpus")
    out["CPU"] = default_cpus if num_cpus is None else num_cpus
    if options.get("num_gpus"):
        out["GPU"] = options["num_gpus"]
    if options.get("memory"):
        out["memory"] = options["memory"]
    if options.get("object_store_memory"):
        out["object_store_memory"] = options["object_store_memory"]
    for name, amount in (options.get("resources") or {}).items():
        if name in ("CPU", "GPU"):
            raise ValueError(
                f"Use the 'num_cpus' and 'num_gpus' keyword instead of 'resources' for {name!r}.")
        out[name] = amount
    for name, amount in out.items():
        if amount is not None and amount < 0:
            raise ValueError(f"Resource quantities must be nonnegative, got {name}={amount}.")
    if options.get("accelerator_type"):
        from ray_adapter.ray._private.placement import accelerator_resources

        out.update(accelerator_resources(options["accelerator_type"]))
    return {k: int(v) if isinstance(v, bool) else v for k, v in out.items() if v}


#: ``num_returns`` of a generator call: items stream as they are yielded (Ray's default for a
#: generator function), or (deprecated) the whole generator runs and returns one ref.
STREAMING, DYNAMIC = "streaming", "dynamic"


def call_mode(is_generator, num_returns):
    """``(generator, num_returns)`` for the core: ``generator`` is "streaming" or None (a
    dynamic call is a one-return call of :class:`DynamicGeneratorCall`)."""
    if num_returns is None:
        return (STREAMING, 1) if is_generator else (None, 1)
    if num_returns == STREAMING:
        return STREAMING, 1
    if num_returns == DYNAMIC:
        return None, 1
    return None, num_returns


def task_options(options, function_name, is_generator=False, repr_name=None):
    """:class:`TaskOptions` for a remote function's merged options (``is_generator``: it is a
    generator function, which streams unless ``num_returns`` is an integer)."""
    generator, num_returns = call_mode(is_generator, options.get("num_returns"))
    backpressure = options.get("_generator_backpressure_num_objects")
    retry = options.get("retry_exceptions", False)
    if isinstance(retry, list):
        retry = tuple(retry)
    max_retries = options.get("max_retries")
    if max_retries is None:  # Ray's default, read at each submission as Ray reads it
        max_retries = int(os.environ.get("RAY_TASK_MAX_RETRIES", 3))
    from ray_adapter.core.interface import TaskOptions  # (its dataclasses: not at ``import ray``)
    from ray_adapter.ray._private.placement import static_placement

    resources = _resources(options, 1)
    return TaskOptions(
        name=options.get("name") or function_name,
        num_returns=num_returns, generator=generator,
        generator_backpressure=-1 if backpressure is None else backpressure,
        resources=resources,
        max_retries=max_retries,
        max_calls=options.get("max_calls") or 0,
        retry_exceptions=retry,
        runtime_env=_task_env(options.get("runtime_env"), "task"),
        # Ray names the function by its qualified name in placement-group errors.
        scheduling=static_placement(options, resources, repr_name or function_name),
    )


def actor_options(options, cls, handle_meta, is_async):
    """:class:`ActorOptions` for an actor class's merged options."""
    lifetime = options.get("lifetime")
    if lifetime not in (None, "detached", "non_detached"):
        raise ValueError(LIFETIME_TEXT)
    name = options.get("name")
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be None or a string, got: '{type(name)}'.")
    if name == "":
        raise ValueError("Actor name cannot be an empty string.")
    namespace = options.get("namespace")
    if namespace == "":  # (its type was checked with the other options')
        raise ValueError('"" is not a valid namespace. Pass None to not specify a namespace.')
    if options.get("get_if_exists") and not name:
        raise ValueError("The actor name must be specified to use `get_if_exists`.")
    max_concurrency = options.get("max_concurrency")
    if max_concurrency == 0:  # Ray accepts 0: a threaded actor then runs one call at a time
        if is_async:  # and an async one never runs any (its calls hang): said instead
            raise ValueError(f"max_concurrency=0 on the async actor {cls.__name__} would never "
                             "run a call (Ray's hang forever); use None or a positive number.")
        max_concurrency = 1
    # Ray: an actor that names no resource holds no CPU while alive; one that names any
    # resource (other than memory) and not num_cpus holds 1 CPU for its lifetime.
    names_resources = options.get("num_gpus") is not None or bool(options.get("resources"))
    from ray_adapter.core.interface import ActorOptions  # (its dataclasses: not at ``import ray``)
    from ray_adapter.ray._private.placement import static_placement

    resources = _resources(options, 1 if names_resources else 0)
    return ActorOptions(
        class_name=cls.__name__,
        resources=resources,
        scheduling=static_placement(options, resources, cls.__qualname__, is_default_actor(options)),
        max_restarts=options.get("max_restarts") or 0,
        max_task_retries=options.get("max_task_retries") or 0,
        max_concurrency=max_concurrency,
        is_async=is_async,
        name=name,
        namespace=namespace,
        get_if_exists=bool(options.get("get_if_exists")),
        detached=lifetime == "detached",
        runtime_env=_task_env(options.get("runtime_env"), "actor"),
        handle_meta=handle_meta,
        concurrency_groups=dict(options.get("concurrency_groups") or {}),
        max_pending_calls=-1 if options.get("max_pending_calls") is None else options["max_pending_calls"],
        generator_backpressure=_or_default(options.get("_actor_generator_backpressure_num_objects"), -1),
        method_resources={"CPU": 1.0} if is_default_actor(options) else {},
    )


def is_default_actor(options):
    """An actor naming no resource: 0 CPUs while alive, 1 CPU to be placed in a bundle (Ray)."""
    return options.get("num_cpus") is None and options.get("num_gpus") is None and not (
        options.get("resources") or options.get("memory"))


def _or_default(value, default):
    return default if value is None else value


def _task_env(runtime_env, owner):
    """A task's or actor's (``owner``) runtime_env as the core takes it, at submission:
    checked as Ray checks it, and its fields against what the backend provides."""
    if not runtime_env:
        return None
    from ray_adapter.ray._private.runtime_env.validation import for_task

    check_runtime_env(owner, runtime_env)
    return for_task(runtime_env)


def is_async_class(cls):
    """True if any method of ``cls`` is a coroutine or async generator function (an async actor)."""
    import inspect

    for _, member in inspect.getmembers(cls):
        if inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(member):
            return True
    return False
