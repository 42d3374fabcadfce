"""How fast `ray-adapter scan` reads a 1,000-file tree (synthetic, in a temporary folder).

    python benchmarks/scan_speed.py [--files 1000] [--lines 120]

Each file is a plausible Ray module (imports, remote functions and actors with options,
ray.init, gets and puts, plus plain Python filler), one in ten also a notebook. Prints one JSON
object: wall-clock seconds of the console script (`ray-adapter scan --format json`) with its
default parallelism and with `-j 1`, files, lines and uses found.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

RAY_PART = '''import ray
from ray.util import ActorPool
from ray.util.placement_group import placement_group


@ray.remote(num_cpus=1, max_retries=2, scheduling_strategy="SPREAD")
def work_{i}(x):
    return x * {i}


@ray.remote(max_concurrency=2)
class Worker{i}:
    @ray.method(num_returns=1)
    def step(self, x):
        return ray.get(work_{i}.remote(x))


def main_{i}():
    ray.init(num_cpus=2, runtime_env={{"env_vars": {{"K": "v"}}}})
    w = Worker{i}.options(name="w{i}").remote()
    refs = [w.step.remote(ray.put(j)) for j in range(4)]
    print(ray.get(refs), ActorPool([w]))
    ray.shutdown()
'''
FILLER = '''

def helper_{i}_{n}(values, scale=1.0):
    """Plain Python the scanner must parse but that uses no Ray."""
    total = 0.0
    for k, v in enumerate(values):
        if k % 3 == 0:
            total += v * scale
        else:
            total -= v / (k + 1)
    return {{"total": total, "count": len(values), "name": "helper_{i}_{n}"}}
'''


def make_tree(root, files, lines):
    written = 0
    for i in range(files):
        folder = os.path.join(root, f"pkg{i % 20}", f"sub{i % 7}")
        os.makedirs(folder, exist_ok=True)
        text = RAY_PART.format(i=i) if i % 2 == 0 else ""
        n = 0
        while text.count("\n") < lines:
            text += FILLER.format(i=i, n=n)
            n += 1
        if i % 10 == 9:
            cells = [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                      "source": chunk.splitlines(keepends=True)} for chunk in text.split("\n\n\n")]
            with open(os.path.join(folder, f"nb{i}.ipynb"), "w") as fh:
                json.dump({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells}, fh)
        else:
            with open(os.path.join(folder, f"mod{i}.py"), "w") as fh:
                fh.write(text)
        written += text.count("\n")
    return written


def timed_scan(root, *extra):
    cli = shutil.which("ray-adapter") or os.path.join(os.path.dirname(sys.executable), "ray-adapter")
    start = time.perf_counter()
    proc = subprocess.run([cli, "scan", "--format", "json", *extra, root], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode not in (0, 1, 2):
        raise SystemExit(f"scan failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return seconds, json.loads(proc.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--lines", type=int, default=120)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="scan-bench-") as root:
        lines = make_tree(root, args.files, args.lines)
        timed_scan(root)  # warm the page cache and the interpreter's bytecode cache
        parallel, data = timed_scan(root)
        serial, _ = timed_scan(root, "-j", "1")
    print(json.dumps({"files": data["files_scanned"], "lines": lines, "uses": len(data["findings"]),
                      "cpus": os.cpu_count(), "seconds_default_jobs": round(parallel, 2),
                      "seconds_one_job": round(serial, 2)}))


if __name__ == "__main__":
    main()
