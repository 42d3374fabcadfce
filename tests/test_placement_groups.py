"""Placement groups and scheduling strategies on one node, on both backends (the multi-node
cases are in test_cluster.py). Real worker processes (embedded) and yr's local mode."""
import os
import time

import pytest


@pytest.fixture
def gpu_ray(ray_module):
    """The proxy ``ray`` with 4 CPUs and 2 declared GPUs (Ray allows declaring GPUs)."""
    ray_module.init(num_cpus=4, num_gpus=2)
    yield ray_module


def pg_api():
    import importlib

    return importlib.import_module("ray_adapter.ray.util.placement_group")


def strategies():
    import importlib

    return importlib.import_module("ray_adapter.ray.util.scheduling_strategies")


def test_create_ready_wait_and_table(ray):
    pgm = pg_api()
    pg = ray.util.placement_group([{"CPU": 1}, {"CPU": 0.5}], strategy="PACK", name="train")
    assert len(pg.id.hex()) == 36 and pg.id.hex().endswith("01000000")
    assert ray.get(pg.ready(), timeout=30) == pg
    assert pg.wait(10) is True
    assert pg.bundle_specs == [{"CPU": 1.0}, {"CPU": 0.5}] and pg.bundle_count == 2
    table = ray.util.placement_group_table(pg)
    assert sorted(table) == ["bundles", "bundles_to_node_id", "name", "placement_group_id", "state",
                             "stats", "strategy"]
    assert table["bundles"] == {0: {"CPU": 1.0}, 1: {"CPU": 0.5}}
    assert table["state"] == "CREATED" and table["strategy"] == "PACK" and table["name"] == "train"
    node = ray.get_runtime_context().get_node_id()
    assert table["bundles_to_node_id"] == {0: node, 1: node}
    assert pg.id.hex() in ray.util.placement_group_table()
    assert ray.util.get_placement_group("train") == pg
    avail = ray.available_resources()
    assert avail["CPU"] == 0.5 and avail[f"CPU_group_{pg.id.hex()}"] == 1.5
    assert avail[f"CPU_group_1_{pg.id.hex()}"] == 0.5 and avail[f"bundle_group_{pg.id.hex()}"] == 2000.0
    ray.util.remove_placement_group(pg)
    assert ray.util.placement_group_table(pg)["state"] == "REMOVED"
    assert ray.available_resources()["CPU"] == 2.0
    with pytest.raises(ValueError, match="Failed to look up placement group with name: train"):
        ray.util.get_placement_group("train")
    assert pgm.get_current_placement_group() is None  # the driver is in no group


def test_infeasible_groups_stay_pending(ray):
    big = ray.util.placement_group([{"CPU": 100}])
    with pytest.raises(ray.exceptions.GetTimeoutError):
        ray.get(big.ready(), timeout=0.3)
    assert big.wait(0.2) is False
    # One node: STRICT_SPREAD of 2 bundles can never be placed, STRICT_PACK can.
    spread = ray.util.placement_group([{"CPU": 0.5}] * 2, strategy="STRICT_SPREAD")
    pack = ray.util.placement_group([{"CPU": 0.5}] * 2, strategy="STRICT_PACK")
    assert pack.wait(10) is True and spread.wait(0.2) is False
    table = ray.util.placement_group_table(spread)
    assert table["state"] == "PENDING" and table["bundles_to_node_id"] == {0: "", 1: ""}
    ready = big.ready()
    ray.util.remove_placement_group(big)
    with pytest.raises(ray.exceptions.TaskPlacementGroupRemoved,
                       match="The placement group corresponding to this task has been removed"):
        ray.get(ready, timeout=10)


def test_invalid_arguments_raise_as_ray(ray):
    s = strategies()
    with pytest.raises(ValueError, match="Got empty list instead"):
        ray.util.placement_group([])
    with pytest.raises(ValueError, match="Bundles cannot be an empty dictionary"):
        ray.util.placement_group([{"CPU": 0}])
    with pytest.raises(ValueError, match="Invalid placement group strategy FOO"):
        ray.util.placement_group([{"CPU": 1}], strategy="FOO")
    with pytest.raises(ValueError, match="`lifetime` argument must be either `None` or 'detached'"):
        ray.util.placement_group([{"CPU": 1}], lifetime="x")
    pg = ray.util.placement_group([{"CPU": 1}, {"CPU": 1}])

    @ray.remote(num_cpus=0.5)
    def f():
        return 1

    with pytest.raises(ValueError, match="placement group bundle index 5 is invalid. Valid placement group indexes: 0-2"):
        f.options(scheduling_strategy=s.PlacementGroupSchedulingStrategy(pg, 5)).remote()
    with pytest.raises(ValueError, match=r"Cannot schedule test_invalid_arguments_raise_as_ray\.<locals>\.f with the placement group because the resource request \{'CPU': 3\} cannot fit"):
        f.options(num_cpus=3, scheduling_strategy=s.PlacementGroupSchedulingStrategy(pg, 0)).remote()
    with pytest.raises(ValueError, match="Placement groups should be specified via the scheduling_strategy option"):
        f.options(placement_group=pg, scheduling_strategy="SPREAD").remote()
    with pytest.raises(ValueError, match="Invalid scheduling_strategy value FOO"):
        f.options(scheduling_strategy="FOO").remote()
    with pytest.raises(TypeError, match="The type of keyword 'scheduling_strategy' must be"):
        f.options(scheduling_strategy=3)
    with pytest.raises(ValueError, match="If placement group is not set, the value of bundle index must be -1"):
        f.options(placement_group_bundle_index=0).remote()
    @ray.remote
    class Default:
        def ping(self):
            return 1

    mem_only = ray.util.placement_group([{"memory": 1024}])
    with pytest.raises(ValueError, match="the actor requires 1 CPU for creation"):
        Default.options(scheduling_strategy=s.PlacementGroupSchedulingStrategy(mem_only)).remote()
    with pytest.raises(ValueError, match="Invalid node_id 'zz'"):
        s.NodeAffinitySchedulingStrategy("zz", soft=False)
    with pytest.raises(ValueError, match="cannot both be empty"):
        s.NodeLabelSchedulingStrategy({})
    ray.util.placement_group([{"CPU": 0.1}], name="dup")
    with pytest.raises(ray.exceptions.RaySystemError, match="because name 'dup' already exists"):
        ray.util.placement_group([{"CPU": 0.1}], name="dup")


def test_bundles_tasks_and_actors(ray):
    s = strategies()
    pg = ray.util.placement_group([{"CPU": 0.5}, {"CPU": 0.5}])
    ray.get(pg.ready(), timeout=30)

    @ray.remote(num_cpus=0.5)
    def where():
        ctx = ray.get_runtime_context()
        return ctx.get_assigned_resources(), ctx.get_placement_group_id()

    at0 = where.options(scheduling_strategy=s.PlacementGroupSchedulingStrategy(pg, 0))
    anywhere = where.options(scheduling_strategy=s.PlacementGroupSchedulingStrategy(pg, -1))
    legacy = where.options(placement_group=pg, placement_group_bundle_index=1)
    results = ray.get([at0.remote(), anywhere.remote(), legacy.remote()], timeout=30)
    assert results == [({"CPU": 0.5}, pg.id.hex())] * 3  # plain names inside a group, as Ray
    assert ray.get(where.remote(), timeout=30) == ({"CPU": 0.5}, None)

    @ray.remote(num_cpus=0.5)
    class Member:
        def group(self):
            return ray.util.get_current_placement_group() == pg

    members = [Member.options(scheduling_strategy=s.PlacementGroupSchedulingStrategy(pg, i)).remote()
               for i in range(2)]
    assert ray.get([m.group.remote() for m in members], timeout=30) == [True, True]


def test_child_tasks_are_captured(ray):
    s = strategies()
    pg = ray.util.placement_group([{"CPU": 1}])
    ray.get(pg.ready(), timeout=30)

    @ray.remote(num_cpus=0.25)
    def child():
        group = ray.util.get_current_placement_group()
        return group.id.hex() if group else None, group.bundle_specs if group else None

    @ray.remote(num_cpus=0.25)
    def parent():
        # S9: a nested executor reuses the parent's group when it captured child tasks.
        return ray.get(child.remote()), ray.get(child.options(scheduling_strategy="DEFAULT").remote())

    captured, explicit_default = ray.get(parent.options(scheduling_strategy=s.PlacementGroupSchedulingStrategy(
        pg, placement_group_capture_child_tasks=True)).remote(), timeout=30)
    assert captured == (pg.id.hex(), [{"CPU": 1.0}])
    assert explicit_default == (None, None)  # "DEFAULT" opts out of capture, as in Ray
    not_captured = ray.get(parent.options(scheduling_strategy=s.PlacementGroupSchedulingStrategy(pg)).remote(),
                           timeout=30)
    assert not_captured == ((None, None), (None, None))


def test_gpus_in_bundles_are_visible(gpu_ray, monkeypatch):
    ray = gpu_ray
    s = strategies()
    pg = ray.util.placement_group([{"CPU": 1, "GPU": 1}] * 2, strategy="PACK")
    ray.get(pg.ready(), timeout=30)

    @ray.remote(num_gpus=1, num_cpus=1)
    class Rollout:
        def devices(self):
            ctx = ray.get_runtime_context()
            return (os.environ.get("CUDA_VISIBLE_DEVICES"), ray.get_gpu_ids(),
                    ctx.get_accelerator_ids()["GPU"], ctx.get_assigned_resources())

    actors = [Rollout.options(scheduling_strategy=s.PlacementGroupSchedulingStrategy(pg, i)).remote()
              for i in range(2)]
    seen = ray.get([a.devices.remote() for a in actors], timeout=30)
    assert sorted(v for v, _, _, _ in seen) == ["0", "1"]
    for visible, ids, accel, assigned in seen:
        assert ids == [int(visible)] and accel == [visible]
        assert assigned == {"CPU": 1.0, "GPU": 1.0}
    assert "GPU" not in ray.available_resources()
    monkeypatch.setenv("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES", "1")
    for a in actors:
        ray.kill(a)
    again = Rollout.options(scheduling_strategy=s.PlacementGroupSchedulingStrategy(pg, 0)).remote()
    visible, ids, _, _ = ray.get(again.devices.remote(), timeout=30)
    assert visible is None and len(ids) == 1  # ids are still assigned; the variable is left alone


@pytest.mark.embedded_only("killing what runs in a removed group needs worker processes")
def test_removal_kills_its_actors_and_tasks_and_returns_resources(ray):
    s = strategies()
    pg = ray.util.placement_group([{"CPU": 1}])
    ray.get(pg.ready(), timeout=30)

    @ray.remote(num_cpus=1)
    class Holder:
        def ping(self):
            return "pong"

    holder = Holder.options(scheduling_strategy=s.PlacementGroupSchedulingStrategy(pg)).remote()
    assert ray.get(holder.ping.remote(), timeout=30) == "pong"

    @ray.remote(num_cpus=1, max_retries=0)
    def queued():
        return 1

    waiting = queued.options(scheduling_strategy=s.PlacementGroupSchedulingStrategy(pg)).remote()
    assert ray.available_resources()["CPU"] == 1.0
    ray.util.remove_placement_group(pg)
    with pytest.raises(ray.exceptions.ActorDiedError, match="its placement group was removed"):
        ray.get(holder.ping.remote(), timeout=30)
    with pytest.raises(ray.exceptions.TaskPlacementGroupRemoved):
        ray.get(waiting, timeout=30)
    assert ray.available_resources()["CPU"] == 2.0
    assert not any(k.startswith("CPU_group") for k in ray.available_resources())


@pytest.mark.embedded_only("yr local mode cannot interrupt a running task (its tasks are threads)")
def test_a_task_running_in_a_removed_group_fails_with_task_placement_group_removed(ray, tmp_path):
    s = strategies()
    pg = ray.util.placement_group([{"CPU": 1}])
    assert pg.wait(30) is True
    started = tmp_path / "started"

    @ray.remote(num_cpus=1, max_retries=3)  # not retried into the removed group
    def runs(path):
        open(path, "w").close()
        time.sleep(60)

    running = runs.options(scheduling_strategy=s.PlacementGroupSchedulingStrategy(pg)).remote(str(started))
    deadline = time.monotonic() + 30
    while not started.exists():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    ray.util.remove_placement_group(pg)
    with pytest.raises(ray.exceptions.TaskPlacementGroupRemoved):
        ray.get(running, timeout=30)
    # As Ray: waiting on a removed group raises (it used to answer False).
    with pytest.raises(Exception, match=r"^Placement group PlacementGroupID\([0-9a-f]+\) does not exist\.$"):
        pg.wait(1)
    assert ray.available_resources()["CPU"] == 2.0


@pytest.mark.embedded_only("groups created inside actors need the embedded runtime's actor lifecycle")
def test_groups_created_by_an_actor_go_with_it(ray):
    @ray.remote
    class Owner:
        def make(self, detached):
            pg = ray.util.placement_group([{"CPU": 0.25}], lifetime="detached" if detached else None)
            ray.get(pg.ready())
            return pg

    owner = Owner.remote()
    mine, kept = ray.get([owner.make.remote(False), owner.make.remote(True)], timeout=30)
    ray.kill(owner)  # the actor is dead when kill returns, and its own groups with it
    assert ray.util.placement_group_table(mine)["state"] == "REMOVED"
    assert ray.util.placement_group_table(kept)["state"] == "CREATED"


def test_accelerator_type_maps_to_a_resource(ray_module):
    ray = ray_module
    ray.init(num_cpus=2, resources={"accelerator_type:A100": 1})
    from ray_adapter.ray.util import accelerators

    @ray.remote
    def on_a100():
        return ray.get_runtime_context().get_assigned_resources()

    assert ray.get(on_a100.options(accelerator_type=accelerators.NVIDIA_A100).remote(), timeout=30) == {
        "CPU": 1.0, "accelerator_type:A100": 0.001}
    with pytest.raises(ray.exceptions.GetTimeoutError):  # no H100 node: pending, as in Ray
        ray.get(on_a100.options(accelerator_type=accelerators.NVIDIA_H100).remote(), timeout=0.5)


def test_npus_get_ascend_visible_devices(ray_module, monkeypatch):
    ray = ray_module
    ray.init(num_cpus=2, resources={"NPU": 2})

    @ray.remote(resources={"NPU": 1})
    def npu():
        return (os.environ.get("ASCEND_RT_VISIBLE_DEVICES"),
                ray.get_runtime_context().get_accelerator_ids()["NPU"])

    visible, ids = ray.get(npu.remote(), timeout=30)
    assert ids == [visible] and visible in ("0", "1")
    monkeypatch.setenv("RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES", "1")
    visible, ids = ray.get(npu.remote(), timeout=30)
    assert visible is None and len(ids) == 1


def test_waiting_on_a_removed_group_raises_as_in_ray(ray):
    pg = ray.util.placement_group([{"CPU": 1}])
    assert pg.wait(30) is True
    ray.util.remove_placement_group(pg)
    with pytest.raises(Exception, match=r"^Placement group PlacementGroupID\([0-9a-f]+\) does not exist\.$"):
        pg.wait(1)


@pytest.mark.embedded_only("the infeasibility warning is the embedded scheduler's")
def test_a_fraction_of_a_gpu_bundle_is_feasible_without_a_warning(ray_module, capfd):
    # A bundle reserving half a GPU holds a task asking for a quarter: Ray runs it and says
    # nothing. The bundle's feasibility check counted no device slot in it (int(0.5) == 0)
    # and warned that no node could satisfy the task, though it ran.
    from ray_adapter.ray.util.placement_group import placement_group
    from ray_adapter.ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    ray = ray_module
    ray.init(num_cpus=2, num_gpus=1)
    pg = placement_group([{"GPU": 0.5, "CPU": 1}])
    ray.get(pg.ready(), timeout=30)

    @ray.remote(num_gpus=0.25)
    def ids():
        return ray.get_gpu_ids()

    strategy = PlacementGroupSchedulingStrategy(pg, 0)
    assert ray.get(ids.options(scheduling_strategy=strategy).remote(), timeout=30) == [0]
    assert "satisfy" not in capfd.readouterr().err
