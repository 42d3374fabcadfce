"""Decorator, call and option forms (parsed by the tests only; never run)."""
import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy


@ray.remote
def plain():
    return 1


@ray.remote(num_cpus=1, max_calls=2, scheduling_strategy="SPREAD")
def configured():
    return 2


@ray.remote(max_concurrency=4, lifetime="detached")
class Actor:
    @ray.method(num_returns=2)
    def two(self):
        return 1, 2


class Plain:
    pass


def f():
    return 3


opts = {"num_gpus": 1, "accelerator_type": "A100"}
RemotePlain = ray.remote(Plain)
remote_f = ray.remote(f)
g = ray.remote(**opts)(f)
h = ray.remote(num_returns="streaming")(f)
k = ray.remote(**dict(max_restarts=2))(Plain)

a = Actor.options(name="x", **{"namespace": "ns"}).remote()
a.two.options(num_returns=1).remote()
configured.options(num_cpus=2, scheduling_strategy=PlacementGroupSchedulingStrategy(None)).remote()
plain.options(**some_dict).remote()
imported_fn.options(num_gpus=1).remote()
remote_f.options(num_cpu=1).remote()
ray.init("auto", runtime_env={"env_vars": {"A": "B"}, "pip": ["requests"]}, num_cpus=4,
         _temp_dir="/tmp/x")
RemotePlain.options(lifetime="detached", concurrency_groups={"io": 2}).remote()
ray.init(address="ray://head:10001")
for ray in ():
    ray.anything
