"""Differential test: CUDA_VISIBLE_DEVICES given in a task's or actor's runtime_env env_vars.

Ray's worker starts with that variable and maps each GPU slot it is granted through the list,
as strings: slot 0 under "40,41" is "40" (its CUDA_VISIBLE_DEVICES then "40"); with
RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES the variable stays the whole list. NeMo-RL's SGLang
engine passes the variable this way. Without it, ids are ints from 0. Actors are kept alive so
that each grant is deterministic (three fractions of GPU 0; the task then gets GPU 1).
"""
import os

import ray

ray.init(num_cpus=2, num_gpus=4)


@ray.remote
class Engine:
    def devices(self):
        return (ray.get_gpu_ids(), os.environ.get("CUDA_VISIBLE_DEVICES"),
                ray.get_runtime_context().get_accelerator_ids()["GPU"])


@ray.remote(num_gpus=1)
def task():
    return ray.get_gpu_ids(), os.environ.get("CUDA_VISIBLE_DEVICES")


engines = []
for env in ({"CUDA_VISIBLE_DEVICES": "0,1,2,3", "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1"},
            {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, {"CUDA_VISIBLE_DEVICES": "40,41"}):
    engines.append(Engine.options(num_gpus=0.2, num_cpus=0.2, runtime_env={"env_vars": env}).remote())
    print("actor", sorted(env.items()), "->", ray.get(engines[-1].devices.remote()))
print("task under 40,41 ->", ray.get(task.options(runtime_env={"env_vars": {"CUDA_VISIBLE_DEVICES": "40,41"}}).remote()))
print("task without ->", ray.get(task.remote()))
ray.shutdown()
