"""verl 0.9.1's single controller (RayResourcePool, RayClassWithInitArgs, RayWorkerGroup, the
@register dispatch modes, fused workers, worker env vars) on whichever `ray` is imported; prints
one line per check, compared between real Ray and the adapter by tests/test_verl.py."""
import os

import ray
import torch

from verl.protocol import DataProto
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, Execute, register
from verl.single_controller.ray.base import (RayClassWithInitArgs, RayResourcePool, RayWorkerGroup,
                                             create_colocated_worker_raw_cls)

ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "RAY_LOCAL_WORLD_SIZE", "RAY_LOCAL_RANK",
       "WG_PREFIX", "WG_BACKEND", "RAY_USE_SPREAD", "custom_key")


@ray.remote
class EnvWorker(Worker):
    def __init__(self, base):
        super().__init__()
        self.base = base

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def env(self):
        return {k: os.environ.get(k) for k in ENV} | {"master_set": bool(os.environ.get("MASTER_ADDR")),
                                                      "port_set": bool(os.environ.get("MASTER_PORT"))}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def add(self, x):
        return self.base + x + self.rank

    @register(dispatch_mode=Dispatch.ALL_TO_ALL)
    def scale(self, xs):
        return xs * (self.rank + 1)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, execute_mode=Execute.RANK_ZERO)
    def only_zero(self):
        return f"rank {self.rank} of {self.world_size}"

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def double(self, data: DataProto):
        return DataProto.from_dict({"x": data.batch["x"] * 2 + self.rank})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
    def later(self, x):
        return x - self.rank


@ray.remote
class Actor(Worker):
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def add(self, x):
        return x + self.rank


@ray.remote
class Critic(Worker):
    def __init__(self, val):
        super().__init__()
        self.val = val

    @register(dispatch_mode=Dispatch.ALL_TO_ALL)
    def sub(self, x):
        return x - self.val


def main():
    ray.init(num_cpus=100)
    pool = RayResourcePool([4], use_gpu=False)
    wg = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=RayClassWithInitArgs(EnvWorker, base=10),
                        name_prefix="verl_diff", worker_env={"custom_key": "custom"})
    print("world_size", wg.world_size)
    for env in wg.env():
        print("env", sorted(env.items()))
    print("add", wg.add(5))
    print("scale", wg.scale([1, 2, 3, 4]))
    print("only_zero", wg.only_zero())
    out = wg.double(DataProto.from_dict({"x": torch.arange(8)}))
    print("double", out.batch["x"].tolist())
    print("later", ray.get(wg.later(100)))
    print("sync", wg.execute_all_sync("add", 1))
    try:
        RayWorkerGroup(resource_pool=pool, ray_cls_with_init=RayClassWithInitArgs(EnvWorker, base=0),
                       name_prefix="verl_bad", worker_env={"WORLD_SIZE": "100"})
    except ValueError as e:
        print("worker_env error", "WORLD_SIZE" in str(e))

    cls_dict = {"actor": RayClassWithInitArgs(cls=Actor), "critic": RayClassWithInitArgs(cls=Critic, val=10)}
    fused_base = create_colocated_worker_raw_cls(cls_dict)

    @ray.remote
    class Hybrid(fused_base):
        @register(dispatch_mode=Dispatch.ONE_TO_ALL)
        def foo(self, x):
            return self.critic.sub(self.actor.add(x))

    hybrid = RayClassWithInitArgs(cls=Hybrid)
    hybrid.fused_worker_used = True
    fused = RayWorkerGroup(resource_pool=RayResourcePool([2], use_gpu=False), ray_cls_with_init=hybrid)
    fused.fuse(cls_dict.keys())
    x = fused.actor.add(0.5)
    print("fused actor", x)
    print("fused critic", fused.critic.sub(x))
    print("fused foo", fused.foo(0.5))
    ray.shutdown()
    print("done")


if __name__ == "__main__":
    main()
