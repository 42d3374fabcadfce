"""An RL worker group's start-up: prints one JSON object of figures.

Runs unchanged under real Ray or under the adapter (RAY_BACKEND=yuanrong); run_all.py runs both
and prints the ratios. The driver imports torch (as a trainer does), makes a placement group
of 4 one-CPU bundles and one actor per bundle whose constructor uses torch; figures (medians of
3 rounds, each round with new actors):

- ``torch_group_ready_s``: from the placement group's creation to every actor's ``ready()``
  answer (the actors' processes started, torch imported, constructors run);
- ``group_teardown_s``: killing the actors and removing the group.
"""
import json
import os
import statistics
import time

import ray
import torch
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

ROUNDS = 3
ACTORS = 4


@ray.remote(num_cpus=1)
class Worker:
    def __init__(self, rank):
        self.rank = rank
        self.weight = torch.zeros(16)

    def ready(self):
        return self.rank + float(self.weight.sum())


def main():
    ray.init(num_cpus=ACTORS)
    ready, teardown = [], []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        group = placement_group([{"CPU": 1}] * ACTORS)
        workers = [Worker.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=group, placement_group_bundle_index=i)).remote(i) for i in range(ACTORS)]
        assert ray.get([w.ready.remote() for w in workers], timeout=300) == [float(i) for i in range(ACTORS)]
        ready.append(time.perf_counter() - start)
        start = time.perf_counter()
        for w in workers:
            ray.kill(w)
        remove_placement_group(group)
        teardown.append(time.perf_counter() - start)
        del workers
        time.sleep(1.0)  # the killed processes go before the next round
    print(json.dumps({
        "impl": "ray-adapter" if os.environ.get("RAY_BACKEND") else "ray",
        "torch_group_ready_s": round(statistics.median(ready), 3),
        "group_teardown_s": round(statistics.median(teardown), 3),
    }))
    ray.shutdown()


if __name__ == "__main__":
    main()
