"""Ray patterns of NeMo-RL's worker groups that the adapter once got wrong: a worker that sets
RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES in its runtime env's env_vars (Megatron, SGLang and
vLLM TP>1 workers) sees the devices it was given, not one Ray narrowed it to; an actor handle's
``_method_shells`` lists what the actor supports (printed when a method name is wrong)."""
import os

import ray

ray.init(num_cpus=2, num_gpus=2, include_dashboard=False)
NOSET = {"env_vars": {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1"}}


@ray.remote(num_gpus=1)
class Worker:
    def report(self):
        ids = ray.get_gpu_ids()  # (which one: the order of frees and grants is Ray's own)
        return len(ids), os.environ.get("CUDA_VISIBLE_DEVICES") == (str(ids[0]) if ids else None)

    def echo(self, x):
        return x


@ray.remote(num_gpus=1)
def task():
    return len(ray.get_gpu_ids()), os.environ.get("CUDA_VISIBLE_DEVICES")


flagged = Worker.options(runtime_env=NOSET).remote()
print("actor, NOSET in its runtime env:", ray.get(flagged.report.remote()))
ray.kill(flagged)
print("task, NOSET in its runtime env:", ray.get(task.options(runtime_env=NOSET).remote()))
plain = Worker.remote()
print("actor without it (count, CUDA_VISIBLE_DEVICES is its id):", ray.get(plain.report.remote()))

try:
    getattr(plain, "no_such_method")
except AttributeError as exc:
    print("supported methods:", sorted(plain._method_shells.keys()), "|", exc)
ray.shutdown()
