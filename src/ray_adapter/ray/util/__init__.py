"""``ray.util``: placement groups, node address, named-actor listing, ActorPool, accelerators."""
from ray_adapter import gaps
from ray_adapter.ray._private.services import get_node_ip_address
from ray_adapter.ray.util import accelerators
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


_gap_getattr = gaps.module_getattr("ray.util")


def __getattr__(name):
    if name == "collective":  # Ray binds it at `import ray.util.collective`; here at first use
        import importlib

        return importlib.import_module("ray_adapter.ray.util.collective")
    return _gap_getattr(name)
