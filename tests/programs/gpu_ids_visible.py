"""Differential test: GPU ids when CUDA_VISIBLE_DEVICES is set before the runtime starts.

Ray then hands out the variable's own entries, as strings (``ray.get_gpu_ids()`` returns
``["6"]``, not ``[1]`` nor ``[6]``); without it, integers from 0. NeMo-RL sorts workers by
these ids and sets devices from them: ints and strs sort differently from ten GPUs up.
Prints only deterministic facts (Ray returns a set's order: ids are sorted here).
"""
import os

os.environ["CUDA_VISIBLE_DEVICES"] = "4,6,10"

import ray  # noqa: E402

ray.init(num_cpus=3, num_gpus=3)


@ray.remote(num_gpus=1, max_calls=0)
def one():
    ids = ray.get_gpu_ids()
    return ids, [type(i).__name__ for i in ids], os.environ.get("CUDA_VISIBLE_DEVICES"), \
        ray.get_runtime_context().get_accelerator_ids()["GPU"]


@ray.remote(num_gpus=2)
class Pair:
    def ids(self):
        ids = ray.get_gpu_ids()
        return (sorted(ids), [type(i).__name__ for i in ids],
                sorted(os.environ["CUDA_VISIBLE_DEVICES"].split(",")))


ids, types, visible, accel = ray.get(one.remote())
print("one gpu:", types, ids == [visible] == accel, visible in ("4", "6", "10"))
pair = Pair.remote()
print("pair:", ray.get(pair.ids.remote()))
ray.kill(pair)



@ray.remote(num_gpus=1)
def held():
    import time

    time.sleep(0.5)  # the three run at once, one device each
    return ray.get_gpu_ids()[0]


print("three at once, sorted:", sorted(ray.get([held.remote() for _ in range(3)])))


@ray.remote(num_gpus=1, runtime_env={"env_vars": {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1"}})
def noset():
    return [type(i).__name__ for i in ray.get_gpu_ids()], os.environ.get("CUDA_VISIBLE_DEVICES")


print("noset:", ray.get(noset.remote()))
print("driver:", ray.get_gpu_ids())
ray.shutdown()
