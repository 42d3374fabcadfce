"""Differential test: an RL trainer's worker group (scenario S2 of workload_patterns.md).

N actors on one placement group, one per bundle; rank 0's bundle hosts a task that picks the
rendezvous address (ray.util.get_node_ip_address() and a free port); every rank gets RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT through runtime_env env_vars; the driver maps bundles
to nodes with placement_group_table(pg)["bundles_to_node_id"] and sorts the workers by node,
then by rank. Prints only deterministic facts.
"""
import os
import socket

import ray
from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

WORLD_SIZE = 4
ray.init(num_cpus=4, num_gpus=4)


@ray.remote
def find_free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return ray.util.get_node_ip_address(), s.getsockname()[1]


class WorkerImpl:
    def __init__(self, master_addr, master_port):
        self.master = (master_addr, master_port)

    def init_model(self):
        env = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
        ctx = ray.get_runtime_context()
        return {"rank": int(env["RANK"]), "world": int(env["WORLD_SIZE"]),
                "same_master": (env["MASTER_ADDR"], int(env["MASTER_PORT"])) == self.master,
                "node": ctx.get_node_id(), "in_group": ctx.get_placement_group_id() is not None,
                "resources": sorted(ctx.get_assigned_resources())}

    def node_ip(self):
        return ray.util.get_node_ip_address()


pg = placement_group([{"CPU": 1, "GPU": 1}] * WORLD_SIZE, strategy="PACK", name="actor_rollout")
ray.get(pg.ready(), timeout=60)


def at(i):
    return PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=i,
                                            placement_group_capture_child_tasks=True)


addr, port = ray.get(find_free_port.options(num_cpus=0, scheduling_strategy=at(0)).remote())
print("rendezvous: address of rank 0's node:", addr == ray.util.get_node_ip_address(),
      "port is free:", isinstance(port, int) and port > 0)
Worker = ray.remote(WorkerImpl)
workers = [Worker.options(num_gpus=1, scheduling_strategy=at(rank), runtime_env={"env_vars": {
    "RANK": str(rank), "WORLD_SIZE": str(WORLD_SIZE), "MASTER_ADDR": addr, "MASTER_PORT": str(port)}}
).remote(addr, port) for rank in range(pg.bundle_count)]
infos = ray.get([w.init_model.remote() for w in workers])
node_of_bundle = placement_group_table(pg)["bundles_to_node_id"]
print("bundles:", sorted(node_of_bundle), "nodes used:", len(set(node_of_bundle.values())))
for rank, info in sorted(enumerate(infos), key=lambda pair: (pair[1]["node"], pair[0])):
    print(f"rank {rank}: env rank {info['rank']}, world {info['world']}, same master "
          f"{info['same_master']}, on its bundle's node {info['node'] == node_of_bundle[rank]}, "
          f"in group {info['in_group']}, holds {info['resources']}")
ips = ray.get([w.node_ip.remote() for w in workers])
print("one master address for the group:", len(set(ips)) == 1 and ips[0] == addr)
for w in workers:
    ray.kill(w)
remove_placement_group(pg)
print("removed:", placement_group_table(pg)["state"])
ray.shutdown()
