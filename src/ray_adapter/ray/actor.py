"""``ray.actor``: actor classes, handles and methods (mirrors Ray's ``ray.actor``)."""
import os
import weakref

from ray_adapter import core as _core
from ray_adapter import gaps
from ray_adapter.core import TaskOptions, contained
from ray_adapter.core import errors as core_errors
from ray_adapter.ray._private import options as _options
from ray_adapter.ray._private.core_access import context_if_started, core as _ensure_core, translated
from ray_adapter.ray._raylet import ActorID
from ray_adapter.ray._private.signatures import checker_for
from ray_adapter.ray.remote_function import _check_call, _to_core_args, _wrap_returns

_METHOD_OPTIONS_ATTR = "__ray_method_options__"


def _method_option_names(decorator):
    """Keywords ``@ray.method`` (``decorator``) or ``ActorMethod.options`` takes, in Ray's
    order (the ``method`` section of the compat matrix's options)."""
    from ray_adapter import matrix

    return [k for k, e in matrix.options("method").items() if e.get("decorator", True) or not decorator]


def method(*args, **kwargs):
    """``@ray.method(num_returns=N, ...)``: options of one actor method (mirrors ``ray.method``).

    Raises AssertionError for an unknown keyword (as Ray does) and
    :class:`ray_adapter.gaps.RayAdapterOptionError` for one the adapter does not support."""
    valid = _method_option_names(decorator=True)
    for key in kwargs:
        if key not in valid:
            raise AssertionError(f"Unexpected keyword argument to @ray.method: {key!r}. The "
                                 f"supported keyword arguments are {valid}")
    _options.check("method", kwargs)

    def annotate(fn):
        setattr(fn, _METHOD_OPTIONS_ATTR, dict(kwargs))
        return fn

    if len(args) == 1 and callable(args[0]) and not kwargs:
        return annotate(args[0])
    if args:
        raise ValueError("The @ray.method decorator only takes keyword arguments.")
    return annotate


def _method_table(cls):
    """``{name: options}`` for every public or dunder-call method of ``cls``."""
    import inspect

    table = {}
    for name, member in inspect.getmembers(cls):
        if not callable(member) or (name.startswith("__") and name not in ("__call__",)):
            continue
        table[name] = dict(getattr(member, _METHOD_OPTIONS_ATTR, {}))
    return table


class _ActorMetadata:
    """``Cls.__ray_metadata__``: what libraries read of an actor class."""

    def __init__(self, modified_class, class_name, methods):
        self.modified_class = modified_class
        self.class_name = class_name
        self.method_meta = methods
        self.actor_creation_function_descriptor = None


class ActorClass:
    """What ``@ray.remote`` makes of a class (mirrors ``ray.actor.ActorClass``).

    ``Cls.remote(*args, **kwargs)`` creates an actor and returns its :class:`ActorHandle`;
    ``Cls.options(**opts).remote(...)`` does so with options merged (the class is unchanged).
    Instantiating it directly raises ``TypeError``.
    """

    def __init__(self, cls, options=None, _key=None):
        self.__ray_actor_class__ = cls
        self._default_options = dict(options or {})
        self._checked_backend = _options.check("actor", self._default_options)
        self._key = _key or os.urandom(16)
        self._signature = None
        self._methods = _method_table(cls)
        self._is_async = _options.is_async_class(cls)
        self.__ray_metadata__ = _ActorMetadata(cls, cls.__name__, self._methods)
        self.__doc__ = cls.__doc__
        self.__name__ = cls.__name__
        self.__qualname__ = getattr(cls, "__qualname__", cls.__name__)
        self.__module__ = cls.__module__

    def __call__(self, *args, **kwargs):
        raise TypeError(f"Actors cannot be instantiated directly. Instead of "
                        f"'{self.__name__}()', use '{self.__name__}.remote()'.")

    def options(self, **actor_options):
        """A copy with ``actor_options`` merged over this class's options."""
        merged = dict(self._default_options)
        merged.update(actor_options)
        return type(self)(self.__ray_actor_class__, merged, _key=self._key)

    def remote(self, *args, **kwargs):
        """Create the actor; returns its handle. A duplicate ``name`` raises
        ``ActorAlreadyExistsError`` here (unless ``get_if_exists=True``)."""
        cls = self.__ray_actor_class__
        _check_call(self, cls, args, kwargs)
        core = _ensure_core()
        if core.backend_name != self._checked_backend:  # chosen by ray.init after decoration
            _options.check("actor", self._default_options, core.backend_name)
            for method_options in self._methods.values():
                _options.check("method", method_options, core.backend_name)
            self._checked_backend = core.backend_name
        _ACTOR_CLASSES[self._key] = cls  # this process can check method calls' arguments
        meta = {"class_name": cls.__name__, "module": cls.__module__, "methods": self._methods,
                "class_key": self._key}
        opts = _options.actor_options(self._default_options, cls, meta, self._is_async)
        core_args, core_kwargs = _to_core_args(args, kwargs)  # ``args`` keeps refs alive
        with translated:
            try:
                info = core.create_actor(cls, self._key, core_args, core_kwargs, opts)
            except core_errors.ActorNameTaken as err:
                from ray_adapter.ray._private.errors import name_taken_error

                raise name_taken_error(err.name, self._default_options.get("namespace")) from None
        return ActorHandle._from_info(info)

    def bind(self, *args, **kwargs):
        """A lazy actor creation for a graph (mirrors ``ActorClass.bind``): a
        :class:`ray.dag.ClassNode`; each execution of its graph creates one actor."""
        from ray_adapter.ray.dag.class_node import ClassNode

        return ClassNode(self, args, kwargs, self._default_options)

    def __repr__(self):
        return f"<{self.__module__}.ActorClass({self.__name__}) object at {hex(id(self))}>"


#: Actor classes created in this process, by class key: method calls on their handles are
#: checked against the method's signature at .remote(), as Ray does.
_ACTOR_CLASSES = {}
_METHOD_SIGNATURES = {}


def _check_method_call(meta, method_name, args, kwargs):
    key = meta.get("class_key")
    cls = _ACTOR_CLASSES.get(key)
    if cls is None:
        return  # a handle whose class this process never created: the actor checks
    checker = _METHOD_SIGNATURES.get((key, method_name))
    if checker is None:
        import inspect

        static = isinstance(inspect.getattr_static(cls, method_name, None), (staticmethod, classmethod))
        checker = _METHOD_SIGNATURES[(key, method_name)] = checker_for(
            getattr(cls, method_name, None), drop_self=not static)
    checker.check(args, kwargs)


def _make_actor_class(cls, options):
    """``ray.remote(cls)``: an instance of ``ActorClass(<cls name>)``, a subclass of
    :class:`ActorClass` made per user class, as Ray names it."""
    return _derived_actor_class(cls)(cls, options)


def _derived_actor_class(cls):
    name = f"ActorClass({cls.__name__})"
    return type(name, (ActorClass,), {"__module__": cls.__module__, "__qualname__": name})


class ActorMethod:
    """One method of an actor handle (mirrors ``ray.actor.ActorMethod``):
    ``handle.m.remote(...)`` returns an ObjectRef (a list of refs for ``num_returns > 1``)."""

    def __init__(self, handle, method_name, options, own_options=False):
        self._handle = handle
        self._method_name = method_name
        self._options = options
        self._own_options = own_options  # from .options(): not the handle's shared cache

    def __call__(self, *args, **kwargs):
        raise TypeError(f"Actor methods cannot be called directly. Instead of running "
                        f"'object.{self._method_name}()', try 'object.{self._method_name}.remote()'.")

    def options(self, **call_options):
        """A copy with per-call options (``num_returns``, ``name``, ...) merged in (mirrors
        ``ActorMethod.options``). A keyword Ray does not know raises TypeError at
        ``.remote()``, as in Ray; one the adapter does not support raises
        :class:`ray_adapter.gaps.RayAdapterOptionError` here."""
        valid = _method_option_names(decorator=False)
        known = {k: v for k, v in call_options.items() if k in valid}
        _options.check("method", known)
        merged = dict(self._options)
        merged.update(call_options)
        return ActorMethod(self._handle, self._method_name, merged, own_options=True)

    def remote(self, *args, **kwargs):
        if self._own_options:
            valid = _method_option_names(decorator=False)
            for key in self._options:
                if key not in valid:
                    raise TypeError(f"_remote() got an unexpected keyword argument '{key}'")
        _check_method_call(self._handle._ray_meta, self._method_name, args, kwargs)
        core = _ensure_core()
        cache = None if self._own_options else self._handle._ray_method_options
        opts = cache.get(self._method_name) if cache is not None else None
        if opts is None:
            num_returns = self._options.get("num_returns")
            opts = TaskOptions(
                name=self._options.get("name") or f"{self._handle._ray_class_name}.{self._method_name}",
                num_returns=1 if num_returns is None else num_returns)
            if cache is not None:
                cache[self._method_name] = opts
        core_args, core_kwargs = _to_core_args(args, kwargs)  # ``args`` keeps refs alive
        with translated:
            ids = core.submit_actor_task(self._handle._ray_actor_id, self._method_name, core_args,
                                         core_kwargs, opts)
        return _wrap_returns(ids, opts.num_returns, core)

    def bind(self, *args, **kwargs):
        """A lazy call of this method for a graph (mirrors ``ActorMethod.bind``): a
        :class:`ray.dag.ClassMethodNode` on this actor."""
        from ray_adapter.ray.dag.class_node import bind_actor_method

        return bind_actor_method(self._handle, self._method_name,
                                 dict(self._options) if self._own_options else {}, args, kwargs)

    def __repr__(self):
        return f"<ray.actor.ActorMethod object at {hex(id(self))}>"


class ActorHandle:
    """A handle to an actor (mirrors ``ray.actor.ActorHandle``). Picklable: pass it to tasks
    and other actors. ``handle.method.remote(...)`` calls a method; calls from one caller run
    in submission order."""

    def __init__(self, actor_id, meta):
        self._ray_actor_id = actor_id
        self._ray_meta = meta
        self._ray_class_name = meta["class_name"]
        # Core options per method name; not ActorMethod objects, which point back at the handle
        # (a cycle would keep the actor alive after `del handle` until a GC pass).
        self._ray_method_options = {}
        if _core.is_started():
            # Ray ends a non-detached actor once no handle to it is left.
            core = _core.current()
            core.add_actor_handle(actor_id)
            weakref.finalize(self, _drop_handle, core, actor_id).atexit = False

    @classmethod
    def _from_info(cls, info):
        return cls(info.actor_id, info.handle_meta)

    @property
    def _actor_id(self):
        return ActorID(self._ray_actor_id)

    def __getattr__(self, name):
        if name.startswith("_ray_") or name.startswith("__"):
            raise AttributeError(f"'ActorHandle' object has no attribute '{name}'")
        methods = self._ray_meta["methods"]
        if methods is None:  # a handle to an actor whose class this process never saw
            return ActorMethod(self, name, {})
        if name not in methods:
            raise AttributeError(f"'ActorHandle' object has no attribute '{name}'")
        return ActorMethod(self, name, methods[name])

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._ray_meta["methods"] or ()))

    def __reduce__(self):
        # Inside a value the runtime serializes, the runtime learns of it with the value;
        # pickled anywhere else, the actor escapes scope tracking (lives until shutdown).
        if not contained.record_handle(self._ray_actor_id) and _core.is_started():
            _core.current().actor_handle_escaped(self._ray_actor_id)
        return _rebuild_handle, (self._ray_actor_id, self._ray_meta)

    def __eq__(self, other):
        return isinstance(other, ActorHandle) and other._ray_actor_id == self._ray_actor_id

    def __hash__(self):
        return hash(self._ray_actor_id)

    def __repr__(self):
        return f"Actor({self._ray_class_name}, {self._ray_actor_id.hex()})"


def _rebuild_handle(actor_id, meta):
    return ActorHandle(actor_id, meta)


def _drop_handle(core, actor_id):
    try:
        core.remove_actor_handle(actor_id)
    except Exception:  # interpreter shutdown: nothing left to release
        pass


def exit_actor():
    """End the current actor from inside one of its methods (mirrors ``ray.actor.exit_actor``):
    the actor is not restarted and later calls raise ``ActorDiedError``. Raises ``TypeError``
    outside an actor."""
    ctx = context_if_started()
    if ctx is None or ctx.actor_id is None:
        raise TypeError("exit_actor API is called on a non-actor worker.")
    _ensure_core().exit_current_actor()


__getattr__ = gaps.module_getattr("ray.actor")
