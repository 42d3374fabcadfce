"""``ray.actor``: actor classes, handles and methods (mirrors Ray's ``ray.actor``)."""
import os
import sys
import weakref

from ray_adapter import core as _core
from ray_adapter import gaps
from ray_adapter.core import contained
from ray_adapter.core import errors as core_errors
from ray_adapter.ray._private import actor_methods as _methods
from ray_adapter.ray._private.actor_methods import exit_actor  # noqa: F401 - Ray's home of it
from ray_adapter.ray._private import generators as _generators
from ray_adapter.ray._private import options as _options
from ray_adapter.ray._private import placement as _placement
from ray_adapter.ray._private.core_access import context_if_started, core as _ensure_core
from ray_adapter.ray._private.object_ref_generator import ObjectRefGenerator  # noqa: F401 - Ray's name here
from ray_adapter.ray._private.signatures import checker_for
from ray_adapter.ray._private.object_refs import ActorID
from ray_adapter.ray.remote_function import _Submitting, _check_call, _to_core_args, _wrap_returns


def _method_option_names(decorator):
    """Keywords ``@ray.method`` (``decorator``) or ``ActorMethod.options`` takes, in Ray's
    order (the ``method`` section of the compat matrix's options)."""
    from ray_adapter import matrix

    return [k for k, e in matrix.options("method").items() if e.get("decorator", True) or not decorator]


def method(*args, **kwargs):
    """``@ray.method(num_returns=N, concurrency_group=..., ...)``: options of one actor method
    (mirrors ``ray.method``). The options are also set as Ray's attributes on the function
    (``__ray_num_returns__``, ``__ray_concurrency_group__``, ...).

    Raises AssertionError for an unknown keyword or a positional argument (as Ray does),
    ValueError for ``num_returns="streaming"`` on a plain function, and
    :class:`ray_adapter.gaps.RayAdapterOptionError` for an option the adapter does not support."""
    valid = _method_option_names(decorator=True)
    if len(args) == 1 and callable(args[0]) and not kwargs:
        return _annotate(args[0], {})
    assert not args, ("The @ray.method decorator must be applied using no arguments or at least "
                      f"one of the arguments in the list {valid}, for example "
                      "'@ray.method(num_returns=2)'.")
    for key in kwargs:
        assert key in valid, (f"Unexpected keyword argument to @ray.method: '{key}'. The "
                              f"supported keyword arguments are {valid}")
    for key, value in kwargs.items():
        _options._check_value(key, value)
    _options.check("method", kwargs)
    return lambda fn: _annotate(fn, kwargs)


def _annotate(fn, kwargs):
    if "num_returns" in kwargs:
        _generators.validate_num_returns(_generators.is_generator_callable(fn), kwargs["num_returns"], 4)
    setattr(fn, _methods.METHOD_OPTIONS_ATTR, dict(kwargs))
    for key, value in kwargs.items():
        attr = _methods.RAY_METHOD_ATTRS.get(key)
        if attr is not None:
            setattr(fn, attr, value)
    return fn


class _ActorClassMetadata:
    """``Cls.__ray_metadata__``: what libraries read of an actor class."""

    def __init__(self, modified_class, class_name, methods, concurrency_groups):
        self.modified_class = modified_class
        self.class_name = class_name
        self.method_meta = methods
        self.concurrency_groups = concurrency_groups
        self.actor_creation_function_descriptor = None


class ActorClassInheritanceException(TypeError):
    """Raised when a class statement inherits from an actor class (a ``@ray.remote`` class);
    mirrors ``ray.actor.ActorClassInheritanceException``. Inherit from the undecorated class
    and decorate the subclass instead."""


class ActorClass:
    """What ``@ray.remote`` makes of a class (mirrors ``ray.actor.ActorClass``).

    ``ray.remote(Cls)`` is an instance of ``ActorClass(Cls)``, a class deriving from this one
    and from Ray's modified subclass of ``Cls``: ``isinstance(ray.remote(Cls), Cls)`` holds,
    ``dir()`` lists ``Cls``'s methods and attributes. ``Cls.remote(*args, **kwargs)`` creates
    an actor and returns its :class:`ActorHandle`; ``Cls.options(**opts).remote(...)`` does so
    with options merged. Instantiating it directly raises ``TypeError``.
    """

    def __init__(self, *args, **kwargs):
        # Python calls this when a class statement names an actor class as a base (the actor
        # class's type is then the metaclass): refused as in Ray.
        bases = args[1] if len(args) == 3 and isinstance(args[1], tuple) else ()
        for base in bases:
            if isinstance(base, ActorClass):
                raise ActorClassInheritanceException(
                    f"Attempted to define subclass '{args[0]}' of actor class "
                    f"'{base.__ray_metadata__.class_name}'. Inheriting from actor classes is not "
                    "currently supported. You can instead inherit from a non-actor base class and "
                    "make the derived class an actor class (with @ray.remote).")
        raise AssertionError("ActorClass.__init__ should not be called. Please use the "
                             "@ray.remote decorator instead.")

    @classmethod
    def _ray_from_modified_class(cls, modified_class, options, key=None):
        """The actor class object for ``modified_class`` (see :func:`_make_actor_class`)."""
        derived = _DERIVED.get(modified_class)
        if derived is None:
            name = f"ActorClass({modified_class.__ray_actor_class__.__name__})"
            namespace = {"__module__": modified_class.__module__, "__qualname__": name, "__doc__": None}
            user_del = getattr(modified_class, "__del__", None)
            if user_del is not None:
                # The class object is an instance of the user's class, as in Ray, so its
                # ``__del__`` runs when the decorated class object is collected -- and only then:
                # not for this method's first draft nor for the copies ``.options()`` makes.
                def __del__(self, _user_del=user_del, _finalizing=sys.is_finalizing):
                    # (Ray's class object outlives the interpreter's teardown: not called then.)
                    if self.__dict__.get("_ray_primary") and not _finalizing():
                        _user_del(self)
                namespace["__del__"] = __del__
            derived = _DERIVED[modified_class] = type(name, (cls, modified_class), namespace)
        self = derived.__new__(derived)
        user_cls = modified_class.__ray_actor_class__
        methods, streaming = _methods.method_table(modified_class)
        for method_options in methods.values():
            _options.check("method", method_options)
        # Set through __dict__: the user's class may define __setattr__.
        self.__dict__.update(
            _default_options={}, _ray_key=key or os.urandom(16), _ray_methods=methods,
            _ray_modified_class=modified_class,
            _ray_generators=streaming, _ray_is_async=_options.is_async_class(user_cls))
        actor_class = self._with_options(dict(options or {}))
        actor_class.__dict__["_ray_primary"] = True
        return actor_class

    def _method_table(self):
        """``{method name: options}``. Made again at the first use of a class object rebuilt
        from a pickle: its class may still have been being unpickled then (a class that names
        itself, ``Node.remote()`` in a method of ``Node``, sent to a worker by value, is rebuilt
        from the empty skeleton cloudpickle fills after rebuilding what refers to it)."""
        if self.__dict__.get("_ray_rebuilt"):
            methods, streaming = _methods.method_table(self._ray_modified_class)
            for method_options in methods.values():
                _options.check("method", method_options)
            self.__dict__.update(_ray_methods=methods, _ray_generators=streaming, _ray_rebuilt=False,
                                 _ray_is_async=_options.is_async_class(self.__ray_actor_class__))
            self.__ray_metadata__.method_meta = methods
        return self._ray_methods

    def _with_options(self, options):
        """This class object with ``options`` instead of its own (same key and methods)."""
        clone = type(self).__new__(type(self))
        state = dict(self.__dict__)
        state.pop("_ray_primary", None)
        groups = dict(options.get("concurrency_groups") or {})
        user_cls = self.__ray_actor_class__
        _methods.check_groups(user_cls.__name__, state["_ray_methods"], groups)
        state.update(
            _default_options=options, _signature=None,
            _ray_checked_backend=_options.check("actor", options, submitting=False),
            __ray_metadata__=_ActorClassMetadata(state["_ray_modified_class"], user_cls.__qualname__,
                                            state["_ray_methods"], groups))
        clone.__dict__.update(state)
        return clone

    def __call__(self, *args, **kwargs):
        name = self.__ray_metadata__.class_name
        raise TypeError(f"Actors cannot be instantiated directly. Instead of '{name}()', use "
                        f"'{name}.remote()'.")

    def __reduce__(self):
        return _rebuild_actor_class, (self.__ray_actor_class__, self._default_options, self._ray_key)

    def options(self, **actor_options):
        """The class with ``actor_options`` merged over its own (mirrors
        ``ActorClass.options``: call ``.remote()`` on the result). ``concurrency_groups``
        cannot be set here (ValueError, as in Ray)."""
        if "concurrency_groups" in actor_options:
            raise ValueError("Setting 'concurrency_groups' is not supported in '.options()'.")
        merged = dict(self._default_options)
        merged.update(actor_options)
        return _ActorOptionWrapper(self._with_options(merged))

    def remote(self, *args, **kwargs):
        """Create the actor; returns its handle. A duplicate ``name`` raises
        ``ActorAlreadyExistsError`` here (unless ``get_if_exists=True``)."""
        return _create(self, args, kwargs)

    def _remote(self, args=None, kwargs=None, **actor_options):
        """Ray's lower-level form of ``.options(**actor_options).remote(*args, **kwargs)``
        (``ActorClass._remote``, used by older code and Ray's tests); returns the handle."""
        target = self.options(**actor_options) if actor_options else self
        return target.remote(*(args or ()), **(kwargs or {}))

    def bind(self, *args, **kwargs):
        """A lazy actor creation for a graph (mirrors ``ActorClass.bind``): a
        :class:`ray.dag.ClassNode`; each execution of its graph creates one actor."""
        from ray_adapter.ray.dag.class_node import ClassNode

        return ClassNode(self, args, kwargs, self._default_options)

    def __repr__(self):
        return f"<{type(self).__module__}.{type(self).__qualname__} object at {hex(id(self))}>"


class _ActorOptionWrapper:
    """``ActorClass.options(...)``: ``remote()`` creates the actor with the merged options."""

    def __init__(self, actor_class):
        self._actor_class = actor_class

    def remote(self, *args, **kwargs):
        return _create(self._actor_class, args, kwargs)

    def options(self, **actor_options):
        return self._actor_class.options(**actor_options)

    def bind(self, *args, **kwargs):
        return self._actor_class.bind(*args, **kwargs)


_ActorOptionWrapper.__name__ = _ActorOptionWrapper.__qualname__ = "ActorOptionWrapper"


def _create(actor_class, args, kwargs):
    cls = actor_class.__ray_actor_class__
    actor_class._method_table()
    _check_call(actor_class, cls, args, kwargs)
    core = _ensure_core()
    if core.backend_name != actor_class._ray_checked_backend:  # chosen by ray.init after decoration
        _options.check("actor", actor_class._default_options, core.backend_name, submitting=False)
        for method_options in actor_class._ray_methods.values():
            _options.check("method", method_options, core.backend_name)
        actor_class._ray_checked_backend = core.backend_name
    key = actor_class._ray_key
    _ACTOR_CLASSES[key] = actor_class.__ray_metadata__.modified_class  # to check method calls here
    options = actor_class._default_options
    meta = {"class_name": cls.__name__, "module": cls.__module__, "methods": actor_class._ray_methods,
            "class_key": key, "generators": actor_class._ray_generators,
            "concurrency_groups": dict(options.get("concurrency_groups") or {}),
            # calls over max_pending_calls are refused by .remote() itself (see TaskOptions)
            "pending_limit": (options.get("max_pending_calls") or -1) > 0}
    opts = _options.actor_options(options, cls, meta, actor_class._ray_is_async)
    if opts.scheduling is None or (opts.scheduling.in_group and opts.scheduling.capture is None):
        opts = _placement.with_capture(core, opts, opts.resources, cls.__qualname__,
                                       _options.is_default_actor(options))
    core_args, core_kwargs = _to_core_args(args, kwargs)  # ``args`` keeps refs alive
    with _Submitting(f"{cls.__module__}.{cls.__qualname__}"):
        try:
            info = core.create_actor(cls, key, core_args, core_kwargs, opts)
        except core_errors.ActorNameTaken as err:
            from ray_adapter.ray._private.errors import name_taken_error

            raise name_taken_error(err.name, options.get("namespace")) from None
    return ActorHandle._from_info(info)


def _rebuild_actor_class(cls, options, key):
    actor_class = _make_actor_class(cls, options, key)
    actor_class.__dict__["_ray_rebuilt"] = True  # its method table is made again when first used
    return actor_class


#: The ActorClass(Cls) type of each modified class, made once.
_DERIVED = {}
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


def _make_actor_class(cls, options, key=None):
    """``ray.remote(cls)``: an instance of ``ActorClass(<cls name>)``, a class derived from
    :class:`ActorClass` and Ray's modified subclass of ``cls``, as Ray makes it."""
    return ActorClass._ray_from_modified_class(_methods.modify_class(cls), options, key)


class ActorMethod:
    """One method of an actor handle (mirrors ``ray.actor.ActorMethod``):
    ``handle.m.remote(...)`` returns an ObjectRef (a list of refs for ``num_returns > 1``, an
    ObjectRefGenerator for a generator method)."""

    def __init__(self, handle, method_name, options, own_options=False):
        self._handle = handle
        self._method_name = method_name
        self._options = options
        self._own_options = own_options  # from .options(): not the handle's shared cache

    def __call__(self, *args, **kwargs):
        raise TypeError(f"Actor methods cannot be called directly. Instead of running "
                        f"'object.{self._method_name}()', try 'object.{self._method_name}.remote()'.")

    def options(self, **call_options):
        """A copy with per-call options (``num_returns``, ``concurrency_group``, ``name``, ...)
        merged in (mirrors ``ActorMethod.options``). A keyword Ray does not know raises
        TypeError at ``.remote()``, as in Ray; one the adapter does not support raises
        :class:`ray_adapter.gaps.RayAdapterOptionError` here."""
        valid = _method_option_names(decorator=False)
        known = {k: v for k, v in call_options.items() if k in valid}
        for key, value in known.items():
            _options._check_value(key, value)
        _options.check("method", known)
        meta = self._handle._ray_meta
        if "num_returns" in known and meta.get("methods") is not None:
            _generators.validate_num_returns(self._method_name in (meta.get("generators") or ()),
                                             known["num_returns"], 3)
        merged = dict(self._options)
        merged.update(call_options)
        return ActorMethod(self._handle, self._method_name, merged, own_options=True)

    def _remote(self, args=None, kwargs=None, **call_options):
        """Ray's lower-level form of ``.options(**call_options).remote(*args, **kwargs)``
        (``ActorMethod._remote``: ``num_returns``, ``name``, ``concurrency_group`` ...)."""
        target = self.options(**call_options) if call_options else self
        return target.remote(*(args or ()), **(kwargs or {}))

    def remote(self, *args, **kwargs):
        if self._own_options:
            valid = _method_option_names(decorator=False)
            for key in self._options:
                if key not in valid:
                    raise TypeError(f"_remote() got an unexpected keyword argument '{key}'")
        handle = self._handle
        _check_method_call(handle._ray_meta, self._method_name, args, kwargs)
        core = _ensure_core()
        cache = None if self._own_options else handle._ray_method_options
        entry = cache.get(self._method_name) if cache is not None else None
        if entry is None:
            entry = _methods.call_options(handle._ray_meta, self._method_name, self._options)
            if cache is not None:
                cache[self._method_name] = entry
        opts, dynamic = entry
        name = self._method_name
        if dynamic:  # run through __ray_call__: the worker collects the generator's values
            args, name = (_generators.DynamicGeneratorCall(name, method=True),) + tuple(args), "__ray_call__"
        core_args, core_kwargs = _to_core_args(args, kwargs)  # ``args`` keeps refs alive
        with _Submitting(self._call_name):
            try:
                ids = core.submit_actor_task(handle._ray_actor_id, name, core_args, core_kwargs, opts)
            except core_errors.PendingCallsLimit as err:
                from ray_adapter.ray._private.errors import pending_calls_error

                raise pending_calls_error(err, self._method_name, handle) from None
        return _wrap_returns(ids, opts.num_returns, core, opts.generator)

    def _call_name(self):
        handle = self._handle
        return f"{handle._ray_meta.get('module')}.{handle._ray_class_name}.{self._method_name}"

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
    in submission order. Every actor also answers ``__ray_ready__`` (True once created) and
    ``__ray_call__(fn, *args)`` (runs ``fn(actor, *args)`` on it)."""

    def __init__(self, actor_id, meta):
        if isinstance(meta, bytes):  # serialized by the worker that created the actor
            import pickle  # lazy: keeps `import ray` fast
            meta = pickle.loads(meta)
        self._ray_actor_id = actor_id
        self._ray_meta = meta
        self._ray_class_name = meta["class_name"]
        # Core options per method name; not ActorMethod objects, which point back at the handle
        # (a cycle would keep the actor alive after `del handle` until a GC pass).
        self._ray_method_options = {}
        self._ray_session = None  # the runtime the handle was made in (None: before any)
        if _core.is_started():
            # Ray ends a non-detached actor once no handle to it is left.
            core = self._ray_session = _core.current()
            core.add_actor_handle(actor_id)
            weakref.finalize(self, _drop_handle, core, actor_id).atexit = False

    @classmethod
    def _from_info(cls, info):
        return cls(info.actor_id, info.handle_meta)

    @property
    def _actor_id(self):
        return ActorID(self._ray_actor_id)

    def __getattr__(self, name):
        if name.startswith("_ray_"):
            raise AttributeError(f"'ActorHandle' object has no attribute '{name}'")
        methods = self._ray_meta["methods"]
        if methods is None:  # a handle to an actor whose class this process never saw
            if name.startswith("__") and name not in _methods.BUILTIN_METHODS:
                raise AttributeError(f"'ActorHandle' object has no attribute '{name}'")
            return ActorMethod(self, name, {})
        if name not in methods:
            raise AttributeError(f"'ActorHandle' object has no attribute '{name}'")
        return ActorMethod(self, name, methods[name])

    @property
    def _method_shells(self):
        """``{method name: ActorMethod}`` of the actor's methods, ``__init__`` and Ray's own
        among them (Ray's private attribute, which NeMo-RL reads to list what an actor
        supports); made on each read (an ActorMethod points back at this handle)."""
        methods = self._ray_meta["methods"]
        if methods is None:
            return {}
        return {name: ActorMethod(self, name, methods.get(name, {}))
                for name in sorted({"__init__", *methods})}

    def __dir__(self):
        """The actor's method names and ``__init__``, as Ray lists them (frameworks walk it to
        bind methods)."""
        methods = self._ray_meta["methods"]
        return sorted({"__init__", *methods}) if methods is not None else sorted(super().__dir__())

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


__getattr__ = gaps.module_getattr("ray.actor")
