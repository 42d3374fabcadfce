"""``ray.remote_function``: :class:`RemoteFunction`, what ``@ray.remote`` makes of a function."""
import functools
import os

from ray_adapter import gaps
from ray_adapter.core import errors as core_errors
from ray_adapter.ray._private import generators
from ray_adapter.ray._private import options as _options
from ray_adapter.ray._private import placement as _placement
from ray_adapter.ray._private.core_access import core as _ensure_core, translated
from ray_adapter.ray._private.object_ref_generator import ObjectRefGenerator  # noqa: F401 - Ray's name here
from ray_adapter.ray._private.signatures import checker_for
from ray_adapter.ray._private.object_refs import ObjectRef, from_old_sessions, unknown_owner_error


def _to_core_args(args, kwargs):
    """Top-level ObjectRef arguments become :class:`ArgRef` so the core resolves them to values
    before the call (nested refs are passed as refs, as in Ray)."""
    if any(type(a) is ObjectRef for a in args):
        from ray_adapter.core.interface import ArgRef

        _check_session([a for a in args if type(a) is ObjectRef])
        args = tuple(ArgRef(a._id) if type(a) is ObjectRef else a for a in args)
    if kwargs and any(type(v) is ObjectRef for v in kwargs.values()):
        from ray_adapter.core.interface import ArgRef

        _check_session([v for v in kwargs.values() if type(v) is ObjectRef])
        kwargs = {k: ArgRef(v._id) if type(v) is ObjectRef else v for k, v in kwargs.items()}
    return args, kwargs


def _check_session(refs):
    """Refs of a previous session cannot be passed: Ray's ValueError (their owner is unknown)."""
    stale = from_old_sessions(refs)
    if stale:
        raise unknown_owner_error(stale[0])


def _check_call(owner, target, args, kwargs):
    """Check the arguments of a call of ``target``; ``owner._signature`` caches the checker."""
    checker = owner._signature
    if checker is None:
        checker = owner._signature = checker_for(target)
    checker.check(args, kwargs)


def _wrap_returns(ids, num_returns, core, generator=None):
    return generators.wrap_returns(ids, generator, num_returns, core)


def _unserializable(err, call_name):
    """Ray's TypeError for an argument that cannot be serialized."""
    shown = err.value_repr if err.value_repr is not None else "(unknown)"
    return TypeError(f"Could not serialize the argument {shown} for a task or actor {call_name}:\n"
                     f"{err.error}")


class _Submitting:
    """``with _Submitting(name):`` -- core errors become Ray's exceptions; an argument that
    cannot be serialized becomes Ray's ``TypeError`` naming the call (``name``: a str, or a
    callable that makes it, so that a call that succeeds does not build it)."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if isinstance(value, core_errors.Unserializable):
            name = self.name
            raise _unserializable(value, name if type(name) is str else name()) from None
        return translated.__exit__(kind, value, tb)


class RemoteFunction:
    """A remote function (mirrors ``ray.remote_function.RemoteFunction``).

    ``f.remote(*args, **kwargs)`` submits a task and returns an ObjectRef (a list of
    ``num_returns`` refs when ``num_returns > 1``, None when 0). ``f.options(**opts)`` returns a
    new remote function with the options merged; the original is unchanged.

    An ``async def`` function raises ``ValueError`` at decoration, as in Ray (async code runs
    in async actors; a task wraps it with ``asyncio.run``).
    """

    def __init__(self, function, options=None, _key=None):
        if not callable(function):
            raise TypeError("The @ray.remote decorator must be applied to either a function or a class.")
        import inspect  # at first use: not loaded by ``import ray``

        if inspect.iscoroutinefunction(function):
            raise ValueError(
                "'async def' should not be used for remote tasks. You can wrap the async function "
                "with `asyncio.run(f())`. See more at:"
                "https://docs.ray.io/en/latest/ray-core/actors/async_api.html ")
        self._function = function
        self._function_name = f"{function.__module__}.{getattr(function, '__qualname__', function.__name__)}"
        self._default_options = dict(options or {})
        # As Ray: a function declared with GPUs gets a fresh worker per task unless it sets
        # max_calls (what a task leaves on its GPUs goes with its process). Decided at
        # decoration: .options(num_gpus=...) keeps the function's own (the copy is given it).
        # Implied, not one of the user's options: a backend without max_calls (matrix:
        # task.max_calls) refuses the option when set, not this default.
        self._implied_max_calls = 1 if (
            _key is None and (self._default_options.get("num_gpus") or 0) > 0
            and self._default_options.get("max_calls") is None) else None
        self._checked_backend = _options.check("task", self._default_options, submitting=False)
        self._is_generator = generators.is_generator_callable(function)
        if _key is None:  # decoration and .options() check it; copies share the key
            generators.validate_num_returns(self._is_generator, self._default_options.get("num_returns"), 5)
        self._key = _key or os.urandom(16)
        self._core_options = None
        self._retries_env = None  # RAY_TASK_MAX_RETRIES when _core_options were made
        self._signature = None
        self._wrap_remote()

    def _wrap_remote(self):
        """``self.remote``: :meth:`_submit` wearing the function's ``__name__``, ``__doc__``,
        ``__wrapped__`` (so its signature), as Ray's ``remote`` proxy is ``functools.wraps``
        of the function (tools and frameworks read them off ``f.remote``)."""
        submit = self._submit

        def remote(*args, **kwargs):
            return submit(*args, **kwargs)

        self.remote = functools.update_wrapper(remote, self._function)

    def __call__(self, *args, **kwargs):
        raise TypeError(
            f"Remote functions cannot be called directly. Instead of running "
            f"'{self._function_name}()', try '{self._function_name}.remote()'.")

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_core_options"] = None
        state["_signature"] = None
        del state["remote"]  # (made again by __setstate__)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._wrap_remote()

    def options(self, **task_options):
        """A copy with ``task_options`` merged over this function's options."""
        merged = dict(self._default_options)
        merged.update(task_options)
        # Each option is checked first (num_returns=-1: Ray's option text), then num_returns
        # against the function, as Ray's validate_task_options does.
        if "max_calls" in task_options:  # a property of the function's workers, as in Ray
            _options._check_value("max_calls", task_options["max_calls"])  # a bad value first
            raise ValueError("Setting 'max_calls' is not supported in '.options()'.")
        copy = RemoteFunction(self._function, merged, _key=self._key)
        copy._implied_max_calls = self._implied_max_calls
        generators.validate_num_returns(self._is_generator, task_options.get("num_returns"), 3)
        return copy

    def _remote(self, args=None, kwargs=None, **task_options):
        """Ray's lower-level form of ``.options(**task_options).remote(*args, **kwargs)``
        (``RemoteFunction._remote``: the call's arguments as a list and a dict, which older
        code and Ray's tests use). Returns what ``remote`` returns."""
        target = self.options(**task_options) if task_options else self
        return target.remote(*(args or ()), **(kwargs or {}))

    def _submit(self, *args, **kwargs):
        """``f.remote(*args, **kwargs)``: submit the task; returns its ObjectRef(s)."""
        _check_call(self, self._function, args, kwargs)
        core = _ensure_core()
        if core.backend_name != self._checked_backend:  # chosen by ray.init after decoration
            self._checked_backend = _options.check("task", self._default_options, core.backend_name, submitting=False)
        opts = self._core_options
        retries_env = os.environ.get("RAY_TASK_MAX_RETRIES")  # Ray reads it at each submission
        if opts is None or retries_env != self._retries_env:
            self._retries_env = retries_env
            options = self._default_options
            if self._implied_max_calls is not None:
                options = dict(options, max_calls=self._implied_max_calls)
            opts = self._core_options = _options.task_options(
                options, getattr(self._function, "__name__", "task"), self._is_generator,
                getattr(self._function, "__qualname__", None))
        placement = opts.scheduling
        if placement is None or (placement.in_group and placement.capture is None):
            # The caller's captured placement group, if it has one (Ray's capture_child_tasks).
            opts = _placement.with_capture(core, opts, opts.resources,
                                           getattr(self._function, "__qualname__", "task"))
        function, key = self._function, self._key
        if self._default_options.get("num_returns") == generators.DYNAMIC:
            function, key = generators.DynamicGeneratorCall(function), key + b"dynamic"
        # Keep ``args`` bound: it holds the caller's ObjectRefs alive until the core counts them.
        core_args, core_kwargs = _to_core_args(args, kwargs)
        with _Submitting(self._function_name):
            ids = core.submit_task(function, key, core_args, core_kwargs, opts)
        return _wrap_returns(ids, opts.num_returns, core, opts.generator)

    def bind(self, *args, **kwargs):
        """A lazy call of this function for a graph (mirrors ``RemoteFunction.bind``): a
        :class:`ray.dag.FunctionNode` run by ``.execute()``."""
        from ray_adapter.ray.dag.function_node import FunctionNode

        return FunctionNode(self, args, kwargs, self._default_options)

    def __repr__(self):
        return f"<ray.remote_function.RemoteFunction object at {hex(id(self))}>"


__getattr__ = gaps.module_getattr("ray.remote_function")
