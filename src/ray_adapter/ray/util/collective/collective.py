"""``ray.util.collective.collective``: Ray's implementation module behind
``ray.util.collective`` (mirrors Ray 2.60's).

Workloads import it as ``from ray.util.collective import collective`` and call
``collective.broadcast(...)``; it serves the very functions of :mod:`ray.util.collective`
(same objects, signatures and errors). Ray's own group classes, its group registry and its
networking helpers are gaps whose errors say what to use instead (see the compat matrix).
"""
from ray_adapter import gaps
from ray_adapter.ray.util.collective import (allgather, allgather_multigpu, allreduce,  # noqa: F401
                                             allreduce_multigpu, barrier, broadcast,
                                             broadcast_multigpu, create_collective_group,
                                             destroy_collective_group, get_collective_group_size,
                                             get_group_handle, get_rank, gloo_available,
                                             init_collective_group, is_backend_available,
                                             is_group_initialized, nccl_available, recv,
                                             recv_multigpu, reduce, reduce_multigpu, reducescatter,
                                             reducescatter_multigpu, send, send_multigpu,
                                             synchronize)

__getattr__ = gaps.module_getattr("ray.util.collective.collective")
