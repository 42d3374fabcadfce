"""ray.util.collective over gloo: all-reduce and broadcast of a float32 tensor (100 MB by
default) among 2 and 4 ranks, three ways in one run:

* ``raw``     -- torch.distributed gloo in plain ``multiprocessing`` processes (the floor);
* ``adapter`` -- ray-adapter's ``ray.util.collective`` among actors (embedded runtime; also
  ``yr-local`` with ``--runtimes embedded,yr-local``);
* ``ray``     -- real Ray's ``ray.util.collective`` gloo among actors (``--ray-python``, an
  interpreter with ray 2.60 and torch).

The adapter side also runs raw torch.distributed (a default group) in the same actor
processes, alternating with ray.util.collective at every repetition: that pair, compared
repetition by repetition (median of the ratios), isolates the cost of the collective layer from
the cost of running in actor processes and from the machine's noise.

Each rank times every operation after a barrier; an operation's time is the slowest rank's.
The sides run in rounds (a different side first each round) and the figures are medians over
all repetitions of all rounds, so the noise of a busy machine is spread over every side. Prints
a table (milliseconds, difference to raw and to Ray) and, last, one JSON line with every figure.

    python benchmarks/collective_bench.py [--ray-python PATH] [--mb 100] [--worlds 2,4]
                                          [--reps 5] [--rounds 4] [--runtimes embedded,yr-local]
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
OPS = ("allreduce", "broadcast")


def measure(impls, numel, reps):
    """Per-operation wall times (seconds) of this rank, for each implementation in ``impls``
    (``{name: (allreduce, broadcast, barrier)}``): one warm-up each, then ``reps`` rounds in
    which the implementations take turns (in alternating order), so machine noise hits them alike."""
    import torch

    t = torch.ones(numel, dtype=torch.float32)
    out = {name: {op: [] for op in OPS} for name in impls}
    for index, op in enumerate(OPS):
        for fns in impls.values():
            fns[index](t)
        names = list(impls)
        for rep in range(reps):
            for name in names if rep % 2 == 0 else names[::-1]:  # neither always goes first
                fns = impls[name]
                fns[2]()
                start = time.perf_counter()
                fns[index](t)
                out[name][op].append(time.perf_counter() - start)
    return out


def _torch_impl(dist, group=None):
    return (lambda t: dist.all_reduce(t, group=group), lambda t: dist.broadcast(t, src=0, group=group),
            lambda: dist.barrier(group=group))


# -- raw torch.distributed ---------------------------------------------------------------------
def _raw_rank(rank, world, port, numel, reps, queue):
    import datetime

    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=120))
    queue.put((rank, measure({"raw": _torch_impl(dist)}, numel, reps)["raw"]))
    dist.destroy_process_group()


def raw_side(world, numel, reps):
    import multiprocessing as mp

    port = _free_port()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_raw_rank, args=(r, world, port, numel, reps, queue)) for r in range(world)]
    for p in procs:
        p.start()
    results = dict(queue.get(timeout=600) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    return [{"raw": results[r]} for r in range(world)]


# -- ray.util.collective among actors (the adapter's or real Ray's: whichever `ray` is) ------------
def actor_side(world, numel, reps, ab=False):
    """Times in actors; with ``ab`` also raw torch.distributed (a default group) in the same
    actor processes, alternating with ray.util.collective at every repetition."""
    import ray

    ray.init(num_cpus=world)

    @ray.remote(num_cpus=0)
    class Rank:
        def __init__(self, rank):
            self.rank = rank

        def run(self, world, numel, reps, raw_port):
            import datetime

            import ray.util.collective as col

            col.init_collective_group(world, self.rank, backend="gloo", group_name="bench",
                                      gloo_timeout=120000)
            impls = {"collective": (lambda t: col.allreduce(t, group_name="bench"),
                                    lambda t: col.broadcast(t, src_rank=0, group_name="bench"),
                                    lambda: col.barrier(group_name="bench"))}
            if raw_port:
                import torch.distributed as dist

                dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{raw_port}", rank=self.rank,
                                        world_size=world, timeout=datetime.timedelta(seconds=120))
                impls["raw-in-actor"] = _torch_impl(dist)
            times = measure(impls, numel, reps)
            col.destroy_collective_group("bench")
            return times

    port = _free_port() if ab else 0
    ranks = [Rank.remote(r) for r in range(world)]
    results = ray.get([r.run.remote(world, numel, reps, port) for r in ranks])
    ray.shutdown()
    return results


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def slowest_rank_times(per_rank, impl, op):
    """The slowest rank's time of every repetition."""
    return [max(times) for times in zip(*(r[impl][op] for r in per_rank))]


def run_side(side, python, env_extra, args):
    """Run one side in a fresh interpreter: ``{world: {impl: {op: [seconds per repetition]}}}``."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_BACKEND", "RAY_ADAPTER_RUNTIME")}
    env.update(env_extra, RAY_USAGE_STATS_ENABLED="0")
    cmd = [python, os.path.abspath(__file__), "--side", side, "--mb", str(args.mb),
           "--worlds", args.worlds, "--reps", str(args.reps)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        return {"error": (out.stderr or out.stdout)[-1500:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def side_main(args):
    numel = int(args.mb * 1e6) // 4
    figures = {}
    for world in (int(w) for w in args.worlds.split(",")):
        if args.side == "raw":
            per_rank = raw_side(world, numel, args.reps)
        else:
            # yr local mode runs every actor in this one process: it has a single default group,
            # so no raw torch.distributed pair there (ray.util.collective does not need one).
            ab = args.side == "adapter" and os.environ.get("RAY_ADAPTER_RUNTIME") != "yr-local"
            per_rank = actor_side(world, numel, args.reps, ab=ab)
        figures[str(world)] = {impl: {op: slowest_rank_times(per_rank, impl, op) for op in OPS}
                               for impl in per_rank[0]}
    print(json.dumps(figures))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ray-python", default=os.environ.get("RAY_REFERENCE_PYTHON"))
    parser.add_argument("--mb", type=float, default=100.0, help="tensor size in MB (1e6 bytes)")
    parser.add_argument("--worlds", default="2,4")
    parser.add_argument("--reps", type=int, default=5, help="repetitions per operation and round")
    parser.add_argument("--rounds", type=int, default=4, help="rounds; each runs every side once")
    parser.add_argument("--runtimes", default="embedded", help="adapter runtimes: embedded,yr-local")
    parser.add_argument("--side", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        return side_main(args)

    sides = [("raw", sys.executable, {})]
    for runtime in args.runtimes.split(","):
        sides.append((f"adapter:{runtime}", sys.executable,
                      {"RAY_BACKEND": "yuanrong", "RAY_ADAPTER_RUNTIME": runtime}))
    if args.ray_python:
        sides.append(("ray", args.ray_python, {}))
    pooled, errors = {}, {}  # (world, row, op) -> seconds of every repetition of every round
    for round_index in range(args.rounds):
        shift = round_index % len(sides)  # a different side goes first in each round
        for name, python, env in sides[shift:] + sides[:shift]:
            figures = run_side("adapter" if name.startswith("adapter") else name, python, env, args)
            if "error" in figures:
                errors[name] = figures["error"]
                continue
            for world, impls in figures.items():
                for impl, ops in impls.items():
                    row = name if impl in ("raw", "collective") else f"{name} ({impl})"
                    for op, times in ops.items():
                        pooled.setdefault((world, row, op), []).extend(times)
    for name, error in errors.items():
        print(f"!! {name} failed:\n{error}\n")

    medians = {key: statistics.median(times) for key, times in pooled.items()}
    paired = {}  # (world, op) -> median over repetitions of collective / raw-in-actor - 1
    print(f"{args.mb:g} MB float32, gloo; median over {args.rounds} rounds x {args.reps} repetitions "
          "of the slowest rank's time; milliseconds per operation")
    print(f"{'ranks':>5} {'op':10} {'side':36} {'ms':>9} {'vs raw':>8} {'vs ray':>8}")
    for world in args.worlds.split(","):
        for op in OPS:
            raw, ray = medians.get((world, "raw", op)), medians.get((world, "ray", op))
            for (w, row, o), value in medians.items():
                if (w, o) != (world, op):
                    continue
                note = ""
                if row.endswith("(raw-in-actor)"):  # repetitions alternate: compare them in pairs
                    pairs = zip(pooled[(world, row.replace("(raw-in-actor)", "").strip(), op)],
                                pooled[(world, row, op)])
                    diffs = [(c - r, c / r - 1) for c, r in pairs]
                    paired[(world, op)] = statistics.median(d[1] for d in diffs)
                    note = (f"  (collective vs this, paired: {paired[(world, op)] * 100:+.1f}%, "
                            f"{statistics.median(d[0] for d in diffs) * 1e6:+.0f} us)")
                vs_raw = f"{(value / raw - 1) * 100:+.1f}%" if raw and row != "raw" else "-"
                vs_ray = f"{(value / ray - 1) * 100:+.1f}%" if ray and row != "ray" else "-"
                print(f"{world:>5} {op:10} {row:36} {value * 1e3:9.3f} {vs_raw:>8} {vs_ray:>8}{note}")
    print(json.dumps({"mb": args.mb, "rounds": args.rounds, "reps": args.reps,
                      "median_s": {"/".join(k): v for k, v in medians.items()},
                      "paired_overhead": {"/".join(k): v for k, v in paired.items()}, "errors": errors}))


if __name__ == "__main__":
    main()
