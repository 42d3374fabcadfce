"""``ray.dag``: lazy task graphs (mirrors Ray's classic DAG API).

``f.bind(...)``, ``Cls.bind(...)``, ``handle.method.bind(...)`` and ``class_node.method.bind``
build nodes; :class:`InputNode` stands for the value given to ``dag.execute(...)``;
:class:`MultiOutputNode` gathers several outputs; ``dag.execute(...)`` submits the graph and
returns its refs; ``dag.experimental_compile()`` checks an actor graph and runs the same graph
per execution (see :mod:`.compiled_dag_node` and the compat matrix).
"""
from ray_adapter import gaps
from ray_adapter.ray.dag import compiled_dag_node  # noqa: F401 - bound as in Ray
from ray_adapter.ray.dag.class_node import ClassMethodNode, ClassNode
from ray_adapter.ray.dag.constants import (BIND_INDEX_KEY, COLLECTIVE_OPERATION_KEY, DAGNODE_TYPE_KEY,
                                           IS_CLASS_METHOD_OUTPUT_KEY, PARENT_CLASS_NODE_KEY,
                                           PREV_CLASS_METHOD_CALL_KEY)
from ray_adapter.ray.dag.context import DAGContext
from ray_adapter.ray.dag.dag_node import DAGNode
from ray_adapter.ray.dag.function_node import FunctionNode
from ray_adapter.ray.dag.input_node import DAGInputData, InputAttributeNode, InputNode
from ray_adapter.ray.dag.output_node import MultiOutputNode

__all__ = ["ClassNode", "ClassMethodNode", "DAGNode", "FunctionNode", "InputNode",
           "InputAttributeNode", "DAGInputData", "PARENT_CLASS_NODE_KEY",
           "PREV_CLASS_METHOD_CALL_KEY", "BIND_INDEX_KEY", "IS_CLASS_METHOD_OUTPUT_KEY",
           "COLLECTIVE_OPERATION_KEY", "DAGNODE_TYPE_KEY", "MultiOutputNode", "DAGContext"]

__getattr__ = gaps.module_getattr("ray.dag")
