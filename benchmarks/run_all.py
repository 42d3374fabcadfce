"""Run the benchmarks under the adapter and, where an interpreter with real Ray is given
(``--ray-python`` or RAY_REFERENCE_PYTHON), under real Ray in the same session; print both and
their ratios (Ray / adapter for times: >1 means the adapter is faster).

    python benchmarks/run_all.py [--ray-python /path/to/python-with-ray]

Uses the team yardstick ``../shared/bench/core_bench.py`` when it is there.
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHARED_BENCH = HERE.parents[1] / "shared" / "bench" / "core_bench.py"
HIGHER_IS_BETTER = ("per_s", "GBps", "speedup")


def run(python, script, adapter):
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_BACKEND", "PYTHONPATH")}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    if adapter:
        env["RAY_BACKEND"] = "yuanrong"
    out = subprocess.run([python, str(script)], env=env, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise SystemExit(f"{script} failed under {'adapter' if adapter else 'ray'}:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def ratio(key, ray_value, adapter_value):
    if not isinstance(ray_value, (int, float)) or not isinstance(adapter_value, (int, float)):
        return ""
    if not ray_value or not adapter_value:
        return ""
    better_high = any(key.endswith(s) for s in HIGHER_IS_BETTER)
    r = adapter_value / ray_value if better_high else ray_value / adapter_value
    return f"{r:.1f}x"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ray-python", default=os.environ.get("RAY_REFERENCE_PYTHON"))
    args = parser.parse_args()
    scripts = [HERE / "footprint_bench.py", HERE / "speedup.py", HERE / "scale_bench.py",
               HERE / "attach_bench.py", HERE / "nested_bench.py"]
    try:  # the RL data path and start-up: only where torch is installed
        import torch  # noqa: F401

        scripts.append(HERE / "rl_bench.py")
    except ImportError:
        pass
    if SHARED_BENCH.exists():
        scripts.insert(0, SHARED_BENCH)
    results = {}
    for script in scripts:
        adapter = run(sys.executable, script, adapter=True)
        ray = run(args.ray_python, script, adapter=False) if args.ray_python else {}
        results[script.name] = {"adapter": adapter, "ray": ray}
        print(f"\n{script.name}")
        print(f"  {'figure':28} {'ray-adapter':>14} {'ray':>14} {'ratio':>8}")
        for key, value in adapter.items():
            if key == "impl":
                continue
            print(f"  {key:28} {value!s:>14} {ray.get(key, '-')!s:>14} {ratio(key, ray.get(key), value):>8}")
    hook = subprocess.run([sys.executable, str(HERE / "hook_cost.py")], capture_output=True, text=True,
                          check=True)
    results["hook_cost"] = json.loads(hook.stdout)
    print("\nhook_cost.py")
    for key, value in results["hook_cost"].items():
        print(f"  {key:28} {value!s:>14}")
    print("\n" + json.dumps(results))


if __name__ == "__main__":
    main()
