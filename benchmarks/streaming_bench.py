"""Streaming generators and concurrency groups: prints one JSON object of figures.

Runs unchanged under real Ray or under the adapter (RAY_BACKEND=yuanrong); run_all.py runs both
and prints the ratios. Figures (medians over repetitions where stated):

- ``task_stream_items_per_s``: small items from a generator task to the driver;
- ``actor_stream_items_per_s``: the same from a generator actor method;
- ``first_item_ms``: from ``.remote()`` on a warm worker to the first item's value (median of 20);
- ``group_calls_per_s``: tiny calls spread over a threaded actor's concurrency groups;
- ``async_group_calls_per_s``: the same on an async actor.
"""
import json
import os
import statistics
import time

import ray

ITEMS = 5000
CALLS = 2000


@ray.remote
def numbers(n):
    for i in range(n):
        yield i


@ray.remote
class Source:
    def numbers(self, n):
        for i in range(n):
            yield i


@ray.remote(concurrency_groups={"io": 4, "compute": 2})
class Grouped:
    @ray.method(concurrency_group="io")
    def io(self, x):
        return x

    @ray.method(concurrency_group="compute")
    def compute(self, x):
        return x

    def default(self, x):
        return x


@ray.remote(concurrency_groups={"io": 4, "compute": 2})
class AsyncGrouped:
    @ray.method(concurrency_group="io")
    async def io(self, x):
        return x

    @ray.method(concurrency_group="compute")
    async def compute(self, x):
        return x

    async def default(self, x):
        return x


def stream_rate(make):
    best = None
    for _ in range(3):
        start = time.perf_counter()
        total = sum(ray.get(ref) for ref in make(ITEMS))
        elapsed = time.perf_counter() - start
        assert total == ITEMS * (ITEMS - 1) // 2
        best = elapsed if best is None else min(best, elapsed)
    return round(ITEMS / best)


def first_item_ms():
    ray.get(next(numbers.remote(1)))  # a warm worker holds the function
    samples = []
    for _ in range(20):
        start = time.perf_counter()
        gen = numbers.remote(3)
        ray.get(next(gen))
        samples.append((time.perf_counter() - start) * 1000)
        list(gen)
    return round(statistics.median(samples), 3)


def group_rate(actor):
    methods = [actor.io, actor.compute, actor.default]
    ray.get([m.remote(0) for m in methods])
    start = time.perf_counter()
    ray.get([methods[i % 3].remote(i) for i in range(CALLS)])
    return round(CALLS / (time.perf_counter() - start))


def main():
    kwargs = {"num_cpus": 2}
    if os.environ.get("RAY_BACKEND", "").lower() != "yuanrong":
        kwargs["include_dashboard"] = False
    ray.init(**kwargs)
    source = Source.remote()
    ray.get(source.__ray_ready__.remote())
    out = {
        "impl": os.environ.get("RAY_BACKEND", "ray"),
        "items": ITEMS,
        "task_stream_items_per_s": stream_rate(numbers.remote),
        "actor_stream_items_per_s": stream_rate(source.numbers.remote),
        "first_item_ms": first_item_ms(),
        "group_calls_per_s": group_rate(Grouped.remote()),
        "async_group_calls_per_s": group_rate(AsyncGrouped.remote()),
    }
    ray.shutdown()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
