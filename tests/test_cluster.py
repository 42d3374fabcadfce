"""Virtual nodes of the embedded runtime (``ray.cluster_utils.Cluster``): multi-node placement,
node affinity and labels, node failure. Real worker processes on every node."""
import importlib
import time

import pytest


@pytest.fixture
def ray():
    import ray_adapter.ray as ray_module

    if ray_module.is_initialized():
        ray_module.shutdown()
    yield ray_module
    ray_module.shutdown()


def mod(name):
    return importlib.import_module(f"ray_adapter.ray.{name}")


@pytest.fixture
def cluster(ray, monkeypatch):
    """A head (2 CPUs) and two nodes: 127.0.0.2 (2 CPUs, 1 GPU, zone=a) and 127.0.0.3 (2 CPUs)."""
    monkeypatch.delenv("RAY_ADAPTER_RUNTIME", raising=False)
    c = mod("cluster_utils").Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    c.add_node(num_cpus=2, num_gpus=1, resources={"x": 1}, labels={"zone": "a"})
    c.add_node(num_cpus=2)
    ray.init(address=c.address)
    c.wait_for_nodes()
    yield c
    c.shutdown()


def nodes_of(ray, pg):
    return ray.util.placement_group_table(pg)["bundles_to_node_id"]


def test_nodes_have_their_own_ids_ips_resources_and_labels(ray, cluster):
    head, gpu_node, cpu_node = cluster.list_all_nodes()[0], *sorted(
        cluster.worker_nodes, key=lambda n: n.node_ip_address)
    nodes = {n["NodeID"]: n for n in ray.nodes()}
    assert set(nodes) == {head.node_id, gpu_node.node_id, cpu_node.node_id}
    assert [nodes[n.node_id]["NodeManagerAddress"] for n in (head, gpu_node, cpu_node)] == [
        "127.0.0.1", "127.0.0.2", "127.0.0.3"]
    assert nodes[gpu_node.node_id]["Resources"]["GPU"] == 1.0
    assert nodes[gpu_node.node_id]["Resources"]["node:127.0.0.2"] == 1.0
    assert nodes[gpu_node.node_id]["Labels"] == {"ray.io/node-id": gpu_node.node_id, "zone": "a"}
    assert "node:__internal_head__" in nodes[head.node_id]["Resources"]
    assert ray.cluster_resources()["CPU"] == 6.0
    per_node = mod("_private.state").total_resources_per_node()
    assert per_node[cpu_node.node_id]["CPU"] == 2.0

    @ray.remote(num_gpus=1)
    def where():
        ctx = ray.get_runtime_context()
        return ctx.get_node_id(), ray.util.get_node_ip_address(), ray.get_gpu_ids(), ctx.get_node_labels()

    assert ray.get(where.remote(), timeout=30) == (gpu_node.node_id, "127.0.0.2", [0],
                                                    {"ray.io/node-id": gpu_node.node_id, "zone": "a"})


def test_strategies_across_nodes(ray, cluster):
    pg = ray.util.placement_group([{"CPU": 1}] * 3, strategy="SPREAD")
    ray.get(pg.ready(), timeout=30)
    assert len(set(nodes_of(ray, pg).values())) == 3
    packed = ray.util.placement_group([{"CPU": 0.5}] * 2, strategy="PACK")
    ray.get(packed.ready(), timeout=30)
    assert len(set(nodes_of(ray, packed).values())) == 1
    # One node has nothing left: STRICT_SPREAD over 3 nodes waits until the pair is removed.
    strict = ray.util.placement_group([{"CPU": 0.5}] * 3, strategy="STRICT_SPREAD")
    assert strict.wait(0.3) is False
    ray.util.remove_placement_group(packed)
    ray.get(strict.ready(), timeout=30)
    assert len(set(nodes_of(ray, strict).values())) == 3
    for g in (pg, strict):
        ray.util.remove_placement_group(g)
    assert ray.available_resources()["CPU"] == 6.0
    # STRICT_PACK of 3 CPUs cannot fit on any 2-CPU node; PACK spreads what cannot be packed.
    no_fit = ray.util.placement_group([{"CPU": 1}] * 3, strategy="STRICT_PACK")
    assert no_fit.wait(0.3) is False
    spill = ray.util.placement_group([{"CPU": 1}] * 3, strategy="PACK")
    ray.get(spill.ready(), timeout=30)
    assert len(set(nodes_of(ray, spill).values())) == 2
    # SPREAD and PACK that no node can hold (a 3-CPU bundle on 2-CPU nodes) stay pending too.
    assert ray.util.placement_group([{"CPU": 3}], strategy="SPREAD").wait(0.2) is False
    assert ray.util.placement_group([{"CPU": 3}], strategy="PACK").wait(0.2) is False


def test_strict_spread_with_more_bundles_than_nodes_stays_pending(ray, monkeypatch):
    monkeypatch.delenv("RAY_ADAPTER_RUNTIME", raising=False)
    c = mod("cluster_utils").Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    c.add_node(num_cpus=2)
    c.connect()
    try:
        pg = ray.util.placement_group([{"CPU": 1}] * 3, strategy="STRICT_SPREAD")
        with pytest.raises(ray.exceptions.GetTimeoutError):
            ray.get(pg.ready(), timeout=0.5)
        assert ray.util.placement_group_table(pg)["state"] == "PENDING"
        c.add_node(num_cpus=1)  # a third node: now it fits
        ray.get(pg.ready(), timeout=30)
        assert len(set(nodes_of(ray, pg).values())) == 3
    finally:
        c.shutdown()


def test_node_affinity_and_labels(ray, cluster):
    s = mod("util.scheduling_strategies")
    gpu_node, cpu_node = sorted(cluster.worker_nodes, key=lambda n: n.node_ip_address)

    @ray.remote(num_cpus=0.5)
    def where():
        return ray.get_runtime_context().get_node_id()

    hard = s.NodeAffinitySchedulingStrategy(cpu_node.node_id, soft=False)
    assert set(ray.get([where.options(scheduling_strategy=hard).remote() for _ in range(4)],
                       timeout=30)) == {cpu_node.node_id}
    zone_a = s.NodeLabelSchedulingStrategy({"zone": s.In("a")})
    assert ray.get(where.options(scheduling_strategy=zone_a).remote(), timeout=30) == gpu_node.node_id
    no_zone = s.NodeLabelSchedulingStrategy({"zone": s.DoesNotExist()})
    assert ray.get(where.options(scheduling_strategy=no_zone).remote(), timeout=30) != gpu_node.node_id
    assert ray.get(where.options(label_selector={"zone": "a"}).remote(), timeout=30) == gpu_node.node_id
    assert ray.get(where.options(label_selector={"zone": "!a"}).remote(), timeout=30) != gpu_node.node_id
    with pytest.raises(ray.exceptions.GetTimeoutError):  # no node matches: pending, as in Ray
        ray.get(where.options(label_selector={"zone": "b"}).remote(), timeout=0.3)
    spread = {ray.get(where.options(scheduling_strategy="SPREAD").remote(), timeout=30) for _ in range(6)}
    assert len(spread) == 3

    @ray.remote(num_cpus=2)
    class Big:
        def node(self):
            return ray.get_runtime_context().get_node_id()

    # Busy target: a hard affinity waits, _fail_on_unavailable fails, a soft one with spill moves.
    blocker = Big.options(scheduling_strategy=hard).remote()
    assert ray.get(blocker.node.remote(), timeout=30) == cpu_node.node_id
    waiting = where.options(scheduling_strategy=hard).remote()
    with pytest.raises(ray.exceptions.GetTimeoutError):
        ray.get(waiting, timeout=0.3)
    failing = s.NodeAffinitySchedulingStrategy(cpu_node.node_id, soft=False, _fail_on_unavailable=True)
    with pytest.raises(ray.exceptions.TaskUnschedulableError):
        ray.get(where.options(scheduling_strategy=failing).remote(), timeout=30)
    spill = s.NodeAffinitySchedulingStrategy(cpu_node.node_id, soft=True, _spill_on_unavailable=True)
    assert ray.get(where.options(scheduling_strategy=spill).remote(), timeout=30) != cpu_node.node_id
    ray.kill(blocker)
    assert ray.get(waiting, timeout=30) == cpu_node.node_id


def test_node_removal_is_a_node_failure(ray, cluster):
    s = mod("util.scheduling_strategies")
    gpu_node, cpu_node = sorted(cluster.worker_nodes, key=lambda n: n.node_ip_address)
    on_cpu_node = s.NodeAffinitySchedulingStrategy(cpu_node.node_id, soft=False)

    @ray.remote(max_retries=0, num_cpus=0.5)
    def sleepy():
        time.sleep(60)

    @ray.remote(num_cpus=0.5)
    class Node:
        def node(self):
            return ray.get_runtime_context().get_node_id()

        def slow(self):
            time.sleep(60)

    task = sleepy.options(scheduling_strategy=on_cpu_node).remote()
    mortal = Node.options(scheduling_strategy=on_cpu_node).remote()
    phoenix = Node.options(max_restarts=1, scheduling_strategy=s.NodeAffinitySchedulingStrategy(
        cpu_node.node_id, soft=True)).remote()
    pg = ray.util.placement_group([{"CPU": 0.5}], strategy="PACK")
    ray.get(pg.ready(), timeout=30)
    assert ray.get([mortal.node.remote(), phoenix.node.remote()], timeout=30) == [cpu_node.node_id] * 2
    in_flight = mortal.slow.remote()
    cluster.remove_node(cpu_node)
    with pytest.raises(ray.exceptions.NodeDiedError, match="Node IP: 127.0.0.3"):
        ray.get(task, timeout=30)
    with pytest.raises(ray.exceptions.ActorDiedError, match="its node has died"):
        ray.get(in_flight, timeout=30)
    deadline = time.monotonic() + 30
    while True:  # the restart may be in flight
        try:
            assert ray.get(phoenix.node.remote(), timeout=30) != cpu_node.node_id
            break
        except ray.exceptions.ActorUnavailableError:
            assert time.monotonic() < deadline
    with pytest.raises(ray.exceptions.TaskUnschedulableError, match="soft=False was specified"):
        ray.get(sleepy.options(scheduling_strategy=on_cpu_node).remote(), timeout=30)
    alive = {n["NodeID"]: n["Alive"] for n in ray.nodes()}
    assert alive[cpu_node.node_id] is False and alive[gpu_node.node_id] is True
    assert ray.cluster_resources()["CPU"] == 4.0
    # A bundle that lived on the removed node is placed again elsewhere.
    ray.get(pg.ready(), timeout=30)
    assert cpu_node.node_id not in nodes_of(ray, pg).values()


def test_cluster_lifecycle(ray, monkeypatch):
    monkeypatch.delenv("RAY_ADAPTER_RUNTIME", raising=False)
    c = mod("cluster_utils").Cluster()
    assert c.address is None
    head = c.add_node(num_cpus=1)
    with pytest.raises(ValueError, match="num_cpus and num_gpus must not be provided"):
        ray.init(address=c.address, num_cpus=2)
    ray.init(address=c.address)
    assert ray.get_runtime_context().get_node_id() == head.node_id
    late = c.add_node(num_cpus=1, resources={"late": 1})
    assert {n["NodeID"] for n in ray.nodes()} == {head.node_id, late.node_id}

    @ray.remote(resources={"late": 1})
    def on_late():
        return ray.util.get_node_ip_address()

    assert ray.get(on_late.remote(), timeout=30) == late.node_ip_address
    with pytest.raises(ValueError, match="Removing a node that is connected to this Ray client"):
        c.remove_node(head)
    assert not ray.is_initialized()
    c.shutdown()


def test_cluster_needs_the_embedded_runtime(ray, monkeypatch):
    from ray_adapter import gaps

    monkeypatch.setenv("RAY_ADAPTER_RUNTIME", "yr-local")
    c = mod("cluster_utils").Cluster(initialize_head=True)
    try:
        with pytest.raises(gaps.RayAdapterGapError, match="ray.cluster_utils.Cluster"):
            ray.init(address=c.address)
    finally:
        c.shutdown()


def test_node_arguments_ray_fixtures_pass_are_accepted(ray, monkeypatch):
    # Ray's own test fixtures give the head `_system_config` (ray.init ignores it too); what
    # describes no virtual node is refused, naming the argument.
    monkeypatch.delenv("RAY_ADAPTER_RUNTIME", raising=False)
    from ray_adapter.gaps import RayAdapterOptionError

    c = mod("cluster_utils").Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "_system_config": {"object_timeout_milliseconds": 200}, "dashboard_port": None})
    c.add_node(num_cpus=1, _system_config={"object_timeout_milliseconds": 200})
    with pytest.raises(RayAdapterOptionError, match="node_ip_address"):
        c.add_node(num_cpus=1, node_ip_address="10.0.0.9")
    for option in ({"_system_config": {"object_timeout_milliseconds": 200}}, {"resources": {"x": 1}},
                   {"labels": {"a": "b"}}, {"object_store_memory": 10 ** 8}):
        name = next(iter(option))
        with pytest.raises(ValueError, match=f"When connecting to an existing cluster, {name} must not"):
            ray.init(address=c.address, **option)
    ray.init(address=c.address)
    assert ray.cluster_resources()["CPU"] == 2
    c.shutdown()


def test_joining_a_cluster_logs_rays_connect_lines(ray, monkeypatch):
    """As Ray: ``init(address=<a Cluster's>)`` logs that it connects to an existing cluster (on
    the "ray" logger), not that it started a local instance."""
    import logging

    monkeypatch.delenv("RAY_ADAPTER_RUNTIME", raising=False)
    logged = []
    keep = logging.Handler()
    keep.emit = lambda record: logged.append(record.getMessage())
    logging.getLogger("ray").addHandler(keep)
    c = mod("cluster_utils").Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        ray.init(address=c.address)
        assert [m for m in logged if "Ray" in m] == [
            f"Connecting to existing Ray cluster at address: {c.address}...", "Connected to Ray cluster."]
    finally:
        logging.getLogger("ray").removeHandler(keep)
        ray.shutdown()
        c.shutdown()


def test_the_address_init_says_it_joins(monkeypatch):
    """What ``ray.init`` logs as joined: a runtime it attaches to, a Cluster, an address, or a
    Yuanrong cluster's ``YR_SERVER_ADDRESS`` (not yr's local mode: that one is started)."""
    joined = mod("_private.worker")._joined_address
    monkeypatch.delenv("YR_SERVER_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_ADAPTER_RUNTIME", raising=False)
    assert joined(None, None, None) is None
    assert joined({"address": "127.0.0.1:6379"}, None, None) == "127.0.0.1:6379"
    assert joined(None, "127.0.0.1:6380", None) == "127.0.0.1:6380"
    assert joined(None, None, "10.0.0.5:31222") == "10.0.0.5:31222"
    monkeypatch.setenv("YR_SERVER_ADDRESS", "10.0.0.5:31222")
    assert joined(None, None, None) == "10.0.0.5:31222"
    monkeypatch.setenv("RAY_ADAPTER_RUNTIME", "yr-local")
    assert joined(None, None, None) is None
