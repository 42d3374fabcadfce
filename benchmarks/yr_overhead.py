"""Adapter overhead over calling ``yr`` directly, on yr's local mode: task round trip and
actor call. Both run in one process on one yr runtime (the adapter attaches to the yr session
the script started), in alternating rounds, so machine noise hits both alike. Prints one JSON
object: medians in microseconds and the overhead in percent.

    python benchmarks/yr_overhead.py
"""
import json
import os
import statistics
import time

os.environ["RAY_ADAPTER_RUNTIME"] = "yr-local"
import ray_adapter.auto  # noqa: E402,F401 - serve the adapter's ray in this process

CALLS, ROUNDS = 500, 9


def per_call_us(fn):
    start = time.perf_counter()
    for _ in range(CALLS):
        fn()
    return (time.perf_counter() - start) / CALLS * 1e6


def main():
    import ray
    import yr

    yr.init(yr.Config(local_mode=True))
    ray.init(num_cpus=2)  # attaches to the yr session above

    @yr.invoke
    def yr_noop(x):
        return x

    @yr.instance
    class YrCounter:
        def __init__(self):
            self.n = 0

        def inc(self):
            self.n += 1
            return self.n

    @ray.remote
    def ray_noop(x):
        return x

    @ray.remote
    class RayCounter:
        def __init__(self):
            self.n = 0

        def inc(self):
            self.n += 1
            return self.n

    yc, rc = YrCounter.invoke(), RayCounter.remote()
    cases = {
        "yr_task": lambda: yr.get(yr_noop.invoke(1)),
        "adapter_task": lambda: ray.get(ray_noop.remote(1)),
        "yr_actor": lambda: yr.get(yc.inc.invoke()),
        "adapter_actor": lambda: ray.get(rc.inc.remote()),
    }
    samples = {name: [] for name in cases}
    for name, fn in cases.items():  # warm up
        per_call_us(fn)
    for _ in range(ROUNDS):
        for name, fn in cases.items():
            samples[name].append(per_call_us(fn))
    med = {name: statistics.median(v) for name, v in samples.items()}
    ray.shutdown()
    yr.finalize()
    print(json.dumps({
        "yr_task_us": round(med["yr_task"], 1), "adapter_task_us": round(med["adapter_task"], 1),
        "task_overhead_pct": round(100 * (med["adapter_task"] / med["yr_task"] - 1), 1),
        "yr_actor_us": round(med["yr_actor"], 1), "adapter_actor_us": round(med["adapter_actor"], 1),
        "actor_overhead_pct": round(100 * (med["adapter_actor"] / med["yr_actor"] - 1), 1),
    }))


if __name__ == "__main__":
    main()
