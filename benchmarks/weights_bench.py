"""Weights to workers, as an RL loop moves them: prints one JSON object of figures.

Runs unchanged under real Ray or under the adapter (RAY_BACKEND=yuanrong); run_all.py runs both
and prints the ratios. A torch state dict of ``MB`` megabytes (float32 tensors of 16 MB each)
is put once and fetched by 4 actors that each read one element of every tensor (so every
tensor is really there). Figures (medians of 3 rounds):

- ``state_dict_put_s``: ``ray.put`` of the state dict;
- ``state_dict_to_4_actors_s``: the 4 actors' calls taking it, from ``.remote()`` to all results;
- ``state_dict_get_driver_s``: ``ray.get`` of it in the driver;
- ``memcpy_floor_s``: one copy of the same bytes in this process (``torch.Tensor.copy_``): the
  machine's floor for moving them once.
"""
import json
import os
import statistics
import time

import ray
import torch

MB = int(os.environ.get("WEIGHTS_BENCH_MB", "256"))
TENSOR_MB = 16
ROUNDS = 3


@ray.remote(num_cpus=0)
class Trainer:
    def load(self, state):
        return sum(float(t.view(-1)[-1]) for t in state.values())


def state_dict():
    count = max(1, MB // TENSOR_MB)
    numel = TENSOR_MB * 1024 * 1024 // 4
    return {f"layer{i}.weight": torch.full((numel,), float(i)) for i in range(count)}


def main():
    torch.set_num_threads(1)
    ray.init(num_cpus=4)
    state = state_dict()
    expected = float(sum(range(len(state))))
    actors = [Trainer.remote() for _ in range(4)]
    ray.get([a.load.remote({}) for a in actors])  # started and warm
    puts, fetches, gets, floors = [], [], [], []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        ref = ray.put(state)
        puts.append(time.perf_counter() - start)
        start = time.perf_counter()
        results = ray.get([a.load.remote(ref) for a in actors])
        fetches.append(time.perf_counter() - start)
        assert results == [expected] * 4, results
        start = time.perf_counter()
        got = ray.get(ref)
        gets.append(time.perf_counter() - start)
        assert float(got["layer0.weight"][0]) == 0.0
        del got, ref
        flat = torch.cat([t.view(-1) for t in state.values()])
        target = torch.empty_like(flat)
        start = time.perf_counter()
        target.copy_(flat)
        floors.append(time.perf_counter() - start)
        del flat, target
    print(json.dumps({
        "impl": "ray-adapter" if os.environ.get("RAY_BACKEND") else "ray",
        "state_dict_mb": MB,
        "state_dict_put_s": round(statistics.median(puts), 3),
        "state_dict_to_4_actors_s": round(statistics.median(fetches), 3),
        "state_dict_get_driver_s": round(statistics.median(gets), 3),
        "memcpy_floor_s": round(statistics.median(floors), 3),
    }))
    ray.shutdown()


if __name__ == "__main__":
    main()
