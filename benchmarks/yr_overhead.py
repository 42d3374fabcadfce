"""Adapter overhead over calling ``yr`` directly, on yr's local mode: task round trip and
actor call, measured in one process. Prints one JSON object (microseconds, overhead in %).

    python benchmarks/yr_overhead.py
"""
import json
import os
import statistics
import time

os.environ["RAY_ADAPTER_RUNTIME"] = "yr-local"
os.environ["RAY_BACKEND"] = "yuanrong"

N = 2000


def timed(fn, n=N, rounds=5):
    best = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best.append((time.perf_counter() - start) / n)
    return statistics.median(best) * 1e6


def measure_yr():
    import yr

    yr.init(yr.Config(local_mode=True))

    @yr.invoke
    def noop(x):
        return x

    @yr.instance
    class Counter:
        def __init__(self):
            self.n = 0

        def inc(self):
            self.n += 1
            return self.n

    c = Counter.invoke()
    yr.get(noop.invoke(1))
    yr.get(c.inc.invoke())
    out = {"task_us": timed(lambda: yr.get(noop.invoke(1))),
           "actor_us": timed(lambda: yr.get(c.inc.invoke()))}
    yr.finalize()
    return out


def measure_adapter():
    import ray_adapter.auto  # noqa: F401 - serve the adapter's ray in this process
    import ray

    ray.init(num_cpus=2)

    @ray.remote
    def noop(x):
        return x

    @ray.remote
    class Counter:
        def __init__(self):
            self.n = 0

        def inc(self):
            self.n += 1
            return self.n

    c = Counter.remote()
    ray.get(noop.remote(1))
    ray.get(c.inc.remote())
    out = {"task_us": timed(lambda: ray.get(noop.remote(1))),
           "actor_us": timed(lambda: ray.get(c.inc.remote()))}
    ray.shutdown()
    return out


if __name__ == "__main__":
    direct = measure_yr()
    adapter = measure_adapter()
    print(json.dumps({
        "yr_task_us": round(direct["task_us"], 1), "adapter_task_us": round(adapter["task_us"], 1),
        "task_overhead_pct": round(100 * (adapter["task_us"] / direct["task_us"] - 1), 1),
        "yr_actor_us": round(direct["actor_us"], 1), "adapter_actor_us": round(adapter["actor_us"], 1),
        "actor_overhead_pct": round(100 * (adapter["actor_us"] / direct["actor_us"] - 1), 1),
    }))
