"""``ray.experimental.state.api``: Ray's deprecated alias of ``ray.util.state`` (same objects)."""
from ray_adapter import gaps
from ray_adapter.ray.util.state import (get_actor, get_job, get_node,  # noqa: F401
                                        get_placement_group, get_task, get_worker, list_actors,
                                        list_jobs, list_nodes, list_objects, list_placement_groups,
                                        list_tasks, list_workers, summarize_actors,
                                        summarize_objects, summarize_tasks)

__getattr__ = gaps.module_getattr("ray.experimental.state.api")
