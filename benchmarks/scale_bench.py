"""Many queued tasks at once (Ray's public API only; run under real Ray or the adapter).

Submits N tasks without waiting (default 100,000), then gets them all; prints one JSON object:
submission and completion seconds, tasks/s, the driver's resident memory (MB) after submitting
and its open file descriptors. The runtime must neither run out of descriptors nor grow memory
per task beyond the few hundred bytes of bookkeeping a queued task needs.

    python benchmarks/scale_bench.py [N]
"""
import json
import os
import sys
import time

import ray


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    if os.environ.get("RAY_BACKEND") == "yuanrong":
        ray.init(num_cpus=2)
    else:
        ray.init(num_cpus=2, include_dashboard=False)

    @ray.remote
    def noop(i):
        return i

    ray.get([noop.remote(i) for i in range(20)])
    start = time.perf_counter()
    refs = [noop.remote(i) for i in range(n)]
    submitted = time.perf_counter()
    import psutil

    rss = psutil.Process().memory_info().rss
    fds = len(os.listdir("/proc/self/fd"))
    values = ray.get(refs)
    done = time.perf_counter()
    assert values == list(range(n))
    ray.shutdown()
    print(json.dumps({"impl": os.environ.get("RAY_BACKEND", "ray"), "tasks": n,
                      "submit_s": round(submitted - start, 2), "total_s": round(done - start, 2),
                      "tasks_per_s": round(n / (done - start)), "rss_MB_after_submit": round(rss / 2**20),
                      "open_fds": fds}))


if __name__ == "__main__":
    main()
