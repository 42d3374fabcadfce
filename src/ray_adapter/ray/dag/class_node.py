"""``ray.dag.class_node``: :class:`ClassNode` (``Cls.bind(...)``, an actor the graph creates)
and :class:`ClassMethodNode` (``node.method.bind(...)`` or ``handle.method.bind(...)``).

A ClassNode creates a new actor each time its graph is executed; its method nodes run on that
actor in the order they were bound (each waits for the call bound before it, as in Ray). A
method bound on an existing handle runs on that actor at every execution.
"""
from ray_adapter.ray.dag.constants import BIND_INDEX_KEY, PARENT_CLASS_NODE_KEY, PREV_CLASS_METHOD_CALL_KEY
from ray_adapter.ray.dag.dag_node import DAGNode


class ClassNode(DAGNode):
    """``Cls.bind(*args, **kwargs)`` (mirrors ``ray.dag.ClassNode``): executing it creates the
    actor (with ``Cls``'s options) and gives its handle; ``node.method`` gives an unbound
    method node whose ``.bind(...)`` makes a :class:`ClassMethodNode`."""

    _compile_role = "class"  # what the compiler makes of it (compiled_dag_node)

    def __init__(self, cls, cls_args, cls_kwargs, cls_options, other_args_to_resolve=None):
        self._body = cls  # the ActorClass, options included
        self._last_call = None
        super().__init__(cls_args, cls_kwargs, cls_options, other_args_to_resolve)

    def _execute_node(self, args, kwargs, other, user_args, user_kwargs):
        return self._body.remote(*args, **kwargs)

    def __getattr__(self, method_name):
        if method_name.startswith("_"):
            raise AttributeError(method_name)
        if method_name == "bind":
            raise AttributeError(f".bind() cannot be used again on {type(self)} ")
        methods = self._body._method_table()
        if method_name not in methods:
            raise AttributeError(f"'{type(self._body).__name__}' object has no attribute '{method_name}'")
        return _UnboundClassMethodNode(self, method_name, {})

    def _label(self):
        return str(self._body)


class _UnboundClassMethodNode:
    """``class_node.method``: waits for ``.bind(...)`` (or ``.options(...)`` first)."""

    def __init__(self, actor, method_name, options):
        self._actor = actor
        self._method_name = method_name
        self._options = options

    def bind(self, *args, **kwargs):
        node = ClassMethodNode(self._method_name, args, kwargs, self._options, {
            PARENT_CLASS_NODE_KEY: self._actor,
            PREV_CLASS_METHOD_CALL_KEY: self._actor._last_call,
        })
        self._actor._last_call = node
        return node

    def options(self, **options):
        self._options = options
        return self

    def __getattr__(self, attr):
        if attr == "remote":
            raise AttributeError(".remote() cannot be used on ClassMethodNodes. Use .bind() instead "
                                 "to express an symbolic actor call.")
        raise AttributeError(attr)


class ClassMethodNode(DAGNode):
    """One bound actor-method call (mirrors ``ray.dag.ClassMethodNode``): executing it calls
    ``method.remote(*args, **kwargs)`` on its actor (the handle, or the actor its ClassNode
    created in this execution) and gives the ObjectRef(s)."""

    _compile_role = "method"  # what the compiler makes of it (compiled_dag_node)

    def __init__(self, method_name, method_args, method_kwargs, method_options, other_args_to_resolve):
        self._method_name = method_name
        self._parent_class_node = other_args_to_resolve.get(PARENT_CLASS_NODE_KEY)
        super().__init__(method_args, method_kwargs, method_options, other_args_to_resolve)

    def _execute_node(self, args, kwargs, other, user_args, user_kwargs):
        method = getattr(other[PARENT_CLASS_NODE_KEY], self._method_name)
        if self._bound_options:
            method = method.options(**self._bound_options)
        return method.remote(*args, **kwargs)

    def get_method_name(self):
        """The name of the actor method this node calls (mirrors Ray's)."""
        return self._method_name

    def _label(self):
        return f"{self._method_name}()"


def bind_actor_method(handle, method_name, options, args, kwargs):
    """``handle.method.bind(...)``: a method node on an existing actor."""
    index = getattr(handle, "_ray_dag_bind_index", 0)
    try:
        handle._ray_dag_bind_index = index + 1
    except AttributeError:
        pass
    return ClassMethodNode(method_name, args, kwargs, options, {
        PARENT_CLASS_NODE_KEY: handle, PREV_CLASS_METHOD_CALL_KEY: None, BIND_INDEX_KEY: index})
