"""``ray.dag.dag_node``: :class:`DAGNode`, a node of a lazy task graph (mirrors Ray's classic
DAG API: ``f.bind(...)``, ``Cls.bind(...)``, ``handle.method.bind(...)``, ``dag.execute()``).

A node records what to call and its bound arguments; arguments may hold other nodes (at top
level or inside lists, tuples, dicts and sets). :meth:`DAGNode.execute` walks the graph
children first, runs each node once (a node shared by several consumers runs once per
``execute``) and passes each node's result where the node was bound: an ObjectRef at top level
is resolved by the receiving task, as with any ``.remote()`` call. The walk is iterative, so
long chains need no deep recursion.
"""
import sys
import uuid
import warnings

from ray_adapter import gaps
from ray_adapter.ray.dag._graph_values import topological, walk


class RayDeprecationWarning(DeprecationWarning):
    """The category of Ray's deprecation notices (shown once per module, as Ray does)."""


if not sys.warnoptions:  # the user's -W options win, as in Ray
    warnings.filterwarnings("module", category=RayDeprecationWarning)


def _replace(value, results):
    """``value`` with every DAG node inside it replaced by its result in ``results``."""
    if isinstance(value, DAGNode):
        return results[id(value)]
    if isinstance(value, list):
        return [_replace(v, results) for v in value]
    if isinstance(value, tuple):
        replaced = [_replace(v, results) for v in value]
        return type(value)(*replaced) if hasattr(value, "_fields") else tuple(replaced)
    if isinstance(value, (set, frozenset)):
        return type(value)(_replace(v, results) for v in value)
    if isinstance(value, dict):
        return {k: _replace(v, results) for k, v in value.items()}
    return value


class DAGNode:
    """A node of a lazy task graph (mirrors ``ray.dag.DAGNode``).

    ``get_args()`` / ``get_kwargs()`` / ``get_options()`` / ``get_other_args_to_resolve()``
    give what was bound; :meth:`execute` runs the graph this node ends; ``experimental_compile``
    prepares an actor graph for repeated execution (:mod:`.compiled_dag_node`).
    """

    #: What the compiler makes of a node of this class: ``"method"`` (an actor method call),
    #: ``"input"`` / ``"input_attribute"``, ``"outputs"``, ``"class"`` / ``"function"``
    #: (refused, as Ray refuses them); None: a kind compiled graphs do not support.
    _compile_role = None

    def __init__(self, args, kwargs, options, other_args_to_resolve):
        self._bound_args = tuple(args or ())
        self._bound_kwargs = dict(kwargs or {})
        self._bound_options = dict(options or {})
        self._bound_other_args_to_resolve = dict(other_args_to_resolve or {})
        self._stable_uuid = uuid.uuid4().hex
        # The nodes bound to this one's result, as Ray keeps them: the compiler checks the
        # whole graph this node is part of, not only what its output needs.
        self._downstream_nodes = []
        for child in self._children():
            child._downstream_nodes.append(self)

    # -- what was bound --------------------------------------------------------------------------
    def get_args(self):
        return self._bound_args

    def get_kwargs(self):
        return self._bound_kwargs

    def get_options(self):
        return self._bound_options

    def get_other_args_to_resolve(self):
        return self._bound_other_args_to_resolve

    def get_stable_uuid(self):
        """A uuid hex string that names this node for its lifetime."""
        return self._stable_uuid

    def _children(self):
        """The nodes this node's arguments hold, in binding order (args, kwargs, others)."""
        found = []
        walk(list(self._bound_args), found)
        walk(list(self._bound_kwargs.values()), found)
        walk(list(self._bound_other_args_to_resolve.values()), found)
        seen, out = set(), []
        for node in found:
            if id(node) not in seen:
                seen.add(id(node))
                out.append(node)
        return out

    # -- running -----------------------------------------------------------------------------
    def _run(self, user_args, user_kwargs):
        """Run the graph ending here, children first, each node once; returns its result."""
        results = {}
        for node in topological(self):
            args = _replace(list(node._bound_args), results)
            kwargs = _replace(node._bound_kwargs, results)
            other = _replace(node._bound_other_args_to_resolve, results)
            results[id(node)] = node._execute_node(args, kwargs, other, user_args, user_kwargs)
        return results[id(self)]

    def _execute_node(self, args, kwargs, other, user_args, user_kwargs):
        """Run this one node with its arguments' results; subclasses say how."""
        raise NotImplementedError

    def execute(self, *args, _ray_cache_refs=False, **kwargs):
        """Run the graph ending at this node with ``args`` / ``kwargs`` as the InputNode's
        value (mirrors ``DAGNode.execute``). Returns an ObjectRef for a function or method
        node, an actor handle for a class node, a list for a MultiOutputNode. Ray deprecates
        it with a ``RayDeprecationWarning``; so does this."""
        warnings.warn("DAGNode.execute() is deprecated and will be removed in a future release.",
                      RayDeprecationWarning, stacklevel=2)
        return self._run(args, kwargs)

    def experimental_compile(self, _submit_timeout=None, _buffer_size_bytes=None,
                             enable_asyncio=False, _max_inflight_executions=None,
                             _max_buffered_results=None, _overlap_gpu_communication=None,
                             _default_communicator="create"):
        """Prepare this actor-method graph for repeated execution; returns a
        :class:`~.compiled_dag_node.CompiledDAG` (mirrors ``DAGNode.experimental_compile``).
        Raises ``NotImplementedError`` for a graph with function nodes and ``ValueError`` for
        one that creates actors or has no InputNode, as Ray does."""
        from ray_adapter.ray.dag.compiled_dag_node import build_compiled_dag

        return build_compiled_dag(self, enable_asyncio=enable_asyncio,
                                  max_inflight_executions=_max_inflight_executions)

    def with_tensor_transport(self, *args, **kwargs):
        raise gaps.attribute_gap_error("ray.dag", "DAGNode.with_tensor_transport")

    # -- misc --------------------------------------------------------------------------------
    def __getattr__(self, attr):
        if attr == "bind":
            raise AttributeError(f".bind() cannot be used again on {type(self)} ")
        if attr == "remote":
            raise AttributeError(f".remote() cannot be used on {type(self)}. To execute the task "
                                 "graph for this node, use .execute().")
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{attr}'")

    def __getstate__(self):
        return self.__dict__

    def __setstate__(self, state):
        self.__dict__.update(state)

    def _label(self):
        return ""

    def __str__(self):
        return (f"({type(self).__name__}, {self._stable_uuid})(body={self._label()}, "
                f"args={list(self._bound_args)}, kwargs={self._bound_kwargs}, "
                f"options={self._bound_options})")
