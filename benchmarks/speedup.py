"""CPU-bound Ray program on 1 worker vs 2: prints one JSON object with the speed-up.

Runs unchanged under real Ray or under the adapter (RAY_BACKEND=yuanrong).
"""
import json
import os
import time

import ray

TASKS = 8


@ray.remote
def burn(seed, n=1_500_000):
    x = seed
    for i in range(n):
        x = (x * 1103515245 + 12345 + i) % 2147483648
    return x


def timed(num_cpus):
    kwargs = {"num_cpus": num_cpus}
    if os.environ.get("RAY_BACKEND", "").lower() != "yuanrong":
        kwargs["include_dashboard"] = False
    ray.init(**kwargs)
    ray.get([burn.remote(s, 10) for s in range(num_cpus * 2)])  # start the workers
    start = time.perf_counter()
    results = ray.get([burn.remote(s) for s in range(TASKS)])
    elapsed = time.perf_counter() - start
    ray.shutdown()
    return elapsed, results


def main():
    one, r1 = timed(1)
    two, r2 = timed(2)
    assert r1 == r2
    print(json.dumps({"impl": os.environ.get("RAY_BACKEND", "ray"), "tasks": TASKS,
                      "one_worker_s": round(one, 3), "two_workers_s": round(two, 3),
                      "speedup": round(one / two, 2)}))


if __name__ == "__main__":
    main()
