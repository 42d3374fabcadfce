"""ray.util.metrics: Counter, Gauge and Histogram recorded by the driver, a task and an actor,
gathered by the driver's runtime and scraped from its Prometheus endpoint (names, tags,
values); Ray's validation errors. Both backends, real worker processes."""
import socket
import urllib.request
import warnings

import pytest
from prometheus_client.parser import text_string_to_metric_families


def scrape(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def labels(**tags):
    return tuple(sorted({"Component": "core_worker", "Version": "2.60.0", **tags}.items()))


def test_task_actor_and_driver_metrics_are_served_at_the_metrics_export_port(ray):
    from ray_adapter.ray.util.metrics import Counter, Gauge, Histogram

    port = ray.nodes()[0]["MetricsExportPort"]
    assert isinstance(port, int) and port > 0

    @ray.remote
    def work(n):
        Counter("jobs_done", description="Jobs done.", tag_keys=("kind",)).inc(n, tags={"kind": "task"})
        return n

    @ray.remote
    class Server:
        def __init__(self):
            self.gauge = Gauge("queue_len", description="Queue length.",
                               tag_keys=("actor",)).set_default_tags({"actor": "s1"})
            self.latency = Histogram("latency_s", description="Latency.", boundaries=[0.1, 1.0],
                                     tag_keys=("actor",)).set_default_tags({"actor": "s1"})

        def step(self, v):
            self.gauge.set(v)
            self.latency.observe(v / 10)
            return v

    assert ray.get([work.remote(i) for i in (1, 2, 3)]) == [1, 2, 3]
    server = Server.remote()
    assert ray.get([server.step.remote(v) for v in (1, 5, 20)]) == [1, 5, 20]
    Counter("jobs_done", tag_keys=("kind",)).inc(tags={"kind": "driver"})

    samples = scrape(port)
    assert samples[("ray_jobs_done_total", labels(kind="task"))] == 6.0  # summed over workers
    assert samples[("ray_jobs_done_total", labels(kind="driver"))] == 1.0
    assert samples[("ray_queue_len", labels(actor="s1"))] == 20.0
    assert samples[("ray_latency_s_bucket", labels(actor="s1", le="0.1"))] == 1.0
    assert samples[("ray_latency_s_bucket", labels(actor="s1", le="1.0"))] == 2.0
    assert samples[("ray_latency_s_bucket", labels(actor="s1", le="+Inf"))] == 3.0
    assert samples[("ray_latency_s_count", labels(actor="s1"))] == 3.0
    assert samples[("ray_latency_s_sum", labels(actor="s1"))] == pytest.approx(2.6)


def test_the_metrics_export_port_can_be_chosen_and_is_freed_at_shutdown(ray):
    from ray_adapter.ray.util.metrics import Gauge

    ray.shutdown()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    context = ray.init(num_cpus=1, _metrics_export_port=port)
    assert context.address_info["metrics_export_port"] == port
    assert ray.nodes()[0]["MetricsExportPort"] == port
    Gauge("temperature").set(21.5)
    assert scrape(port)[("ray_temperature", labels())] == 21.5
    ray.shutdown()
    with socket.socket() as s:  # the endpoint is gone with the runtime
        assert s.connect_ex(("127.0.0.1", port)) != 0
    ray.init(num_cpus=1)


def test_the_machines_node_metrics_are_served_beside_them_as_ray_labels_them(ray, monkeypatch,
                                                                             tmp_path):
    # NeMo-RL's GPU monitor scrapes ray_node_gpus_utilization / gram_used (MB) / mem_used /
    # mem_total (bytes) from every node's MetricsExportPort, matching GpuIndex and GpuDeviceName.
    # The labels are those Ray 2.60's agent gives (scraped from it: ip, SessionName, IsHeadNode,
    # RayNodeType, Version; it adds OpenTelemetry's otel_scope_* too).
    # This machine has no GPU: nvidia-smi is a stand-in script here (FAKE_NVIDIA_SMI, the one
    # part that cannot run here), printing what the real one prints for the query it is given.
    import os
    import stat

    import psutil

    fake = tmp_path / "nvidia-smi"
    fake.write_text('#!/bin/sh\n'
                    'case "$1" in --query-gpu=index,name,utilization.gpu,memory.used,memory.total) ;;\n'
                    '  *) exit 2 ;; esac\n'
                    'echo "0, NVIDIA H100 80GB HBM3, 75, 1024, 81559"\n'
                    'echo "1, NVIDIA H100 80GB HBM3, [N/A], 0, 81559"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    node = ray.nodes()[0]
    ip = node["NodeManagerAddress"]
    text = urllib.request.urlopen(f"http://127.0.0.1:{node['MetricsExportPort']}/metrics",
                                  timeout=30).read().decode()
    found = {s.name: s for family in text_string_to_metric_families(text) for s in family.samples
             if s.name.startswith("ray_node_")}
    for name in ("cpu_utilization", "cpu_count", "mem_used", "mem_available", "mem_total",
                 "mem_shared_bytes", "disk_usage", "disk_free", "network_sent", "network_received"):
        sample = found["ray_node_" + name]
        assert {k: v for k, v in sample.labels.items() if k != "SessionName"} == {
            "ip": ip, "IsHeadNode": "true", "RayNodeType": "head", "Version": "2.60.0"}, name
        assert sample.labels["SessionName"].startswith("session_")
    total = found["ray_node_mem_total"].value
    assert 0 < total <= psutil.virtual_memory().total
    assert 0 < found["ray_node_mem_used"].value <= total
    assert found["ray_node_mem_used"].value + found["ray_node_mem_available"].value == total
    gpus = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if "GpuIndex" in s.labels:
                assert s.labels["GpuDeviceName"] == "NVIDIA H100 80GB HBM3" and s.labels["ip"] == ip
                gpus[(s.labels["GpuIndex"], s.name)] = s.value
    assert gpus == {("0", "ray_node_gpus_available"): 1.0, ("1", "ray_node_gpus_available"): 1.0,
                    ("0", "ray_node_gpus_utilization"): 75.0, ("1", "ray_node_gpus_utilization"): 0.0,
                    ("0", "ray_node_gram_used"): 1024.0, ("1", "ray_node_gram_used"): 0.0,
                    ("0", "ray_node_gram_available"): 80535.0,
                    ("1", "ray_node_gram_available"): 81559.0}


def test_metric_arguments_are_checked_as_in_ray():
    from ray_adapter.ray.util.metrics import Counter, Gauge, Histogram

    with pytest.raises(ValueError, match="Empty name is not allowed"):
        Counter("")
    with pytest.raises(TypeError, match="tag_keys should be a tuple type, got: <class 'list'>"):
        Counter("c", tag_keys=["a"])
    with pytest.raises(TypeError, match="Tag keys must be str, got <class 'int'>."):
        Counter("c", tag_keys=(1,))
    with pytest.raises(ValueError, match="boundaries argument should be provided"):
        Histogram("h")
    with pytest.raises(ValueError, match=r"Invalid `boundaries` argument at index 1, \[1, 0\]"):
        Histogram("h", boundaries=[1, 0])
    counter = Counter("c", tag_keys=("a",))
    with pytest.raises(ValueError, match="Unrecognized tag key b."):
        counter.set_default_tags({"b": "x"})
    with pytest.raises(TypeError, match="Tag values must be str, got <class 'int'>."):
        counter.set_default_tags({"a": 1})
    assert counter.set_default_tags({"a": "x"}) is counter
    with pytest.raises(ValueError, match="value must be >0, got 0"):
        counter.inc(0)
    with pytest.raises(TypeError, match="value must be int or float, got <class 'str'>."):
        counter.inc("1")
    with pytest.raises(ValueError, match="Missing value for tag key\\(s\\): a,b."):
        Gauge("g", tag_keys=("a", "b")).set(1)
    Gauge("g").set(None)  # a no-op, as in Ray
    assert counter.info == {"name": "c", "description": "", "tag_keys": ("a",), "default_tags": {"a": "x"}}
    assert Histogram("h", boundaries=[1.0]).info["boundaries"] == [1.0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Counter("9bad").inc()  # discarded with a warning, as in Ray
    assert any("Invalid metric name: 9bad" in str(w.message) for w in caught)
