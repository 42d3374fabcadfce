"""Start-up and memory footprint of a small Ray program: prints one JSON object.

Runs unchanged under real Ray or under the adapter (RAY_BACKEND=yuanrong), one after the other
in the same session (``run_all.py`` does). Figures:

- ``import_ms``: ``import ray`` (the hook, for the adapter), in a process that imported nothing
  else first;
- ``init_ms``: ``ray.init(num_cpus=2)`` (Ray: without its dashboard);
- ``init_library_floor_ms`` (the adapter only): what importing the standard-library and
  third-party modules that ``ray.init`` loads (msgspec, cloudpickle, socket, subprocess...)
  takes by itself in a fresh interpreter that has done ``import ray``'s imports: the part of
  ``init_ms`` that none of the adapter's own code is in (found with ``-X importtime``);
- ``first_task_ms``: the first task's round trip after ``init`` (its worker's start-up);
- memory of the driver and every process under it once 2 task workers and 2 actors run, each
  summed over the processes, in MiB: ``rss_MiB`` (resident pages, shared ones counted in every
  process that maps them), ``pss_MiB`` (each shared page divided among the processes that map
  it: the real total) and ``uss_MiB`` (pages only one process maps), with ``processes``.
  Shared-memory object stores count in the processes that touched their pages.
"""
import json
import os
import subprocess
import sys
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


_MARK = "@@ray.init@@"
_FLOOR = """
import importlib, sys, time
before, during = sys.argv[1].split(","), sys.argv[2].split(",")
for name in before:
    try:
        importlib.import_module(name)
    except Exception:
        pass
start = time.perf_counter()
for name in during:
    try:
        importlib.import_module(name)
    except Exception:
        pass
print((time.perf_counter() - start) * 1000)
"""


def library_floor_ms():
    """``init_library_floor_ms`` (see the module notes), in milliseconds."""
    probe = subprocess.run(
        [sys.executable, "-X", "importtime", "-c",
         f"import ray, sys; sys.stderr.write('{_MARK}\\n'); ray.init(num_cpus=2); ray.shutdown()"],
        capture_output=True, text=True, timeout=120)
    before, during, phase = [], [], None
    for line in probe.stderr.splitlines():
        if line.strip() == _MARK:
            phase = during
            continue
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        name = line.split("|")[2].strip()
        if name == "ray" or name.startswith(("ray_adapter", "ray.")):
            continue
        (before if phase is None else during).append(name)
    floor = subprocess.run([sys.executable, "-c", _FLOOR, ",".join(before), ",".join(during)],
                           capture_output=True, text=True, timeout=120)
    return round(float(floor.stdout.strip()), 1)


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
    if adapter:
        out["init_library_floor_ms"] = library_floor_ms()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
