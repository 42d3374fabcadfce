"""Several drivers on one runtime, timed as a user meets them (issue 19's figures).

Run under the adapter (``RAY_BACKEND=yuanrong python benchmarks/attach_bench.py``) and under
real Ray (its interpreter, no variable) in the same session, one after the other (``run_all.py``
does both and prints ratios). Each run uses the ``ray`` command next to its interpreter:

- ``head_start_s``: ``ray start --head --num-cpus 2`` until it returns (the runtime ready);
- ``attach_s``: ``ray.init()`` of a driver attaching to that head;
- ``attached_task_rt_us`` / ``attached_actor_rt_us``: a no-op task / actor call, submitted and
  waited for one at a time, from the attached driver (median of 5 batches of 500 per driver;
  the median of :data:`ROUNDS` drivers, alternated with the local ones below);
- ``local_task_rt_us`` / ``local_actor_rt_us``: the same from a driver whose ``ray.init()``
  started its own runtime (``address="local"``, 2 CPUs); ``attached_vs_local_*``: the ratio
  (issue 19's target: within 1.5x);
- ``job_running_s``: ``JobSubmissionClient.submit_job`` of ``sleep`` until its status is
  RUNNING (median of 5); ``job_ray_task_s``: submit to SUCCEEDED of a job whose driver attaches
  and runs one task (median of 3). Both need the head's Jobs API (Ray: ``ray[default]``).

Prints one JSON object as its last line.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

_DRIVER = r"""
import json, statistics, sys, time
import ray
start = time.perf_counter()
ray.init(address=sys.argv[1]) if sys.argv[1] != "local" else ray.init(address="local", num_cpus=2)
init_s = time.perf_counter() - start

@ray.remote
def f():
    return 1

@ray.remote
class A:
    def f(self):
        return 1

a = A.remote()
ray.get(a.f.remote())
for _ in range(300):
    ray.get(f.remote())
    ray.get(a.f.remote())

def rt(call, n=500):
    batches = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n):
            ray.get(call())
        batches.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(batches)

print(json.dumps({"init_s": init_s, "task_rt_us": rt(f.remote), "actor_rt_us": rt(a.f.remote)}))
"""


def _driver(env, address):
    out = subprocess.run([sys.executable, "-c", _DRIVER, address], env=env, capture_output=True,
                         text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"driver ({address}) failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


_JOBS = r"""
import json, statistics, sys, time
from ray.job_submission import JobSubmissionClient
client = JobSubmissionClient(sys.argv[1])

def until(job, states):
    while client.get_job_status(job).value not in states:
        time.sleep(0.005)

running = []
for _ in range(5):
    start = time.perf_counter()
    job = client.submit_job(entrypoint="sleep 30")
    until(job, ("RUNNING",))
    running.append(time.perf_counter() - start)
    client.stop_job(job)
    until(job, ("STOPPED", "FAILED", "SUCCEEDED"))
task = []
for _ in range(3):
    start = time.perf_counter()
    job = client.submit_job(entrypoint=sys.executable + " -c 'import ray; ray.init(); "
                                       "ray.get(ray.remote(lambda: 1).remote())'")
    until(job, ("STOPPED", "FAILED", "SUCCEEDED"))
    assert client.get_job_status(job).value == "SUCCEEDED", client.get_job_logs(job)
    task.append(time.perf_counter() - start)
print(json.dumps({"job_running_s": statistics.median(running), "job_ray_task_s": statistics.median(task)}))
"""


#: Drivers of each kind run, alternated (the round-trip figures are the medians).
ROUNDS = 3


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
    temp = tempfile.mkdtemp(prefix="rab-")
    # Token auth off: Ray 2.60 turns it on for a head when ~/.ray/auth_token exists (the same
    # loopback set-up for both; the adapter asks for no token on loopback).
    env = dict(os.environ, RAY_TMPDIR=temp, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
    env.pop("RAY_ADDRESS", None)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    port = _free_port()
    try:
        start = time.perf_counter()
        started = subprocess.run([ray_bin, "start", "--head", "--num-cpus", "2", "--port",
                                  str(_free_port()), "--dashboard-port", str(port),
                                  "--disable-usage-stats"], env=env, capture_output=True,
                                 text=True, timeout=300)
        head_s = time.perf_counter() - start
        if started.returncode != 0:
            raise SystemExit(f"ray start failed:\n{started.stderr[-3000:]}")
        # Alternated, ROUNDS of each, each figure the median of its rounds: this machine's load
        # drifts over seconds, and a ratio of two figures taken far apart drifts with it.
        runs = {"auto": [], "local": []}
        for _ in range(ROUNDS):
            for address in runs:
                runs[address].append(_driver(env, address))
        attached, local = ({k: statistics.median(r[k] for r in runs[address]) for k in runs[address][0]}
                           for address in ("auto", "local"))
        jobs = subprocess.run([sys.executable, "-c", _JOBS, f"http://127.0.0.1:{port}"], env=env,
                              capture_output=True, text=True, timeout=600)
        if jobs.returncode != 0:
            raise SystemExit(f"jobs failed:\n{jobs.stderr[-3000:]}")
        jobs = json.loads(jobs.stdout.strip().splitlines()[-1])
    finally:
        subprocess.run([ray_bin, "stop", "--force"], env=env, capture_output=True, timeout=300)
        shutil.rmtree(temp, ignore_errors=True)
    figures = {"head_start_s": head_s, "attach_s": attached["init_s"],
               "attached_task_rt_us": attached["task_rt_us"],
               "attached_actor_rt_us": attached["actor_rt_us"],
               "local_task_rt_us": local["task_rt_us"], "local_actor_rt_us": local["actor_rt_us"],
               "attached_vs_local_task": attached["task_rt_us"] / local["task_rt_us"],
               "attached_vs_local_actor": attached["actor_rt_us"] / local["actor_rt_us"],
               **jobs}
    print(json.dumps({k: round(v, 4) for k, v in figures.items()}))


if __name__ == "__main__":
    main()
