"""A long-running driver that passes nested refs keeps flat memory: each round puts a fresh
1 MB object and passes it nested (``f.remote([ref])``) to a task that reads it. Prints one JSON
object: the rounds, seconds, the driver's resident memory (MiB) sampled every 1,000 rounds and
the number of objects the runtime still keeps at the end (0 once every ref is dropped).

Runs unchanged under real Ray (its object count is not available there: ``null``):

    RAY_BACKEND=yuanrong python benchmarks/nested_refs_memory.py [ROUNDS]   # default 10000
    python benchmarks/nested_refs_memory.py                                 # real Ray
"""
import gc
import json
import os
import sys
import time

import numpy as np
import ray


def rss_mib():
    """This process's resident memory in MiB (Linux /proc; no psutil needed under real Ray)."""
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") >> 20


def main(rounds):
    ray.init(num_cpus=2)

    @ray.remote
    def read(box):
        return len(ray.get(box[0]))

    rss, window = [], []
    start = time.perf_counter()
    for i in range(rounds):
        window.append(read.remote([ray.put(np.zeros(1 << 20, dtype=np.uint8))]))
        if len(window) == 20:
            ray.get(window)
            window = []
        if i % 1000 == 999:
            rss.append(rss_mib())
    ray.get(window)
    seconds = time.perf_counter() - start
    del window
    gc.collect()
    left = None
    try:
        from ray_adapter import core

        backend = core.current()
        backend.flush_releases()
        left = len(backend.objects)
    except (ImportError, AttributeError):
        pass
    ray.shutdown()
    print(json.dumps({"rounds": rounds, "seconds": round(seconds, 1),
                      "rss_mib_every_1000_rounds": rss, "objects_left": left}))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10000)
