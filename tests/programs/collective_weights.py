"""Weight broadcast from a trainer to rollout actors over ray.util.collective (gloo on CPU).

The shape of an RL weight sync (scenario S10): the trainer and three rollout actors, each pinned
to its own bundle of one placement group; the trainer updates its weights, broadcasts them
to the rollouts in a collective group, the rollouts generate with them and all four
all-reduce their rewards (numpy arrays). A second group over the same actors is declared from
the driver with create_collective_group and joined lazily on its first call. Values are small
integers and halves, so every sum is exact and the output deterministic.
"""
import numpy as np
import torch

import ray
import ray.util.collective as collective
from ray.util.collective.types import ReduceOp
from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

SHAPES = {"bias": (4,), "embed": (8, 4), "proj": (4, 4)}
WORLD = 4  # the trainer (rank 0) and three rollouts

ray.init()


@ray.remote(num_cpus=0.5)
class Trainer:
    def __init__(self):
        self.weights = {name: torch.arange(int(np.prod(shape)), dtype=torch.float32).reshape(shape)
                        for name, shape in SHAPES.items()}

    def setup(self):
        collective.init_collective_group(WORLD, 0, backend="gloo", group_name="weights")
        return collective.get_rank("weights"), collective.get_collective_group_size("weights")

    def train_step(self, step):
        for w in self.weights.values():
            w.mul_(0.5).add_(float(step))
        return float(sum(w.sum() for w in self.weights.values()))

    def push_weights(self):
        for name in sorted(self.weights):
            collective.broadcast(self.weights[name], src_rank=0, group_name="weights")
        collective.barrier(group_name="weights")
        return "pushed"

    def collect_rewards(self):
        total = np.zeros(3, dtype=np.float32)
        best = np.zeros(3, dtype=np.float32)
        collective.allreduce(total, group_name="weights", op=ReduceOp.SUM)
        collective.allreduce(best, group_name="weights", op=ReduceOp.MAX)
        return total.tolist(), best.tolist()

    def stats(self):
        mine = np.array([0.0, 0.0], dtype=np.float32)
        gathered = [np.zeros(2, dtype=np.float32) for _ in range(WORLD)]
        before = collective.is_group_initialized("stats")
        collective.allgather(gathered, mine, group_name="stats")
        return before, collective.get_rank("stats"), [g.tolist() for g in gathered]

    def teardown(self):
        collective.destroy_collective_group("weights")
        collective.destroy_collective_group("stats")
        return collective.is_group_initialized("weights")


@ray.remote(num_cpus=0.5)
class Rollout:
    def __init__(self, rank):
        self.rank = rank
        self.weights = {name: torch.zeros(shape) for name, shape in SHAPES.items()}
        self.last = None

    def setup(self):
        collective.init_collective_group(WORLD, self.rank, backend="gloo", group_name="weights")
        return collective.get_rank("weights"), collective.get_collective_group_size("weights")

    def pull_weights(self):
        for name in sorted(self.weights):
            collective.broadcast(self.weights[name], src_rank=0, group_name="weights")
        collective.barrier(group_name="weights")
        return float(sum(w.sum() for w in self.weights.values()))

    def generate(self, prompt):
        x = torch.full((8,), float(prompt))
        out = (x @ self.weights["embed"]) @ self.weights["proj"] + self.weights["bias"]
        self.last = out
        return out.tolist()

    def report_rewards(self):
        reward = np.array([float(self.last.sum()) / 1024.0, self.rank, 1.0], dtype=np.float32)
        best = reward.copy()
        collective.allreduce(reward, group_name="weights", op=ReduceOp.SUM)
        collective.allreduce(best, group_name="weights", op=ReduceOp.MAX)
        return "reported"

    def stats(self):
        mine = np.array([self.rank, self.rank * 10], dtype=np.float32)
        gathered = [np.zeros(2, dtype=np.float32) for _ in range(WORLD)]
        before = collective.is_group_initialized("stats")
        collective.allgather(gathered, mine, group_name="stats")
        return before, collective.get_rank("stats"), [g.tolist() for g in gathered]

    def teardown(self):
        collective.destroy_collective_group("weights")
        collective.destroy_collective_group("stats")
        return collective.is_group_initialized("weights")


# One bundle per member: the trainer in bundle 0, each rollout pinned to its own bundle.
pg = placement_group([{"CPU": 0.5}] * WORLD, strategy="PACK")
ray.get(pg.ready())


def bundle(i):
    return PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=i)


trainer = Trainer.options(scheduling_strategy=bundle(0)).remote()
rollouts = [Rollout.options(scheduling_strategy=bundle(rank)).remote(rank) for rank in range(1, WORLD)]
members = [trainer] + rollouts
print("bundles:", sorted(placement_group_table(pg)["bundles_to_node_id"]))
print("ranks:", ray.get([m.setup.remote() for m in members]))

for step in (1, 2):
    checksum = ray.get(trainer.train_step.remote(step))
    pushed = trainer.push_weights.remote()
    pulled = ray.get([r.pull_weights.remote() for r in rollouts])
    print(f"step {step}: trainer checksum {checksum}, {ray.get(pushed)}, rollout checksums {pulled}")
    outputs = ray.get([r.generate.remote(prompt) for r, prompt in zip(rollouts, (1, 2, 3))])
    print(f"step {step}: generations {outputs}")
    rewards = trainer.collect_rewards.remote()
    ray.get([r.report_rewards.remote() for r in rollouts])
    total, best = ray.get(rewards)
    print(f"step {step}: reward sum {total}, max {best}")

# Same ranks as "weights": Ray 2.60 builds a second gloo group from its first one, so other ranks
# would be reported by get_rank but not used (the adapter's tests cover permuted ranks).
collective.create_collective_group(members, WORLD, [0, 1, 2, 3], backend="gloo", group_name="stats")
for line in ray.get([m.stats.remote() for m in members]):
    print("stats (joined before first call, rank, gathered):", line)
print("torn down:", ray.get([m.teardown.remote() for m in members]))
try:
    ray.get_actor("info_stats")
    print("declaration kept")
except ValueError:
    print("declaration removed")
remove_placement_group(pg)
ray.shutdown()
