"""Differential test: GPUs declared on a machine without GPUs (ray.init(num_gpus=4), as Ray
allows), handed to actors in placement-group bundles (scenario S3's GPU half).

Each rollout actor holds one GPU: CUDA_VISIBLE_DEVICES, ray.get_gpu_ids() and
get_accelerator_ids()["GPU"] agree, and the four actors hold four distinct devices. Two
half-GPU actors share one device. Prints only deterministic facts.
"""
import os

import ray
from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

ray.init(num_cpus=4, num_gpus=4)
print("cluster GPU:", ray.cluster_resources()["GPU"])


@ray.remote(num_gpus=1, num_cpus=0.5)
class Rollout:
    def devices(self):
        ctx = ray.get_runtime_context()
        return {"visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "ids": ray.get_gpu_ids(),
                "accel": ctx.get_accelerator_ids()["GPU"], "node": ctx.get_node_id(),
                "assigned": sorted(ctx.get_assigned_resources().items())}


pg = placement_group([{"GPU": 1, "CPU": 0.5}] * 4, strategy="PACK")
ray.get(pg.ready())
nodes = placement_group_table(pg)["bundles_to_node_id"]
rollouts = [Rollout.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, i)).remote()
            for i in range(4)]
seen = ray.get([r.devices.remote() for r in rollouts])
for i, d in enumerate(seen):
    print(f"rollout {i}: one id {len(d['ids']) == 1}, visible matches ids "
          f"{d['visible'] == ','.join(str(x) for x in d['ids'])}, accel matches "
          f"{d['accel'] == [str(x) for x in d['ids']]}, on bundle node {d['node'] == nodes[i]}, "
          f"assigned {d['assigned']}")
print("distinct devices:", len({tuple(d["ids"]) for d in seen}))
print("GPU left:", ray.available_resources().get("GPU"))
for r in rollouts:
    ray.kill(r)
remove_placement_group(pg)


@ray.remote(num_gpus=0.5, num_cpus=0)
class Half:
    def ids(self):
        return ray.get_gpu_ids(), os.environ.get("CUDA_VISIBLE_DEVICES")


halves = [Half.remote() for _ in range(2)]
(a, va), (b, vb) = ray.get([h.ids.remote() for h in halves])
print("half GPUs share one device:", a == b and len(a) == 1 and va == vb)


@ray.remote(num_cpus=1)
def no_gpu():
    return ray.get_gpu_ids(), ray.get_runtime_context().get_accelerator_ids()["GPU"]


print("task without GPUs:", ray.get(no_gpu.remote()))
print("driver gpu ids:", ray.get_gpu_ids())
ray.shutdown()
