"""Placement groups, side by side with real Ray in one run: group creation + ``ready()``
latency, and the start-up of a 4-bundle actor group (placement group ready, one actor pinned
per bundle, every actor's first call answered).

    python benchmarks/placement_bench.py [--ray-python /path/to/python-with-ray]

With ``--ray-python`` (or RAY_REFERENCE_PYTHON) the same measurement runs under real Ray in the
same session; the table gives medians in milliseconds and the ratio Ray / adapter (>1: the
adapter is faster). ``--child`` runs one side and prints its JSON (used internally).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CREATE_ROUNDS = 30
GROUP_ROUNDS = 7
WORLD = 4


def measure():
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    ray.init(num_cpus=4)

    @ray.remote(num_cpus=0.5)
    class Member:
        def rank(self, i):
            return i

    # Warm up: worker processes started, first group and actors created.
    warm = placement_group([{"CPU": 0.5}] * WORLD)
    ray.get(warm.ready())
    members = [Member.options(scheduling_strategy=PlacementGroupSchedulingStrategy(warm, i)).remote()
               for i in range(WORLD)]
    ray.get([m.rank.remote(i) for i, m in enumerate(members)])
    for m in members:
        ray.kill(m)
    remove_placement_group(warm)

    create = []
    for _ in range(CREATE_ROUNDS):
        start = time.perf_counter()
        pg = placement_group([{"CPU": 1}])
        ray.get(pg.ready())
        create.append((time.perf_counter() - start) * 1e3)
        remove_placement_group(pg)
        time.sleep(0.05)  # let the removal settle (Ray returns resources asynchronously)

    group = []
    for _ in range(GROUP_ROUNDS):
        start = time.perf_counter()
        pg = placement_group([{"CPU": 0.5}] * WORLD, strategy="PACK")
        ray.get(pg.ready())
        members = [Member.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, i)).remote()
                   for i in range(WORLD)]
        assert ray.get([m.rank.remote(i) for i, m in enumerate(members)]) == list(range(WORLD))
        group.append((time.perf_counter() - start) * 1e3)
        for m in members:
            ray.kill(m)
        remove_placement_group(pg)
        time.sleep(0.3)  # killed actors' processes exit before the next round
    ray.shutdown()
    return {"pg_create_ready_ms": round(statistics.median(create), 3),
            "actor_group_4_startup_ms": round(statistics.median(group), 1)}


def run(python, adapter):
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_BACKEND", "PYTHONPATH", "RAY_ADDRESS")}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    if adapter:
        env["RAY_BACKEND"] = "yuanrong"
    out = subprocess.run([python, os.path.abspath(__file__), "--child"], env=env,
                         capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise SystemExit(f"placement_bench failed under {'the adapter' if adapter else 'ray'}:\n"
                         f"{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ray-python", default=os.environ.get("RAY_REFERENCE_PYTHON"))
    parser.add_argument("--child", action="store_true")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure()))
        return
    adapter = run(sys.executable, adapter=True)
    ray = run(args.ray_python, adapter=False) if args.ray_python else {}
    print(f"{'figure (median)':28} {'ray-adapter':>12} {'ray 2.60':>12} {'ray/adapter':>12}")
    for key, value in adapter.items():
        other = ray.get(key)
        ratio = f"{other / value:.1f}x" if other and value else "-"
        print(f"{key:28} {value:>12} {other if other is not None else '-':>12} {ratio:>12}")
    print(json.dumps({"adapter": adapter, "ray": ray}))


if __name__ == "__main__":
    main()
