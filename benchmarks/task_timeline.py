"""Where a synchronous round trip's microseconds go *in situ*, on the embedded runtime: a
timeline of real ``ray.get(f.remote())`` and ``ray.get(actor.m.remote())`` calls across the
driver's threads and the worker process.

``task_profile.py`` times the pieces of the path in hot loops. In a real round trip each side
sleeps for most of the cycle (caches go cold, the idle vCPU halts), so the same code runs
several times slower and every wake-up costs more than a socket ping-pong suggests. This
script stamps ``time.perf_counter_ns()`` (CLOCK_MONOTONIC: one clock for every process) at
the seams of each call: wrappers around the runtime's methods in the driver, and in the worker
through ``worker_process_setup_hook``. It prints one JSON object: the median of each segment
(microseconds) for tasks and for actor calls, the median total with the wrappers in place,
the seams stamped in no cycle (``unstamped``: a seam the runtime no longer passes), and the
machine's floors:

- ``floor_pipe_rt``: a 60-byte ping-pong between two processes, back to back;
- ``floor_pipe_rt_idle_200us``: the same when each side's CPU was idle for 200 us before the
  message (what a 200+ us round trip pays per wake-up on a virtual machine whose halted vCPUs
  wake slowly), less the 200 us;
- ``task_rt`` / ``actor_rt``: the median round trip of the same calls without the stamps (a
  session of its own, before the stamped one), and ``task_rt_over_floor`` /
  ``actor_rt_over_floor``: each divided by ``floor_pipe_rt_idle_200us`` of this run (issue 20's
  targets: at most 2 and 1.8).

Segments (in order; the driver's and the worker's overlap where noted):

- ``submit``: ``.remote()`` entered -> its message written to the socket (driver);
- ``to_blocking``: message written -> the caller blocks in ``get`` (driver, meanwhile);
- ``wake_worker``: message written -> the worker has read it;
- ``worker_before_call``: read -> the call starts (decode, routing, read-role hand-over);
- ``worker_call``: the call and its result packed, queued for the driver;
- ``worker_write``: result queued -> written to the socket;
- ``wake_reader``: result written -> the driver's reader thread has read it;
- ``driver_result``: the reader handles it (task done, resources back, value sealed, waiter
  woken);
- ``wake_caller``: handled -> the caller's ``wait`` returns;
- ``get_tail``: -> ``ray.get`` returns the value.

    python benchmarks/task_timeline.py [--calls 2000]
"""
import argparse
import builtins
import json
import os
import statistics
import sys
import time

os.environ.setdefault("RAY_BACKEND", "yuanrong")
os.environ.pop("RAY_ADAPTER_RUNTIME", None)  # the embedded runtime's seams are what it stamps
import ray_adapter.auto  # noqa: E402,F401 - the adapter's ray in this process

_SEGMENTS = [
    ("submit", "start", "drv_sent"), ("to_blocking", "drv_sent", "wait_entry"),
    ("wake_worker", "drv_sent", "wrk_recv"), ("worker_before_call", "wrk_recv", "wrk_run"),
    ("worker_call", "wrk_run", "wrk_done"), ("worker_write", "wrk_done", "wrk_sent"),
    ("wake_reader", "wrk_sent", "drv_recv"), ("driver_result", "drv_recv", "drv_dispatched"),
    ("wake_caller", "drv_dispatched", "wait_exit"), ("get_tail", "wait_exit", "end"),
]


def install_stamps(side):
    """Wrap the runtime's seams to stamp ``(tag, ns)`` into ``builtins._timeline`` (``side``:
    "drv" in the driver, "wrk" in a worker, where the setup hook calls it)."""
    from ray_adapter.core.embedded import channel, objects, worker

    stamps = builtins._timeline = []
    clock, add = time.perf_counter_ns, stamps.append

    def after(cls, name, tag):
        original = getattr(cls, name)

        def wrapper(*args, **kwargs):
            result = original(*args, **kwargs)
            add((tag, clock()))
            return result
        setattr(cls, name, wrapper)

    def before(cls, name, tag):
        original = getattr(cls, name)

        def wrapper(*args, **kwargs):
            add((tag, clock()))
            return original(*args, **kwargs)
        setattr(cls, name, wrapper)

    after(channel.Channel, "_drain", side + "_sent")
    after(channel.Channel, "recv", side + "_recv")
    if side == "drv":
        from ray_adapter.core.embedded.backend import EmbeddedBackend

        before(objects.ObjectTable, "wait", "wait_entry")
        after(objects.ObjectTable, "wait", "wait_exit")
        after(EmbeddedBackend, "_dispatch", "drv_dispatched")
    else:
        from ray_adapter.core.embedded import executors

        before(worker.Worker, "run_task", "wrk_run")
        before(executors.ActorHost, "run_call", "wrk_run")
        before(worker.Worker, "post", "wrk_done")


def worker_hook():
    install_stamps("wrk")


def segments(driver, workers, cycles):
    """Median microseconds per segment: each cycle's first stamp of a tag inside it."""
    stamps = sorted(driver + workers, key=lambda s: s[1])
    found, i = [], 0
    for start, end in cycles:
        while i < len(stamps) and stamps[i][1] < start:
            i += 1
        first, j = {"start": start, "end": end}, i
        while j < len(stamps) and stamps[j][1] <= end:
            first.setdefault(stamps[j][0], stamps[j][1])
            j += 1
        found.append(first)
    out, bounds = {}, {}
    for name, a, b in _SEGMENTS:
        used = [f for f in found if a in f and b in f and f[b] >= f[a]]
        out[name] = round(statistics.median((f[b] - f[a]) / 1000 for f in used), 1) if used else None
        # The median total of the very cycles that gave the segment: a segment's median can
        # never exceed it (pointwise), whereas the median of every cycle is no bound for a
        # segment found in a few (slow) cycles only.
        if used:
            bounds[name] = round(statistics.median((f["end"] - f["start"]) / 1000 for f in used), 1)
    out["total_with_stamps"] = round(statistics.median((e - s) / 1000 for s, e in cycles), 1)
    out["bounds"] = bounds
    # Seams stamped in no cycle at all (a segment can be None while both its seams were
    # stamped: on a loaded machine a woken process may run before its waker's stamp, so its
    # stamp comes first in every cycle).
    seen = {tag for f in found for tag in f}
    out["unstamped"] = sorted({tag for _, a, b in _SEGMENTS for tag in (a, b)} - seen)
    return out


def pipe_rt(idle_us=0, n=2000):
    """Median round trip (us) of a 60-byte message to a child process and back, each side's
    CPU idle for ``idle_us`` before the message arrives (the other side spins meanwhile)."""
    import socket

    a, b = socket.socketpair()
    pid = os.fork()
    spin = idle_us / 1e6
    if pid == 0:
        a.close()
        while True:
            data = b.recv(65536)
            if not data:
                os._exit(0)
            until = time.perf_counter() + spin
            while time.perf_counter() < until:
                pass
            b.send(data)
    b.close()
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        a.send(b"x" * 60)
        a.recv(65536)
        samples.append(time.perf_counter() - start - spin)
        until = time.perf_counter() + spin
        while time.perf_counter() < until:
            pass
    a.close()
    os.waitpid(pid, 0)
    return round(statistics.median(samples) * 1e6, 1)


def start_session(ray, **init):
    """``ray.init(num_cpus=1, **init)``, then the calls timed: ``(noop, worker_stamps,
    actor)``, a no-op task, a task returning its worker's stamps, and an actor with ``noop``
    and ``stamps`` methods, each called 50 times first (workers started, caches warm)."""
    ray.init(num_cpus=1, **init)

    @ray.remote
    def noop():
        return None

    @ray.remote
    def worker_stamps():
        return list(builtins._timeline)

    @ray.remote
    class Actor:
        def noop(self):
            return None

        def stamps(self):
            return list(builtins._timeline)

    actor = Actor.remote()
    ray.get([noop.remote() for _ in range(50)] + [actor.noop.remote() for _ in range(50)])
    return noop, worker_stamps, actor


def plain_round_trips(ray, calls):
    """``(task, actor)``: median round trips (us) of ``ray.get`` on a no-op task and actor
    call, in a session of their own with nothing stamped."""
    noop, _, actor = start_session(ray)
    medians = []
    for call in (noop.remote, actor.noop.remote):
        time.sleep(0.2)
        samples = []
        for _ in range(calls):
            start = time.perf_counter()
            ray.get(call())
            samples.append(time.perf_counter() - start)
        medians.append(round(statistics.median(samples) * 1e6, 1))
    ray.shutdown()
    return medians


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    import ray

    out = {"floor_pipe_rt": pipe_rt(), "floor_pipe_rt_idle_200us": pipe_rt(200)}
    out["task_rt"], out["actor_rt"] = plain_round_trips(ray, args.calls)
    for kind in ("task", "actor"):
        out[f"{kind}_rt_over_floor"] = round(out[f"{kind}_rt"] / out["floor_pipe_rt_idle_200us"], 2)
    install_stamps("drv")
    noop, worker_stamps, actor = start_session(
        ray, runtime_env={"worker_process_setup_hook": worker_hook})
    for label, call, collect in (("task", lambda: noop.remote(), worker_stamps.remote),
                                 ("actor", lambda: actor.noop.remote(), actor.stamps.remote)):
        time.sleep(0.2)
        mine = builtins._timeline
        del mine[:]
        cycles, clock = [], time.perf_counter_ns
        for _ in range(args.calls):
            start = clock()
            mine.append(("start", start))
            ray.get(call())
            cycles.append((start, clock()))
        driver = [s for s in mine if s[0] != "start"]
        out[label] = segments(driver, ray.get(collect()), cycles)
    ray.shutdown()
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
