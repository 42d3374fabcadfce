"""``ray.dag.input_node``: :class:`InputNode`, the value given to ``execute``, and parts of it.

``with InputNode() as inp: dag = f.bind(inp)`` then ``dag.execute(5)`` passes ``5``. With
one positional argument and no keywords the InputNode stands for that value; otherwise for a
:class:`DAGInputData` of all of them. ``inp[0]`` / ``inp["k"]`` / ``inp.k`` are
:class:`InputAttributeNode` s: an index or key of that value (a positional or keyword
argument of ``execute``, or an item / attribute of its single argument).
"""
from ray_adapter.ray.dag._graph_values import DAGInputData, attribute_value, input_value
from ray_adapter.ray.dag.dag_node import DAGNode

IN_CONTEXT_MANAGER = "__in_context_manager__"
class InputNode(DAGNode):
    """The input of a graph (mirrors ``ray.dag.InputNode``); use it as a context manager.
    Takes no arguments (``ValueError`` otherwise); ``input_type`` is accepted for Ray's
    visualizers."""

    _compile_role = "input"  # what the compiler makes of it (compiled_dag_node)

    def __init__(self, *args, input_type=None, _other_args_to_resolve=None, **kwargs):
        if args or kwargs:
            raise ValueError("InputNode should not take any args or kwargs.")
        self.input_attribute_nodes = {}
        self.input_type = input_type
        super().__init__([], {}, {}, _other_args_to_resolve)

    def _in_context_manager(self):
        return bool(self._bound_other_args_to_resolve.get(IN_CONTEXT_MANAGER))

    def set_context(self, key, val):
        self._bound_other_args_to_resolve[key] = val

    def __enter__(self):
        self.set_context(IN_CONTEXT_MANAGER, True)
        return self

    def __exit__(self, *args):
        return None

    def _execute_node(self, args, kwargs, other, user_args, user_kwargs):
        assert self._in_context_manager(), (
            "InputNode is a singleton instance that should be only used in context manager "
            "for dag building and execution. See the docstring of class InputNode for examples.")
        return input_value(user_args, user_kwargs)

    def _attribute(self, key, accessor):
        node = self.input_attribute_nodes.get((key, accessor))
        if node is None:
            node = self.input_attribute_nodes[(key, accessor)] = InputAttributeNode(self, key, accessor)
        return node

    def __getattr__(self, key):
        if key.startswith("_") or key in ("input_attribute_nodes", "input_type"):
            raise AttributeError(key)  # private names and pickle's probes are not input fields
        return self._attribute(key, "__getattr__")

    def __getitem__(self, key):
        assert isinstance(key, (str, int)), (
            "Please only use int index or str as first-level key to access fields of dag input.")
        return self._attribute(key, "__getitem__")

    def _label(self):
        return "__InputNode__"


class InputAttributeNode(DAGNode):
    """One index, key or attribute of a graph's input (mirrors ``ray.dag.InputAttributeNode``)."""

    _compile_role = "input_attribute"  # what the compiler makes of it (compiled_dag_node)

    def __init__(self, dag_input_node, key, accessor_method, input_type=None):
        self._dag_input_node = dag_input_node
        self._key = key
        self._accessor_method = accessor_method
        super().__init__([], {}, {}, {"dag_input_node": dag_input_node, "key": key,
                                      "accessor_method": accessor_method,
                                      "result_type_string": input_type})

    @property
    def key(self):
        return self._key

    def _execute_node(self, args, kwargs, other, user_args, user_kwargs):
        return attribute_value(other["dag_input_node"], self._key, self._accessor_method)

    def _label(self):
        return f'["{self._key}"]'
