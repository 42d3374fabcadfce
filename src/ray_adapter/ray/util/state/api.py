"""``ray.util.state.api``: Ray's module behind ``ray.util.state`` (mirrors Ray 2.60's).

Workloads import it as ``from ray.util.state import api`` and call ``api.list_nodes()``; it
serves the very functions, record classes and defaults of :mod:`ray.util.state` (same objects,
same shapes, same errors). What belongs to the dashboard's HTTP client (``StateApiClient``, the
request-option records, the records of runtime envs and cluster events) is a gap
whose error says what to call instead (see the compat matrix).
"""
from ray_adapter import gaps
from ray_adapter.ray.util.state import (DEFAULT_LIMIT, DEFAULT_RPC_TIMEOUT, ActorState,  # noqa: F401
                                        JobState, NodeState, ObjectState, PlacementGroupState,
                                        TaskState, WorkerState, get_actor, get_job, get_node,
                                        get_placement_group, get_task, get_worker, list_actors,
                                        list_jobs, list_nodes, list_objects, list_placement_groups,
                                        list_tasks, list_workers, summarize_actors,
                                        summarize_objects, summarize_tasks)

__getattr__ = gaps.module_getattr("ray.util.state.api")
