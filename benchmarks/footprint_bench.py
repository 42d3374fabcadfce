"""Start-up and memory footprint of a small Ray program: prints one JSON object.

Runs unchanged under real Ray or under the adapter (RAY_BACKEND=yuanrong), one after the other
in the same session (``run_all.py`` does). Figures:

- ``import_ms``: ``import ray`` (the hook, for the adapter), in a process that imported nothing
  else first;
- ``init_ms``: ``ray.init(num_cpus=2)`` (Ray: without its dashboard);
- ``first_task_ms``: the first task's round trip after ``init`` (its worker's start-up);
- memory of the driver and every process under it once 2 task workers and 2 actors run, each
  summed over the processes, in MiB: ``rss_MiB`` (resident pages, shared ones counted in every
  process that maps them), ``pss_MiB`` (each shared page divided among the processes that map
  it: the real total) and ``uss_MiB`` (pages only one process maps), with ``processes``.
  Shared-memory object stores count in the processes that touched their pages.
"""
import json
import os
import time

t0 = time.perf_counter()
import ray  # noqa: E402

IMPORT_MS = (time.perf_counter() - t0) * 1000

import psutil  # noqa: E402


@ray.remote
def noop(x=None):
    return x


@ray.remote
class Holder:
    def ping(self):
        return os.getpid()


def footprint():
    """``{rss_MiB, pss_MiB, uss_MiB, processes}`` of this process and its descendants."""
    me = psutil.Process()
    totals = {"rss": 0, "pss": 0, "uss": 0}
    count = 0
    for proc in [me] + me.children(recursive=True):
        try:
            info = proc.memory_full_info()
        except psutil.Error:  # gone meanwhile, or not ours to read
            continue
        count += 1
        for key in totals:
            totals[key] += getattr(info, key, 0)
    out = {f"{k}_MiB": round(v / 2**20, 1) for k, v in totals.items()}
    out["processes"] = count
    return out


def main():
    adapter = os.environ.get("RAY_BACKEND") == "yuanrong"
    out = {"impl": "adapter" if adapter else "ray", "import_ms": round(IMPORT_MS, 1)}
    start = time.perf_counter()
    ray.init(num_cpus=2, **({} if adapter else {"include_dashboard": False}))
    out["init_ms"] = round((time.perf_counter() - start) * 1000, 1)
    start = time.perf_counter()
    ray.get(noop.remote())
    out["first_task_ms"] = round((time.perf_counter() - start) * 1000, 1)
    ray.get([noop.remote(i) for i in range(200)])  # both task workers up
    holders = [Holder.remote() for _ in range(2)]
    ray.get([h.ping.remote() for h in holders])
    time.sleep(1.0)  # Ray's own processes settle after start-up
    out.update(footprint())
    ray.shutdown()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
