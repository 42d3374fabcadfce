"""``ray.dag.output_node``: :class:`MultiOutputNode`, several outputs of one graph."""
from ray_adapter.ray.dag.dag_node import DAGNode


class MultiOutputNode(DAGNode):
    """``MultiOutputNode([node, ...])`` (mirrors ``ray.dag.MultiOutputNode``): executing it
    gives the list of its nodes' results (ObjectRefs), in order."""

    _compile_role = "outputs"  # what the compiler makes of it (compiled_dag_node)

    def __init__(self, args, other_args_to_resolve=None):
        if isinstance(args, tuple):
            args = list(args)
        if not isinstance(args, list):
            raise ValueError(f"Invalid input type for `args`, {type(args)}.")
        super().__init__(args, {}, {}, other_args_to_resolve)

    def _execute_node(self, args, kwargs, other, user_args, user_kwargs):
        return list(args)

    def _label(self):
        return "__MultiOutputNode__"
