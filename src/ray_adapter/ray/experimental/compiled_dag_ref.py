"""``ray.experimental.compiled_dag_ref``: where Ray's documentation imports the results of a
compiled graph from -- :class:`CompiledDAGRef` (what ``execute`` gives) and
:class:`CompiledDAGFuture` (what ``await execute_async`` gives). The same classes as
``ray.dag.compiled_dag_node``'s (see there)."""
from ray_adapter import gaps
from ray_adapter.ray.dag.compiled_dag_node import CompiledDAGFuture, CompiledDAGRef
from ray_adapter.ray.exceptions import (GetTimeoutError, RayChannelError, RayChannelTimeoutError,  # noqa: F401
                                        RayTaskError)

__all__ = ["CompiledDAGRef", "CompiledDAGFuture"]

__getattr__ = gaps.module_getattr("ray.experimental.compiled_dag_ref")
