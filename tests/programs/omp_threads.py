"""OMP_NUM_THREADS in tasks and actors, as Ray sets it when nobody did: the CPUs assigned to the
call (rounded down, at least 1; an actor without num_cpus: 1), unless the driver's environment
or the call's runtime_env sets it. The driver itself is left as it was."""
import os

import ray


@ray.remote
def threads():
    return os.environ.get("OMP_NUM_THREADS")


@ray.remote
class Actor:
    def threads(self):
        return os.environ.get("OMP_NUM_THREADS")


def main():
    os.environ.pop("OMP_NUM_THREADS", None)
    ray.init(num_cpus=4)
    print("task:", ray.get(threads.remote()))
    print("task, num_cpus=2:", ray.get(threads.options(num_cpus=2).remote()))
    print("task, num_cpus=3.5:", ray.get(threads.options(num_cpus=3.5).remote()))
    print("task, num_cpus=0.5:", ray.get(threads.options(num_cpus=0.5).remote()))
    print("task, num_cpus=0:", ray.get(threads.options(num_cpus=0).remote()))
    print("task, runtime_env:", ray.get(threads.options(
        runtime_env={"env_vars": {"OMP_NUM_THREADS": "7"}}).remote()))
    print("actor:", ray.get(Actor.remote().threads.remote()))
    print("actor, num_cpus=2:", ray.get(Actor.options(num_cpus=2).remote().threads.remote()))
    print("driver:", os.environ.get("OMP_NUM_THREADS"))
    print("done")


if __name__ == "__main__":
    main()
