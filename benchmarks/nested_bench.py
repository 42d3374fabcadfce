"""Submissions made inside an actor (a controller fanning work out to tasks and to another
actor, as RL frameworks' controllers do), timed the same way under the adapter and real Ray.

Run under the adapter (``RAY_BACKEND=yuanrong python benchmarks/nested_bench.py``) and under real
Ray (its interpreter, no variable) in the same session (``run_all.py`` does both):

- ``nested_task_batch_us``: per task, 1,000 no-op tasks submitted from an actor, then one
  ``ray.get`` of them all (median of 5 batches);
- ``nested_call_batch_us``: the same with 1,000 calls of another actor;
- ``nested_call_rt_us``: one call of another actor from an actor, submitted and waited for one
  at a time (median of 5 batches of 300).

Prints one JSON object as its last line.
"""
import json
import statistics
import time

import ray


@ray.remote
def noop():
    return 1


@ray.remote
class Target:
    def ping(self):
        return 1


@ray.remote
class Controller:
    def __init__(self):
        self.target = Target.remote()

    def task_batch(self, n):
        start = time.perf_counter()
        ray.get([noop.remote() for _ in range(n)])
        return (time.perf_counter() - start) / n * 1e6

    def call_batch(self, n):
        start = time.perf_counter()
        ray.get([self.target.ping.remote() for _ in range(n)])
        return (time.perf_counter() - start) / n * 1e6

    def call_rt(self, n):
        start = time.perf_counter()
        for _ in range(n):
            ray.get(self.target.ping.remote())
        return (time.perf_counter() - start) / n * 1e6


def main():
    ray.init(num_cpus=2)
    controller = Controller.remote()
    figures = {"nested_task_batch_us": ("task_batch", 1000), "nested_call_batch_us": ("call_batch", 1000),
               "nested_call_rt_us": ("call_rt", 300)}
    for method, n in figures.values():  # warm: workers started, functions shipped
        ray.get(getattr(controller, method).remote(n // 5))
    out = {name: round(statistics.median(ray.get(getattr(controller, method).remote(n))
                                         for _ in range(5)), 1)
           for name, (method, n) in figures.items()}
    ray.shutdown()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
