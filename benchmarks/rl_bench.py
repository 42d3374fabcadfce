"""An RL post-training loop's use of Ray, public API only: prints one JSON object of figures.

Runs unchanged under real Ray or under the adapter (RAY_BACKEND=yuanrong); ``run_all.py`` runs
both in one session and prints the ratios (``benchmarks/rl_results.md`` keeps a table). The
driver imports torch, as a trainer does. Figures (medians):

- ``group_ready_s``: a placement group of 4 one-CPU bundles and one torch actor per bundle,
  from the group's creation to every actor's first answer (3 rounds, new actors each);
- ``controller_step_us``: one call on each of the 4 actors, then a get of the 4 results;
- ``stream_items_per_s``: small items from a streaming generator task;
- ``first_item_ms``: from ``.remote()`` of a generator task to its first item's value;
- ``state_dict_put_s`` / ``state_dict_to_4_actors_s``: a ``MB``-megabyte torch state dict
  (float32 tensors of 16 MB) put once, then taken by the 4 actors, each reading one element of
  every tensor (3 rounds); ``memcpy_floor_s``: one copy of those bytes in this process;
- ``compiled_step_us``: one ``execute`` of a compiled 2-actor pipeline (``InputNode -> a -> b``,
  ``experimental_compile()``) and a get of its result;
- ``pipe_floor_us``: the machine's floor for that step: a few bytes around a ring of three
  pipes through two other processes that sleep in ``read`` (three one-way hops, as the step's
  driver -> a -> b -> driver), no Ray at all.
"""
import json
import os
import statistics
import subprocess
import sys
import time

import ray
import torch
from ray.dag import InputNode
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

ACTORS = 4
MB = int(os.environ.get("RL_BENCH_MB", "256"))
TENSOR_MB = 16


@ray.remote(num_cpus=1)
class Worker:
    def __init__(self, rank):
        self.rank = rank
        self.weight = torch.zeros(16)

    def ready(self):
        return self.rank

    def step(self, x):
        return x + self.rank

    def load(self, state):
        return sum(float(t.view(-1)[-1]) for t in state.values())


@ray.remote(num_cpus=0)
class Stage:
    def forward(self, x):
        return x + 1


@ray.remote
def tokens(n):
    for i in range(n):
        yield i


def _median(samples, scale=1.0, digits=3):
    return round(statistics.median(samples) * scale, digits)


def worker_group():
    """The group's start-up (3 rounds); returns the figure and a live group for the rest."""
    rounds = []
    for attempt in range(3):
        start = time.perf_counter()
        group = placement_group([{"CPU": 1}] * ACTORS)
        workers = [Worker.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=group, placement_group_bundle_index=i)).remote(i) for i in range(ACTORS)]
        assert ray.get([w.ready.remote() for w in workers], timeout=300) == list(range(ACTORS))
        rounds.append(time.perf_counter() - start)
        if attempt < 2:
            for w in workers:
                ray.kill(w)
            remove_placement_group(group)
            time.sleep(1.0)  # the killed processes go before the next round
    return _median(rounds), workers


def controller_step(workers, steps=300):
    ray.get([w.step.remote(0) for w in workers])
    samples = []
    for i in range(steps):
        start = time.perf_counter()
        ray.get([w.step.remote(i) for w in workers])
        samples.append(time.perf_counter() - start)
    return _median(samples, 1e6, 1)


def streaming(items=5000, firsts=20):
    start = time.perf_counter()
    count = sum(1 for _ in tokens.remote(items))
    rate = round(count / (time.perf_counter() - start))
    samples = []
    for _ in range(firsts):
        start = time.perf_counter()
        generator = tokens.remote(3)
        ray.get(next(generator))
        samples.append(time.perf_counter() - start)
        del generator
    return rate, _median(samples, 1e3, 2)


def state_dict_to_actors(workers):
    count = max(1, MB // TENSOR_MB)
    numel = TENSOR_MB * 1024 * 1024 // 4
    state = {f"layer{i}.weight": torch.full((numel,), float(i)) for i in range(count)}
    expected = float(sum(range(count)))
    puts, fetches, floors = [], [], []
    for _ in range(3):
        start = time.perf_counter()
        ref = ray.put(state)
        puts.append(time.perf_counter() - start)
        start = time.perf_counter()
        assert ray.get([w.load.remote(ref) for w in workers]) == [expected] * len(workers)
        fetches.append(time.perf_counter() - start)
        del ref
        flat = torch.cat([t.view(-1) for t in state.values()])
        target = torch.empty_like(flat)
        target.copy_(flat)  # both pages faulted in: the timed copy below is the memory's speed
        start = time.perf_counter()
        target.copy_(flat)
        floors.append(time.perf_counter() - start)
        del flat, target
    return _median(puts), _median(fetches), _median(floors)


def compiled_pipeline(steps=300):
    first, second = Stage.remote(), Stage.remote()
    with InputNode() as inp:
        dag = second.forward.bind(first.forward.bind(inp))
    compiled = dag.experimental_compile()
    try:
        assert ray.get(compiled.execute(1)) == 3
        samples = []
        for i in range(steps):
            start = time.perf_counter()
            assert ray.get(compiled.execute(i)) == i + 2
            samples.append(time.perf_counter() - start)
    finally:
        compiled.teardown()
    return _median(samples, 1e6, 1)


_HOP = ("import os, sys\nsource, sink = int(sys.argv[1]), int(sys.argv[2])\n"
        "while True:\n    data = os.read(source, 64)\n    if not data:\n        break\n"
        "    os.write(sink, data)\n")


def pipe_floor(rounds=2000):
    """Median microseconds of a round of three one-way pipe hops (see the docstring)."""
    ring = [os.pipe() for _ in range(3)]  # driver -> p1 -> p2 -> driver
    hops = [subprocess.Popen([sys.executable, "-c", _HOP, str(ring[i][0]), str(ring[i + 1][1])],
                             pass_fds=(ring[i][0], ring[i + 1][1])) for i in range(2)]
    for i in range(2):
        os.close(ring[i][0])
        os.close(ring[i + 1][1])
    send, back = ring[0][1], ring[2][0]
    samples = []
    try:
        for i in range(rounds):
            start = time.perf_counter()
            os.write(send, b"x" * 8)
            os.read(back, 64)
            samples.append(time.perf_counter() - start)
    finally:
        os.close(send)
        os.close(back)
        for hop in hops:
            hop.wait()
    return _median(samples[rounds // 10:], 1e6, 1)


def main():
    torch.set_num_threads(1)
    ray.init(num_cpus=ACTORS + 2)  # the group reserves 4: streamed tasks need CPUs of their own
    out = {"impl": "ray-adapter" if os.environ.get("RAY_BACKEND") else "ray", "state_dict_mb": MB}
    out["group_ready_s"], workers = worker_group()
    out["controller_step_us"] = controller_step(workers)
    out["stream_items_per_s"], out["first_item_ms"] = streaming()
    out["state_dict_put_s"], out["state_dict_to_4_actors_s"], out["memcpy_floor_s"] = \
        state_dict_to_actors(workers)
    out["compiled_step_us"] = compiled_pipeline()
    out["pipe_floor_us"] = pipe_floor()
    print(json.dumps(out))
    ray.shutdown()


if __name__ == "__main__":
    main()
