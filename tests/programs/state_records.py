"""The State API's records of dead actors and its summaries, in the driver: why each actor
died (Ray's death_cause: its context, reason and message), and the object summary's shape."""
import gc
import time

import ray
from ray.util.state import list_actors, summarize_actors, summarize_objects

ray.init(num_cpus=2)


@ray.remote
class Worker:
    def ping(self):
        return "pong"

    def leave(self):
        ray.actor.exit_actor()


@ray.remote
class Broken:
    def __init__(self):
        raise ValueError("no constructor today")

    def ping(self):
        return "pong"


killed = Worker.options(name="killed").remote()
dropped = Worker.options(name="dropped").remote()
left = Worker.options(name="left").remote()
broken = Broken.options(name="broken").remote()
ray.get([killed.ping.remote(), dropped.ping.remote(), left.ping.remote()])
ray.kill(killed)
left.leave.remote()
del dropped
gc.collect()
try:
    ray.get(broken.ping.remote())
except ray.exceptions.RayActorError as e:
    print("broken:", type(e).__name__)


def by_name():
    return {a.name: a for a in list_actors(detail=True)}


deadline = time.monotonic() + 30
while any(a.state != "DEAD" for a in by_name().values()) and time.monotonic() < deadline:
    time.sleep(0.1)
for name, actor in sorted(by_name().items()):
    cause = actor.death_cause or {}
    (context, details), = cause.items()
    print(name, actor.class_name, actor.state, context)
    if context == "actor_died_error_context":
        print("   ", details["reason"], "|", details["error_message"].splitlines()[0])
        print("   ", details["class_name"], details["name"], details["never_started"])
    else:
        print("   ", "ValueError: no constructor today" in details["formatted_exception_string"])

summary = summarize_actors()["cluster"]
print("actors:", summary["total_actors"], summary["summary"]["Worker"]["state_counts"])
del killed, left, broken  # Ray lists the actor handles a driver holds among its objects
gc.collect()
kept = [ray.put(bytes(2 << 20)) for _ in range(3)]
objects = summarize_objects()["cluster"]
print("objects:", objects["total_objects"], round(objects["total_size_mb"]), objects["summary_by"],
      objects["callsite_enabled"])
(site, entry), = objects["summary"].items()
print("   ", site, sorted(entry), entry["task_state_counts"], entry["ref_type_counts"])
