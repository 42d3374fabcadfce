"""Placement groups and scheduling strategies on the yuanrong backend's cluster paths: the exact
yr calls (create_resource_group, ResourceGroup.wait, remove_resource_group,
resource_group_table, ResourceGroupOptions, schedule_affinities), checked against RecordingYr
(a recording stand-in; no Yuanrong cluster runs here)."""
import importlib

import pytest

from ray_adapter import core
from ray_adapter.core import InitOptions
from ray_adapter.core.yuanrong.backend import YuanrongBackend
from ray_adapter.core.yuanrong.invoke_options import NODE_ID_LABEL

from yr_recorder import RecordingYr


@pytest.fixture
def cluster(monkeypatch):
    import ray_adapter.ray as ray

    monkeypatch.delenv("RAY_ADAPTER_RUNTIME", raising=False)
    if ray.is_initialized():
        ray.shutdown()
    recorder = RecordingYr(resources=[
        {"id": "node-a", "status": 0, "labels": {"ip": "192.0.2.10"},
         "capacity": {"CPU": 8000, "Memory": 16384, "GPU/A100/count": 2},
         "allocatable": {"CPU": 8000, "Memory": 16384, "GPU/A100/count": 2}},
        {"id": "node-b", "status": 0, "labels": {"ip": "192.0.2.11"},
         "capacity": {"CPU": 8000, "Memory": 16384}, "allocatable": {"CPU": 8000, "Memory": 16384}}])
    backend = YuanrongBackend(yr_module=recorder, local_mode=False)
    backend.start(InitOptions(address="yr-head.example:31222", num_cpus=4, namespace="ns"))
    core.set_current(backend)
    yield ray, recorder
    core.shutdown()


def strategies():
    return importlib.import_module("ray_adapter.ray.util.scheduling_strategies")


def test_placement_group_is_a_resource_group(cluster):
    ray, recorder = cluster
    pg = ray.util.placement_group([{"CPU": 1, "GPU": 1}, {"CPU": 0.5, "memory": 2 * 1024 ** 2}],
                                  strategy="STRICT_SPREAD", name="train")
    rg_name = f"rg-{pg.id.hex()}"
    assert ("create_resource_group", [{"CPU": 1000, "GPU/.+/count": 1.0}, {"CPU": 500, "Memory": 2}],
            rg_name, "STRICT_SPREAD") in recorder.calls
    assert ray.get(pg.ready(), timeout=10) == pg and pg.wait(5)
    assert ("wait_resource_group", rg_name, -1) in recorder.calls
    table = ray.util.placement_group_table(pg)
    assert table["state"] == "CREATED" and table["name"] == "train"
    assert table["bundles_to_node_id"] == {0: "node-a", 1: "node-b"}  # from resource_group_table
    assert ("resource_group_table", rg_name) in recorder.calls
    ray.util.remove_placement_group(pg)
    assert ("remove_resource_group", rg_name) in recorder.calls
    assert ray.util.placement_group_table(pg)["state"] == "REMOVED"


def test_pending_group_and_removal(cluster):
    ray, recorder = cluster
    recorder.place_groups = False
    pg = ray.util.placement_group([{"CPU": 64}])
    with pytest.raises(ray.exceptions.GetTimeoutError):
        ray.get(pg.ready(), timeout=0.3)
    assert pg.wait(0.1) is False and ray.util.placement_group_table(pg)["state"] == "PENDING"
    ready = pg.ready()
    ray.util.remove_placement_group(pg)
    with pytest.raises(ray.exceptions.TaskPlacementGroupRemoved):
        ray.get(ready, timeout=10)


def test_bundles_and_affinities_reach_invoke_options(cluster):
    ray, recorder = cluster
    s = strategies()
    pg = ray.util.placement_group([{"CPU": 1}, {"CPU": 1}])
    ray.get(pg.ready(), timeout=10)

    @ray.remote(num_cpus=0.5)
    def f():
        return 1

    assert ray.get(f.options(scheduling_strategy=s.PlacementGroupSchedulingStrategy(pg, 1)).remote()) == 1
    rgo = recorder.options_of("task")[-1]["resource_group_options"]
    assert rgo.kwargs == {"resource_group_name": f"rg-{pg.id.hex()}", "bundle_index": 1}
    assert ray.get(f.options(placement_group=pg).remote()) == 1  # the older options: any bundle
    assert recorder.options_of("task")[-1]["resource_group_options"].kwargs["bundle_index"] == -1

    node = "ab" * 28
    ray.get(f.options(scheduling_strategy=s.NodeAffinitySchedulingStrategy(node, soft=False)).remote())
    (affinity,) = recorder.options_of("task")[-1]["schedule_affinities"]
    assert (affinity.affinity_kind, affinity.affinity_type) == ("RESOURCE", "REQUIRED")
    (op,) = affinity.label_operators
    assert (op.operator_type, op.key, op.values) == ("LABEL_IN", NODE_ID_LABEL, [node])
    ray.get(f.options(scheduling_strategy=s.NodeAffinitySchedulingStrategy(node, soft=True)).remote())
    assert recorder.options_of("task")[-1]["schedule_affinities"][0].affinity_type == "PREFERRED"

    labels = s.NodeLabelSchedulingStrategy({"zone": s.In("a", "b"), "spot": s.DoesNotExist()},
                                           soft={"gpu": s.Exists()})
    ray.get(f.options(scheduling_strategy=labels).remote())
    hard, soft = recorder.options_of("task")[-1]["schedule_affinities"]
    assert hard.affinity_type == "REQUIRED" and soft.affinity_type == "PREFERRED"
    assert [(o.operator_type, o.key, o.values) for o in hard.label_operators] == [
        ("LABEL_IN", "zone", ["a", "b"]), ("LABEL_NOT_EXISTS", "spot", [])]
    assert [(o.operator_type, o.key) for o in soft.label_operators] == [("LABEL_EXISTS", "gpu")]
    ray.get(f.options(label_selector={"zone": "!in(a,b)"}).remote())
    (sel,) = recorder.options_of("task")[-1]["schedule_affinities"]
    assert [(o.operator_type, o.values) for o in sel.label_operators] == [("LABEL_NOT_IN", ["a", "b"])]

    @ray.remote(num_gpus=1)
    class Rollout:
        def ping(self):
            return "pong"

    gpus = ray.util.placement_group([{"CPU": 1, "GPU": 1}])
    actor = Rollout.options(accelerator_type="A100",
                            scheduling_strategy=s.PlacementGroupSchedulingStrategy(gpus, 0)).remote()
    assert ray.get(actor.ping.remote()) == "pong"
    opts = recorder.options_of("instance")[-1]
    assert opts["custom_resources"] == {"GPU/A100/count": 1.0}  # the card model, as yr names it
    assert opts["resource_group_options"].kwargs["bundle_index"] == 0


def test_worker_group_ranks_reach_their_bundles(cluster):
    """The S2 worker group on a cluster: one instance per bundle, each with its own RANK."""
    ray, recorder = cluster
    s = strategies()
    pg = ray.util.placement_group([{"CPU": 1, "GPU": 1}] * 4, strategy="PACK")
    ray.get(pg.ready(), timeout=10)

    @ray.remote(num_gpus=1)
    class Worker:
        def ping(self):
            return "pong"

    workers = [Worker.options(scheduling_strategy=s.PlacementGroupSchedulingStrategy(pg, rank),
                              runtime_env={"env_vars": {"RANK": str(rank), "WORLD_SIZE": "4"}}).remote()
               for rank in range(4)]
    assert ray.get([w.ping.remote() for w in workers]) == ["pong"] * 4
    created = recorder.options_of("instance")[-4:]
    assert [o["env_vars"]["RANK"] for o in created] == ["0", "1", "2", "3"]
    assert [o["resource_group_options"].kwargs["bundle_index"] for o in created] == [0, 1, 2, 3]
    assert {o["custom_resources"]["GPU/.+/count"] for o in created} == {1.0}


def test_bundle_label_selectors_are_refused_on_a_cluster(cluster):
    ray, recorder = cluster
    with pytest.raises(NotImplementedError, match="bundle_label_selector"):
        ray.util.placement_group([{"CPU": 1}], bundle_label_selector=[{"zone": "a"}])
    assert not [c for c in recorder.calls if c[0] == "create_resource_group"]
