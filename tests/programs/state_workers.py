"""The State API's workers and tasks, in the driver: a worker is listed once it was given work
(a pre-started idle one is not), and an ended one stays listed with Ray's exit type and detail
(an actor killed or dropped, exit_actor(), a crash, a failed constructor); what each kind of
task reports as required."""
import os
import time

import ray
from ray.util.state import list_actors, list_tasks, list_workers

ray.init(num_cpus=2)


@ray.remote
class Worker:
    def ping(self):
        return "pong"

    def leave(self):
        ray.actor.exit_actor()

    def crash(self):
        os._exit(3)


@ray.remote
class Broken:
    def __init__(self):
        raise ValueError("no constructor today")

    def ping(self):
        return "pong"


killed, dropped, left, crashed, kept = [Worker.options(name=n).remote()
                                        for n in ("killed", "dropped", "left", "crashed", "kept")]
ray.get([a.ping.remote() for a in (killed, dropped, left, crashed, kept)])
broken = Broken.options(name="broken").remote()
try:
    ray.get(broken.ping.remote())
except ray.exceptions.RayActorError as e:
    print("broken:", type(e).__name__)
ray.kill(killed)
left.leave.remote()
crashed.crash.remote()
del dropped
deadline = time.monotonic() + 30
while sum(not w.is_alive for w in list_workers()) < 5 and time.monotonic() < deadline:
    time.sleep(0.1)
pids = {a.name: a.pid for a in list_actors()}
names = {pid: name for name, pid in pids.items()}
for w in sorted(list_workers(detail=True), key=lambda w: (w.worker_type, names.get(w.pid, ""))):
    name = names.get(w.pid, "driver" if w.worker_type == "DRIVER" else "?")
    if name == "broken":  # Ray 2.60 gives USER_ERROR or INTENDED_SYSTEM_EXIT here, by timing
        print("broken", w.is_alive, w.exit_type in ("USER_ERROR", "INTENDED_SYSTEM_EXIT"))
        continue
    print(name, w.worker_type, w.is_alive, w.exit_type, (w.exit_detail or "").split(". ")[0][:90])
    print("   ", w.start_time_ms > 0, w.end_time_ms == 0 if w.is_alive else w.end_time_ms >= w.start_time_ms)

# What each kind of task reports as required: Ray's 1 CPU on the calls of an actor naming no
# resource (none on its constructor), the reverse for an actor that names its CPUs

@ray.remote
def plain():
    return 1


@ray.remote(num_cpus=0.5)
class Sized:
    def f(self):
        return 1


sized = Sized.remote()
ray.get([sized.f.remote(), plain.remote(), Worker.options(name="w2").remote().ping.remote()])
wanted = ["Sized.__init__", "Sized.f", "Worker.ping", "plain", "w2:Worker.__init__"]
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    seen = {}
    for t in list_tasks(detail=True, limit=10000):
        seen.setdefault(t.name, set()).add((t.type, tuple(sorted(t.required_resources.items()))))
    if all(name in seen for name in wanted):
        break
    time.sleep(0.2)
for name in wanted:
    print("task:", name, sorted(seen.get(name, ())))
