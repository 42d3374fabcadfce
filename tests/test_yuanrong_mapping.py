"""The yuanrong backend's cluster paths: the exact yr calls, Config and InvokeOptions built for
Ray calls, checked against RecordingYr (a recording stand-in; no Yuanrong cluster runs here)."""
import pytest

from ray_adapter import core
from ray_adapter.core import InitOptions
from ray_adapter.core.yuanrong.backend import YuanrongBackend
from ray_adapter.core.yuanrong.invoke_options import FOREVER

from yr_recorder import RecordingYr

ADDRESS = "yr-head.example:31222"


@pytest.fixture
def cluster(monkeypatch):
    """The proxy ``ray`` running on a YuanrongBackend in cluster mode over RecordingYr."""
    import ray_adapter.ray as ray

    for var in ("YR_DS_ADDRESS", "YR_JWT_TOKEN", "YR_CERT_FILE", "YR_IN_CLUSTER", "RAY_ADAPTER_RUNTIME"):
        monkeypatch.delenv(var, raising=False)
    if ray.is_initialized():
        ray.shutdown()
    recorder = RecordingYr(
        resources=[{"id": "node-a", "status": 0, "labels": {"ip": "192.0.2.10", "hostname": "a"},
                    "capacity": {"CPU": 8000, "Memory": 16384, "GPU/A100/count": 2, "disk": 1},
                    "allocatable": {"CPU": 6000, "Memory": 8192, "GPU/A100/count": 0, "disk": 1}},
                   {"id": "node-b", "status": 0, "labels": {"ip": "192.0.2.11"},
                    "capacity": {"CPU": 4000, "Memory": 8192, "NPU/910B/count": 8},
                    "allocatable": {"CPU": 4000, "Memory": 8192, "NPU/910B/count": 8}}],
        named=[{"name": "elsewhere", "namespace": "other"}])
    backend = YuanrongBackend(yr_module=recorder, local_mode=False)
    backend.start(InitOptions(address=ADDRESS, num_cpus=4, namespace="ns"))
    core.set_current(backend)
    yield ray, recorder
    core.shutdown()


def test_config_for_a_cluster_address(monkeypatch):
    monkeypatch.setenv("YR_DS_ADDRESS", "yr-ds.example:31501")
    monkeypatch.setenv("YR_JWT_TOKEN", "token-123")
    monkeypatch.setenv("YR_CERT_FILE", "/etc/yr/ca.pem")
    monkeypatch.setenv("YR_IN_CLUSTER", "true")
    recorder = RecordingYr()
    backend = YuanrongBackend(yr_module=recorder, local_mode=False)
    backend.start(InitOptions(address="yr://" + ADDRESS, num_cpus=4, namespace="team",
                              runtime_env={"env_vars": {"A": "1"}}, log_to_driver=True))
    (kind, conf), = [c for c in recorder.calls if c[0] == "init"]
    assert conf.kwargs == {
        "ns": "team", "log_to_driver": True, "num_cpus": 4, "runtime_env": {"env_vars": {"A": "1"}},
        "server_address": ADDRESS, "ds_address": "yr-ds.example:31501", "in_cluster": True,
        "auth_token": "token-123", "enable_tls": True, "certificate_file_path": "/etc/yr/ca.pem"}
    backend.shutdown()
    assert recorder.calls[-1] == ("finalize",)


def test_local_mode_config():
    recorder = RecordingYr()
    YuanrongBackend(yr_module=recorder, local_mode=True).start(InitOptions())
    conf = recorder.calls[0][1]
    assert conf.kwargs["local_mode"] is True and "server_address" not in conf.kwargs


def test_task_options_convert_units(cluster):
    ray, recorder = cluster

    @ray.remote(num_cpus=0.5, memory=3 * 1024 * 1024 + 1, num_gpus=2,
                resources={"NPU": 1, "ssd": 3}, max_retries=-1)
    def f(x):
        return x + 1

    assert ray.get(f.remote(1)) == 2
    assert recorder.options_of("task")[-1] == {
        "cpu": 500, "memory": 4, "custom_resources": {"GPU/.+/count": 2.0, "NPU/.+/count": 1.0, "ssd": 3.0},
        "retry_times": FOREVER}

    @ray.remote
    def g():
        return None

    assert ray.get(g.options(max_retries=0).remote()) is None
    assert recorder.options_of("task")[-1] == {"cpu": 1000}


def test_actor_options_map_to_instance_options(cluster):
    ray, recorder = cluster

    @ray.remote(num_cpus=1, max_restarts=-1, max_task_retries=2, max_concurrency=4)
    class Counter:
        def __init__(self, start):
            self.n = start

        def inc(self):
            self.n += 1
            return self.n

    c = Counter.options(name="counter", namespace="team", lifetime="detached",
                        runtime_env={"env_vars": {"MODE": "x"}}).remote(10)
    assert ray.get(c.inc.remote()) == 11
    assert recorder.options_of("instance")[-1] == {
        "cpu": 1000, "retry_times": 2, "recover_retry_times": FOREVER, "concurrency": 4,
        "name": "counter", "namespace": "team", "custom_extensions": {"lifecycle": "detached"},
        "env_vars": {"MODE": "x"}}

    @ray.remote
    class Async:
        async def ping(self):
            return "pong"

    assert ray.get(Async.remote().ping.remote()) == "pong"
    assert recorder.options_of("instance")[-1] == {"cpu": 0, "concurrency": 1000, "namespace": "ns"}


def test_put_boxes_none_and_empty_bytes(cluster):
    ray, recorder = cluster
    assert ray.get([ray.put(None), ray.put(b"")]) == [None, b""]


def test_nodes_and_resources_come_from_yr_resources(cluster):
    ray, recorder = cluster
    nodes = ray.nodes()
    assert [n["NodeID"] for n in nodes] == ["node-a", "node-b"]
    assert nodes[0]["NodeManagerAddress"] == "192.0.2.10"
    assert nodes[0]["Resources"] == {"CPU": 8.0, "memory": 16384 * 1024 * 1024.0, "GPU": 2.0, "disk": 1.0}
    total = ray.cluster_resources()
    assert total["CPU"] == 12.0 and total["GPU"] == 2.0 and total["NPU"] == 8.0
    free = ray.available_resources()
    assert free["CPU"] == 10.0 and "GPU" not in free and free["NPU"] == 8.0


def test_named_actor_lookups_reach_yr(cluster):
    ray, recorder = cluster

    class Remote:  # an actor another driver created on the cluster
        def hello(self, who):
            return f"hello {who}"

    from yr_recorder import _Instance

    recorder._instances[("other", "elsewhere")] = _Instance(recorder, Remote(), None)
    assert ray.util.list_named_actors(all_namespaces=True) == [{"name": "elsewhere", "namespace": "other"}]
    assert ("list_named_instances", True) in recorder.calls
    with pytest.raises(ValueError, match="Failed to look up actor with name 'missing'"):
        ray.get_actor("missing")
    assert ("get_instance", "missing", "ns") in recorder.calls
    # The shell's call() is what the adapter invokes; a foreign actor is called through it too.
    handle = ray.get_actor("elsewhere", namespace="other")
    assert repr(handle).startswith("Actor(elsewhere, ")


def test_backend_selection(monkeypatch):
    monkeypatch.delenv("RAY_ADAPTER_RUNTIME", raising=False)
    monkeypatch.delenv("YR_SERVER_ADDRESS", raising=False)
    assert core.select_backend(None) == "embedded"
    assert core.select_backend("local") == "embedded"
    assert core.select_backend(ADDRESS) == "yuanrong"
    monkeypatch.setenv("YR_SERVER_ADDRESS", ADDRESS)
    assert core.select_backend(None) == "yuanrong"
    monkeypatch.setenv("RAY_ADAPTER_RUNTIME", "yr-local")
    assert core.select_backend(None) == "yuanrong"
    monkeypatch.setenv("RAY_ADAPTER_RUNTIME", "embedded")
    assert core.select_backend(ADDRESS) == "embedded"


def test_ray_client_address_is_a_documented_gap(ray_module):
    from ray_adapter.gaps import RayAdapterOptionError

    with pytest.raises(RayAdapterOptionError, match="ray://"):
        ray_module.init(address="ray://head:10001")


def test_only_yr_local_workers_refused_at_exit_are_kept_off_stderr(monkeypatch):
    """yr-local's scale-out thread refused by its pool at interpreter exit is yr's noise after
    the program ended (dropped); the same error of another thread, another error of a yr
    worker, or that error before exit began, are still printed."""
    import concurrent.futures.thread
    import threading
    from types import SimpleNamespace

    from ray_adapter.core.yuanrong.exit_grace import is_yr_exit_noise

    Worker = pytest.importorskip("yr.local_mode.worker").Worker

    refused = RuntimeError("cannot schedule new futures after interpreter shutdown")

    def args(exc, thread):
        return SimpleNamespace(exc_type=type(exc), exc_value=exc, exc_traceback=None, thread=thread)

    assert not is_yr_exit_noise(args(refused, Worker()))  # not exiting: printed
    monkeypatch.setattr(concurrent.futures.thread, "_shutdown", True)
    assert is_yr_exit_noise(args(refused, Worker()))
    assert not is_yr_exit_noise(args(refused, threading.Thread()))
    assert not is_yr_exit_noise(args(RuntimeError("boom"), Worker()))
    assert not is_yr_exit_noise(args(ValueError(str(refused)), Worker()))
