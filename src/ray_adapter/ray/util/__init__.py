"""``ray.util``: placement groups, node address, named-actor listing, ActorPool, accelerators."""
from ray_adapter import gaps
from ray_adapter.ray._private.services import get_node_ip_address
from ray_adapter.ray.util import accelerators, scheduling_strategies
from ray_adapter.ray.util.actor_pool import ActorPool
from ray_adapter.ray.util.placement_group import (get_current_placement_group, get_placement_group,
                                                  placement_group, placement_group_table,
                                                  remove_placement_group)


# The runtime-internal actors of ray.util.collective live here; Ray lists no such actor.
_INTERNAL_NAMESPACE = "_ray_internal_collective"


def list_named_actors(all_namespaces=False):
    """Names of live named actors in the current namespace, or ``[{"name", "namespace"}]`` dicts
    for every namespace when ``all_namespaces`` (mirrors ``ray.util.list_named_actors``)."""
    from ray_adapter.ray._private.core_access import core, translated

    with translated:
        entries = [e for e in core().list_named_actors(all_namespaces)
                   if e["namespace"] != _INTERNAL_NAMESPACE]
    if all_namespaces:
        return entries
    return [e["name"] for e in entries]


# As in Ray, `ray.util.collective` is bound by `import ray.util.collective` only.
__getattr__ = gaps.module_getattr("ray.util")
