"""The State API (``ray.util.state``, ``ray.experimental.state.api``), ``ray._private.state``,
``ray._private.services``, ``global_worker`` and ``ray.timeline``, served by the runtime."""
import importlib
import json
import os
import time

import pytest


def state_api():
    return importlib.import_module("ray_adapter.ray.util.state")


def ray_adapter_core():
    """The running runtime core (its ``backend_name``: "embedded" or "yuanrong")."""
    return importlib.import_module("ray_adapter.core").current()


def test_actors_nodes_groups_and_workers(ray):
    st = state_api()

    @ray.remote
    class Counter:
        def ping(self):
            return 1

    named = Counter.options(name="counter").remote()
    ray.get(named.ping.remote(), timeout=30)
    pg = ray.util.placement_group([{"CPU": 0.5}], name="g")
    ray.get(pg.ready(), timeout=30)
    actors = st.list_actors()
    (record,) = [a for a in actors if a.name == "counter"]
    assert record.class_name == "Counter" and record.state == "ALIVE"
    assert record["actor_id"] == named._actor_id.hex() and record.get("ray_namespace") is not None
    assert record.required_resources is None  # a detail column
    assert st.get_actor(record.actor_id).required_resources == {}
    assert st.list_actors(filters=[("state", "=", "alive")]) == [r for r in actors if r.state == "ALIVE"]
    assert st.list_actors(filters=[("state", "!=", "ALIVE")]) == []
    with pytest.raises(ValueError, match="not supported"):
        st.list_actors(filters=[("required_resources", "=", "x")])
    (node,) = st.list_nodes()
    assert node.state == "ALIVE" and node.is_head_node and node.node_id == ray.get_runtime_context().get_node_id()
    assert st.get_node(node.node_id).node_id == node.node_id
    (group,) = st.list_placement_groups(detail=True)
    assert group.name == "g" and group.state == "CREATED" and group.bundles[0]["unit_resources"] == {"CPU": 0.5}
    assert st.get_placement_group(pg.id.hex()).placement_group_id == pg.id.hex()
    assert any(w.worker_type == "DRIVER" for w in st.list_workers())
    summary = st.summarize_actors()["cluster"]
    assert summary["summary"]["Counter"]["state_counts"] == {"ALIVE": 1} and summary["summary_by"] == "class"
    api = importlib.import_module("ray_adapter.ray.experimental.state.api")
    assert api.list_actors is st.list_actors and api.get_actor(record.actor_id).name == "counter"
    pinned = Counter.options(num_cpus=1).remote()  # Ray reports the amounts as floats
    ray.get(pinned.ping.remote(), timeout=30)
    required = st.get_actor(pinned._actor_id.hex()).required_resources
    assert required == {"CPU": 1.0} and type(required["CPU"]) is float


@pytest.mark.embedded_only("the yuanrong backend records no task events")
def test_tasks_summary_and_timeline(ray, tmp_path):
    st = state_api()

    @ray.remote
    def square(x):
        return x * x

    @ray.remote
    def boom():
        raise ValueError("no")

    @ray.remote
    class Acc:
        def add(self, x):
            return x

    assert ray.get([square.remote(i) for i in range(3)], timeout=30) == [0, 1, 4]
    with pytest.raises(ValueError):
        ray.get(boom.remote(), timeout=30)
    acc = Acc.remote()
    ray.get(acc.add.remote(1), timeout=30)
    tasks = st.list_tasks()
    assert sorted(t.state for t in tasks if t.name == "square") == ["FINISHED"] * 3
    (failed,) = [t for t in tasks if t.name == "boom"]
    assert failed.state == "FAILED" and failed.type == "NORMAL_TASK" and failed.worker_pid
    assert {t.type for t in tasks} == {"NORMAL_TASK", "ACTOR_TASK", "ACTOR_CREATION_TASK"}
    ref = square.remote(5)
    ray.get(ref, timeout=30)
    (attempt,) = st.get_task(ref)
    assert attempt.name == "square" and attempt.start_time_ms <= attempt.end_time_ms
    summary = st.summarize_tasks()["cluster"]
    assert summary["summary"]["square"]["state_counts"] == {"FINISHED": 4}
    assert summary["total_tasks"] == 5 and summary["total_actor_tasks"] == 1
    assert summary["total_actor_scheduled"] == 1
    path = tmp_path / "trace.json"
    assert ray.timeline(str(path)) is None
    events = json.loads(path.read_text())
    assert {e["cat"] for e in events} >= {"task::square", "task::boom", "task::Acc.add", "task::Acc.__init__"}
    assert all(e["ph"] == "X" and e["dur"] >= 0 and e["tid"].startswith("worker:") for e in events)
    assert ray.timeline() == [] or isinstance(ray.timeline(), list)
    # As Ray records them: a named actor's constructor is "name:Class.__init__", a method's
    # func_or_class_name is "Class.method", and a call the runtime failed says why.
    named = Acc.options(name="acc").remote()
    ray.get(named.add.remote(2), timeout=30)
    ray.kill(named)
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(named.add.remote(3), timeout=30)
    mine = [t for t in st.list_tasks(detail=True) if t.actor_id == named._actor_id.hex()]
    assert sorted((t.name, t.func_or_class_name, t.state, t.error_type) for t in mine) == [
        ("Acc.add", "Acc.add", "FAILED", "ACTOR_DIED"), ("Acc.add", "Acc.add", "FINISHED", None),
        ("acc:Acc.__init__", "Acc.__init__", "FINISHED", None)]
    assert failed.error_type == "TASK_EXECUTION_EXCEPTION"


def test_private_state_services_and_global_worker(ray):
    state = importlib.import_module("ray_adapter.ray._private.state")
    services = importlib.import_module("ray_adapter.ray._private.services")
    worker = importlib.import_module("ray_adapter.ray._private.worker")
    node_id = ray.get_runtime_context().get_node_id()
    pg = ray.util.placement_group([{"CPU": 1}])
    ray.get(pg.ready(), timeout=30)
    free = state.available_resources_per_node()
    total = state.total_resources_per_node()
    assert list(free) == [node_id] == list(total)
    assert total[node_id]["CPU"] == 2.0 and free[node_id]["CPU"] == 1.0
    assert free[node_id][f"CPU_group_0_{pg.id.hex()}"] == 1.0
    table = state.state.placement_group_table(pg.id)
    assert table["bundles_to_node_id"] == {0: node_id} and table["state"] == "CREATED"
    assert pg.id.hex() in state.state.placement_group_table()
    assert services.get_node_ip_address() == ray.util.get_node_ip_address() == "127.0.0.1"
    gw = worker.global_worker
    assert gw.mode == worker.SCRIPT_MODE and gw.node.node_ip_address == "127.0.0.1"
    assert gw.gcs_client.address == ray.get_runtime_context().gcs_address != ""
    assert gw.current_job_id.hex() == ray.get_runtime_context().get_job_id()

    @ray.remote
    def inside():
        w = worker.global_worker
        return w.mode, w.node.node_ip_address, ray._private.services.get_node_ip_address()

    assert ray.get(inside.remote(), timeout=30) == (worker.WORKER_MODE, "127.0.0.1", "127.0.0.1")
    # Ray's errors for a malformed actor id; an unknown well-formed one is not found
    with pytest.raises(ValueError):
        state.actors("nothex")
    with pytest.raises(ValueError, match="ID string needs to have length 16"):
        state.actors("ab" * 4)
    assert state.actors("ff" * 16) == {}
    # a pending group's bundles have node_id "" and the topology fields {}, as Ray lists them
    waiting = ray.util.placement_group([{"CPU": 64}])
    st = state_api()
    (pending,) = [g for g in st.list_placement_groups(detail=True)
                  if g.placement_group_id == waiting.id.hex()]
    assert pending.bundles[0]["node_id"] == "" and pending.topology_strategy == {} == pending.topology_assignments
    assert abs(int(pending.stats["creation_request_received_ns"]) - time.time_ns()) < 60e9
    ray.util.remove_placement_group(waiting)


def test_list_objects_lists_what_the_runtime_holds_until_it_is_freed(ray):
    import numpy as np

    st = state_api()
    api = importlib.import_module("ray_adapter.ray.experimental.state.api")
    assert api.list_objects is st.list_objects  # Ray's test files import it from there

    @ray.remote
    def slow(seconds):
        import time

        time.sleep(seconds)
        return b"x" * 1000

    @ray.remote
    def boom():
        raise ValueError("no")

    @ray.remote
    def count_inside():
        return len(st.list_objects(limit=None))

    stored = ray.put(np.zeros(10_000))
    pending = slow.remote(3)
    failed = boom.remote()
    ray.wait([failed])
    by_id = {o.object_id: o for o in st.list_objects(limit=None)}
    assert {stored.hex(), pending.hex(), failed.hex()} <= set(by_id)
    record = by_id[stored.hex()]
    assert isinstance(record, st.ObjectState) and record.task_status == "FINISHED"
    assert record.reference_type == "LOCAL_REFERENCE" and record.type == "DRIVER"
    assert record.pid > 0 and record.ip == "127.0.0.1" and record.call_site == "disabled"
    assert by_id[pending.hex()].task_status == "SUBMITTED_TO_WORKER"  # as Ray: running, seen by its owner
    assert by_id[failed.hex()].task_status == "FINISHED"  # as Ray: a failed task's result too
    assert {o.attempt_number for o in by_id.values()} == {1}
    if ray_adapter_core().backend_name == "embedded":  # (yr's store keeps a call's value)
        assert record.object_size >= 80_000  # the array's bytes and its header
    assert [o.object_id for o in st.list_objects(filters=[("object_id", "=", stored.hex())])] == [stored.hex()]
    assert len(st.list_objects(limit=1)) == 1
    assert ray.get(count_inside.remote(), timeout=30) >= 3  # asked from a worker: the same table
    gone = stored.hex()
    del stored
    deadline = __import__("time").monotonic() + 10
    while st.list_objects(filters=[("object_id", "=", gone)]):
        assert __import__("time").monotonic() < deadline, "a freed object is still listed"
        __import__("time").sleep(0.05)
    ray.cancel(pending, force=True)


@pytest.mark.embedded_only("the yuanrong backend does not list actor handles (compat matrix)")
def test_list_objects_lists_each_processs_actor_handles_as_ray(ray):
    """Ray 2.60 lists one ACTOR_HANDLE reference per process holding a handle to an actor,
    under the id of the actor creation task's first return (checked against Ray: a driver
    holding two handles, an actor holding one of them -> three records)."""
    st = state_api()

    @ray.remote
    class Holder:
        def hold(self, handles):
            self.handles = handles
            return os.getpid()

    a, b = Holder.remote(), Holder.remote()
    holder_pid = ray.get(a.hold.remote([b]))
    expected = {(f"ffffffffffffffff{b._actor_id.hex()}01000000", "WORKER", holder_pid),
                *{(f"ffffffffffffffff{h._actor_id.hex()}01000000", "DRIVER", os.getpid()) for h in (a, b)}}

    def handles():
        return {(o.object_id, o.type, o.pid) for o in st.list_objects(
            filters=[("reference_type", "=", "ACTOR_HANDLE")], detail=True)}

    deadline = time.monotonic() + 10
    while handles() != expected:  # a borrow reaches the runtime with the call's result, or just after
        assert time.monotonic() < deadline, handles()
        time.sleep(0.05)
    record, = [o for o in st.list_objects(detail=True) if o.pid == holder_pid]
    assert (record.object_size, record.task_status, record.attempt_number, record.call_site) == (
        -1, "NIL", 1, "disabled")
    summary = st.summarize_objects()["cluster"]
    assert (summary["total_objects"], summary["summary"]["disabled"]["ref_type_counts"]) == (3, {"ACTOR_HANDLE": 3})
    del a  # its process goes, and the handle it held with it
    deadline = time.monotonic() + 10
    while handles() != {(f"ffffffffffffffff{b._actor_id.hex()}01000000", "DRIVER", os.getpid())}:
        assert time.monotonic() < deadline, handles()
        time.sleep(0.05)


def test_core_worker_object_exists_and_the_global_node(ray):
    from unittest import mock

    worker = importlib.import_module("ray_adapter.ray._private.worker")
    core_worker = worker.global_worker.core_worker

    @ray.remote
    def later():
        import time

        time.sleep(0.5)
        return 2

    ref = later.remote()
    assert core_worker.object_exists(ref) is False  # its task is still running
    ray.wait([ref])
    assert core_worker.object_exists(ref) is True
    assert core_worker.object_exists(ray.put(1)) is True
    assert core_worker.object_exists(ray.ObjectRef.from_random()) is False
    with pytest.raises(ValueError, match="memory_store_only"):
        core_worker.object_exists(ref, memory_store_only=True)
    # Ray's get_node_ip_address reads the module attribute: a patched module answers.
    assert worker._global_node.node_ip_address == "127.0.0.1"
    with mock.patch("ray_adapter.ray._private.worker") as patched:
        patched._global_node.node_ip_address = "10.0.0.111"
        assert ray.util.get_node_ip_address() == "10.0.0.111"
    assert ray.util.get_node_ip_address() == "127.0.0.1"
    ray.shutdown()
    assert worker._global_node is None
    with pytest.raises(AttributeError):
        worker.global_worker.core_worker


def test_object_ref_ids_as_ray_makes_them(ray_module):
    ref = ray_module.ObjectRef.from_random()
    assert len(ref.binary()) == ray_module.ObjectRef.size() == 28 and not ref.is_nil()
    assert ref != ray_module.ObjectRef.from_random()
    nil = ray_module.ObjectRef.nil()
    assert nil.is_nil() and nil.hex() == "f" * 56
    assert not ray_module.ObjectRef(b"\x00" * 28).is_nil()  # as Ray: only the all-ones id
    assert ray_module.ObjectRef.from_binary(ref.binary()) == ref


def test_runtime_context_reports_placement_and_reconstruction(ray):
    ctx = ray.get_runtime_context()
    assert ctx.was_current_actor_reconstructed is False  # a property, as in Ray
    assert ctx.get_placement_group_id() is None and ctx.current_placement_group_id.is_nil()
    ids = ctx.get_accelerator_ids()
    assert set(ids) == {"GPU", "neuron_cores", "NPU", "MBLT", "RBLN", "TPU", "HPU", "FURIOSA", "TTNPU"}
    assert all(v == [] for v in ids.values())
    assert ctx.get_node_labels()["ray.io/node-id"] == ctx.get_node_id()


def test_dead_actors_leave_the_table_once_nothing_holds_them():
    """An actor that died (killed, exit_actor, crashed) while its handle was held is let go
    when the handle goes: only the last DEPARTED_KEPT dead actors stay listed, without their
    constructor's arguments (they used to stay in the table for good, arguments and all)."""
    from conftest import run_code

    done = run_code("""
import gc, os, json
import ray_adapter.core.embedded.actors as actors_module
actors_module.DEPARTED_KEPT = 10
import ray
ray.init(num_cpus=1)
@ray.remote
class A:
    def __init__(self, blob): pass
    def ping(self): return 1
    def leave(self): ray.actor.exit_actor()
    def crash(self): os._exit(1)
for i in range(30):
    a = A.remote(b"x" * 100_000)
    ray.get(a.ping.remote())
    if i % 3 == 0:
        ray.kill(a)
    else:
        try:
            ray.get((a.leave if i % 3 == 1 else a.crash).remote())
        except Exception:
            pass
    del a
gc.collect()
from ray_adapter import core
core.current().flush_releases()  # handle drops are applied by the runtime's release thread
import ray._private.state as state
table = [o for o in gc.get_objects() if type(o).__name__ == "ActorManager"][0]
print(json.dumps([len(state.actors()), len(table._actors),
                  sorted({e["State"] for e in state.actors().values()})]))
""", timeout=180)
    assert done.returncode == 0, done.stderr
    listed, in_table, states = json.loads(done.stdout.strip().splitlines()[-1])
    assert (listed, in_table, states) == (10, 0, ["DEAD"])



@pytest.mark.embedded_only("the yuanrong backend does not list actor handles (compat matrix)")
def test_a_dropped_handle_is_gone_from_the_next_listing(ray):
    """Ray's owner applies a ``del`` at once: a listing right after it no longer shows the
    driver's reference (the runtime applies the drops that finalizers queued before it lists).
    A driver's own handle to a detached actor is never listed, a worker's borrowed one is
    (both checked against Ray 2.60)."""
    st = state_api()

    @ray.remote
    class Kept:
        def hold(self, handles):
            self.handles = handles
            return 1

    def handle_ids():
        return sorted(o.object_id[16:48] for o in st.list_objects(
            filters=[("reference_type", "=", "ACTOR_HANDLE")]))

    for _ in range(10):
        actor = Kept.remote()
        ray.get(actor.hold.remote([]))
        assert handle_ids() == [actor._actor_id.hex()]
        del actor
        assert handle_ids() == []
    kept = Kept.options(lifetime="detached").remote()
    holder = Kept.remote()
    ray.get(holder.hold.remote([kept]))
    deadline = time.monotonic() + 10  # a borrow reaches the runtime with the call's result, or just after
    while handle_ids() != sorted([holder._actor_id.hex(), kept._actor_id.hex()]):  # the holder's copy
        assert time.monotonic() < deadline, handle_ids()
        time.sleep(0.05)
    ray.kill(kept)
