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
        reason, message = details["reason"], details["error_message"].splitlines()[0]
        if reason == "REF_DELETED":  # Ray 2.60 says this instead, now and then, of a dropped handle
            reason = "OUT_OF_SCOPE"
            message = message.replace(" including lineage ref count", "")
        print("   ", reason, "|", message)
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

# Jobs: the State API's record of this driver's job, and Ray's job and actor tables
import os  # noqa: E402

import ray._private.state as global_state  # noqa: E402
from ray.util.state import get_job, list_jobs  # noqa: E402

(job,) = list_jobs()
print("job:", type(job).__name__, job.type, job.status, job.submission_id, job.message,
      job.job_id == ray.get_runtime_context().get_job_id(), job.start_time)
info = job.driver_info
print("   ", type(info).__name__, info.id == job.job_id, info.pid == str(os.getpid()),
      "state_records.py" in job.entrypoint)
(detailed,) = list_jobs(detail=True)
print("   ", 0 < detailed.start_time <= time.time() * 1000, detailed.end_time, detailed.metadata,
      detailed.runtime_env, detailed.driver_exit_code)
print("   ", list_jobs(filters=[("status", "=", "SUCCEEDED")]), get_job(job.job_id))
(entry,) = global_state.jobs()
print("jobs():", sorted(entry), entry["JobID"] == job.job_id, entry["DriverPid"] == os.getpid(),
      entry["IsDead"], entry["EndTime"], "state_records.py" in entry["Entrypoint"])
live = Worker.options(name="live").remote()
ray.get(live.ping.remote())
entry = global_state.actors(live._actor_id.hex())
print("actors():", sorted(entry), entry["State"], entry["Name"], entry["ActorClassName"],
      entry["IsDetached"], entry["NumRestarts"], entry["EndTime"])
print("   ", sorted(entry["Address"]), entry["Address"]["NodeID"] == ray.get_runtime_context().get_node_id(),
      entry["JobID"] == job.job_id, entry["StartTime"] > 0, entry["Pid"] > 0)
everyone = global_state.actors()
dead = global_state.actors(actor_state_name="DEAD")
print("   ", sorted(e["Name"] for e in everyone.values()), sorted(e["Name"] for e in dead.values()))
print("   ", all(e["EndTime"] >= e["StartTime"] for e in dead.values()), global_state.actors("ff" * 16))
try:
    global_state.actors(actor_state_name="SLEEPING")
except ValueError as e:
    print("   ", type(e).__name__, e)
print("node_ids:", global_state.node_ids() == [global_state.current_node_id()])


# A placement group's State API record: bundles and stats shaped as Ray's
from ray.util.state import list_placement_groups  # noqa: E402

group = ray.util.placement_group([{"CPU": 0.5}, {"CPU": 0.5}], name="pair")
ray.get(group.ready())
(record,) = [g for g in list_placement_groups(detail=True) if g.name == "pair"]
print("group:", record.state, record.is_detached, [sorted(b) for b in record.bundles][0])
print("   ", [(sorted(b["bundle_id"]), b["bundle_id"]["bundle_index"],
             b["bundle_id"]["placement_group_id"] == record.placement_group_id,
             b["unit_resources"], b["node_id"] == ray.get_runtime_context().get_node_id())
            for b in record.bundles])
print("   ", sorted(record.stats), record.stats["scheduling_state"], record.stats["scheduling_attempt"])
print("   ", {k: type(v).__name__ for k, v in sorted(record.stats.items())})
print("   ", int(record.stats["creation_request_received_ns"]) > 1.7e18,
      int(record.stats["end_to_end_creation_latency_us"]) >= 0)
