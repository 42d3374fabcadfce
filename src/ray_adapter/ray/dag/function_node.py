"""``ray.dag.function_node``: :class:`FunctionNode`, a bound call of a remote function."""
from ray_adapter.ray.dag.dag_node import DAGNode


class FunctionNode(DAGNode):
    """``f.bind(*args, **kwargs)`` (mirrors ``ray.dag.FunctionNode``): executing it submits
    ``f.remote(*args, **kwargs)`` (with ``f``'s options) and gives its ObjectRef(s)."""

    _compile_role = "function"  # what the compiler makes of it (compiled_dag_node)

    def __init__(self, func_body, func_args, func_kwargs, func_options, other_args_to_resolve=None):
        self._body = func_body  # the RemoteFunction, options included
        super().__init__(func_args, func_kwargs, func_options, other_args_to_resolve)

    def _execute_node(self, args, kwargs, other, user_args, user_kwargs):
        return self._body.remote(*args, **kwargs)

    def _label(self):
        return getattr(self._body, "__name__", repr(self._body))
