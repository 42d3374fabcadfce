"""Differential test: placement groups as RL stacks use them (scenarios S1, S3, S4, S9 of
shared/reference/workload_patterns.md) on one node with declared GPUs.

Prints only from the driver, deterministic facts (no ids, addresses or timings).
"""
import time

import ray
from ray.exceptions import GetTimeoutError
from ray.util.placement_group import (get_current_placement_group, placement_group,
                                      placement_group_table, remove_placement_group)
from ray.util.scheduling_strategies import (NodeAffinitySchedulingStrategy,
                                            PlacementGroupSchedulingStrategy)

ray.init(num_cpus=4, num_gpus=4)

# --- S1: a placement group with a timeout and cleanup ---------------------------------------
pg = placement_group([{"GPU": 1, "CPU": 1}] * 2, strategy="STRICT_PACK", name="pg")
try:
    ray.get(pg.ready(), timeout=180)
except GetTimeoutError:
    remove_placement_group(pg)
    raise
print("S1 created:", placement_group_table(pg)["state"], pg.bundle_count, pg.bundle_specs)
# Feasible on this node, but not while "pg" holds 2 of the 4 GPUs: it waits.
too_big = placement_group([{"GPU": 1, "CPU": 1}] * 3, strategy="STRICT_PACK", name="too_big")
try:
    ray.get(too_big.ready(), timeout=1)
    print("S1 too_big created (unexpected)")
except GetTimeoutError:
    print("S1 too_big timed out:", placement_group_table(too_big)["state"])
    remove_placement_group(too_big)
print("S1 after removal:", placement_group_table(too_big)["state"])
print("S1 free CPU / GPU:", ray.available_resources().get("CPU"), ray.available_resources().get("GPU"))
print("S1 group resources:", sorted(k.replace(pg.id.hex(), "<pg>") for k in ray.available_resources()
                                    if "_group_" in k))


# --- S3: mapping bundles and actors to nodes -------------------------------------------------
@ray.remote(num_cpus=1)
class Where:
    def node(self):
        return ray.get_runtime_context().get_node_id()

    def assigned(self):
        return sorted(ray.get_runtime_context().get_assigned_resources().items())


ip_of = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}
node_of_bundle = placement_group_table(pg)["bundles_to_node_id"]
print("S3 bundles:", sorted(node_of_bundle), "all on known nodes:",
      all(node in ip_of for node in node_of_bundle.values()))
where = [Where.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, i)).remote()
         for i in range(pg.bundle_count)]
print("S3 actor on its bundle's node:",
      [ray.get(w.node.remote()) == node_of_bundle[i] for i, w in enumerate(where)])
print("S3 assigned inside the group:", ray.get(where[0].assigned.remote()))


# --- S4: co-locate a server with a worker on its node ----------------------------------------
@ray.remote(num_cpus=0)
class Server:
    def node(self):
        return ray.get_runtime_context().get_node_id()


node_id = ray.get(where[1].node.remote())
server = Server.options(name="server_0", scheduling_strategy=NodeAffinitySchedulingStrategy(
    node_id=node_id, soft=False)).remote()
same = ray.get_actor("server_0")
print("S4 server on the worker's node:", ray.get(same.node.remote()) == node_id)


# --- S9: a nested executor reuses the parent's placement group -------------------------------
@ray.remote(num_cpus=0.25)
def child():
    group = get_current_placement_group()
    return group is not None and group == get_current_placement_group(), (
        ray.get_runtime_context().get_placement_group_id() is not None)


@ray.remote(num_cpus=0)
class Executor:
    def plan(self, world_size):
        current = get_current_placement_group()
        specs = current.bundle_specs if current else [{"GPU": 1.0}] * world_size
        return [sorted(b.items()) for b in specs], ray.get(child.remote())


for w in where:
    ray.kill(w)
remove_placement_group(pg)
pg9 = placement_group([{"CPU": 1, "GPU": 1}, {"CPU": 1}])
ray.get(pg9.ready())
captured = Executor.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
    pg9, placement_group_capture_child_tasks=True)).remote()
print("S9 captured:", ray.get(captured.plan.remote(2)))
free = Executor.remote()
print("S9 outside a group:", ray.get(free.plan.remote(2)))
print("S9 driver group:", get_current_placement_group())
remove_placement_group(pg9)


def wait_for_available(key, expected, limit=10.0):
    # Resource accounting is reported asynchronously in Ray: poll briefly.
    deadline = time.time() + limit
    while ray.available_resources().get(key) != expected and time.time() < deadline:
        time.sleep(0.1)
    return ray.available_resources().get(key)


print("end free CPU / GPU:", wait_for_available("CPU", 4.0), wait_for_available("GPU", 4.0))
ray.shutdown()
