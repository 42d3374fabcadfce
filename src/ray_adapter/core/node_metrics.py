"""The machine's own metrics (``ray_node_*``), served beside the application metrics at the
metrics export port, as Ray's reporter agent serves them for each node.

Frameworks read these: NeMo-RL's GPU monitor scrapes every node's
``http://<NodeManagerAddress>:<MetricsExportPort>/metrics`` for ``ray_node_gpus_utilization``,
``ray_node_gram_used``, ``ray_node_mem_used`` and ``ray_node_mem_total``; Ray's dashboards plot
the rest. Each series is labelled as Ray labels it: ``ip``, ``SessionName``, ``IsHeadNode``,
``RayNodeType`` and ``Version``, GPU series also ``GpuIndex`` and ``GpuDeviceName``.

Units, as Ray's: memory and disk in bytes, GPU memory (``gram``) in megabytes, utilizations in
percent, disk and network counters in bytes (or operations) since boot.

GPUs are read with ``nvidia-smi`` (as the machine has them, not only the ones this runtime
hands out); a machine without it has no GPU series, as Ray's agent reports none for a node
without GPUs.

Threads: :meth:`NodeMetrics.collect` runs on the scrape's handler thread, outside every lock
(it reads the machine, and may run ``nvidia-smi``, up to :data:`GPU_QUERY_TIMEOUT` seconds);
its only state, psutil's CPU-percent baseline, is psutil's own.
"""
import datetime
import os
import shutil
import subprocess

#: Longest a scrape waits for ``nvidia-smi`` (seconds); on expiry the GPU series are left out.
GPU_QUERY_TIMEOUT = 5.0
_GPU_FIELDS = "index,name,utilization.gpu,memory.used,memory.total"
_LABELS = ("ip", "SessionName", "IsHeadNode", "RayNodeType", "Version")
_GPU_LABELS = _LABELS + ("GpuIndex", "GpuDeviceName")


def session_name(now=None, pid=None):
    """A session name in Ray's form: ``session_<YYYY-mm-dd_HH-MM-SS>_<microseconds>_<pid>``."""
    now = now or datetime.datetime.now()
    return f"session_{now:%Y-%m-%d_%H-%M-%S}_{now.microsecond}_{pid or os.getpid()}"


def query_gpus(timeout=GPU_QUERY_TIMEOUT):
    """``[(index, name, utilization percent, memory used MB, memory total MB)]`` of this
    machine's NVIDIA GPUs, from ``nvidia-smi``; ``[]`` without it, or when it fails."""
    command = shutil.which("nvidia-smi")
    if command is None:
        return []
    try:
        out = subprocess.run([command, f"--query-gpu={_GPU_FIELDS}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=timeout, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 5:
            continue
        index, name, util, used, total = fields
        gpus.append((index, name, _number(util), _number(used), _number(total)))
    return gpus


def _number(text):
    try:
        return float(text)
    except ValueError:  # "[N/A]", "[Not Supported]"
        return 0.0


class NodeMetrics:
    """A prometheus_client collector of this machine's ``ray_node_*`` metrics, for the node at
    ``ip`` (the head: ``IsHeadNode="true"``) of session ``session``."""

    def __init__(self, ip, session, version, gpu_query=query_gpus):
        self._labels = [ip, session, "true", "head", version]
        self._gpu_query = gpu_query
        import psutil

        self._psutil = psutil
        psutil.cpu_percent(None)  # the baseline the first scrape's utilization is measured from

    def collect(self):
        """prometheus_client's Collector protocol: one gauge family per metric."""
        from prometheus_client.core import GaugeMetricFamily

        psutil = self._psutil
        values = []  # (name, description, value)
        memory = psutil.virtual_memory()
        cgroup = cgroup_memory()
        # As Ray: in a container, the container's use (less its inactive page cache) against its
        # limit (the machine's memory when it has none); elsewhere the machine's.
        total = min(memory.total, cgroup[1]) if cgroup and cgroup[1] else memory.total
        used = max(0, min(cgroup[0] if cgroup else memory.used, total))
        values += [
            ("node_cpu_utilization", "Total CPU usage on a ray node", psutil.cpu_percent(None)),
            ("node_cpu_count", "Total CPUs available on a ray node", psutil.cpu_count() or 0),
            ("node_mem_used", "Memory usage on a ray node", used),
            ("node_mem_available", "Memory available on a ray node", total - used),
            ("node_mem_total", "Total memory on a ray node", total),
            ("node_mem_used_host", "Host memory usage on a ray node", memory.used),
            ("node_mem_total_host", "Total host memory on a ray node", memory.total),
            ("node_cgroup_mem_used", "Container memory usage on a ray node", used),
            ("node_cgroup_mem_total", "Container memory limit on a ray node", total),
            ("node_mem_shared_bytes", "Total shared memory usage on a ray node",
             getattr(memory, "shared", 0)),
        ]
        try:
            disk = psutil.disk_usage("/")
        except OSError:
            disk = None
        if disk is not None:
            values += [
                ("node_disk_usage", "Total disk usage (bytes) on a ray node", disk.used),
                ("node_disk_free", "Total disk free (bytes) on a ray node", disk.free),
                ("node_disk_utilization_percentage",
                 "Total disk utilization (percentage) on a ray node", disk.percent),
            ]
        io = _or_none(psutil.disk_io_counters)
        if io is not None:
            values += [
                ("node_disk_io_read", "Total read from disk", io.read_bytes),
                ("node_disk_io_write", "Total written to disk", io.write_bytes),
                ("node_disk_io_read_count", "Total read ops from disk", io.read_count),
                ("node_disk_io_write_count", "Total write ops to disk", io.write_count),
            ]
        net = _or_none(psutil.net_io_counters)
        if net is not None:
            values += [
                ("node_network_sent", "Total network sent", net.bytes_sent),
                ("node_network_received", "Total network received", net.bytes_recv),
            ]
        for name, description, value in values:
            family = GaugeMetricFamily("ray_" + name, description, labels=_LABELS)
            family.add_metric(self._labels, float(value))
            yield family
        gpus = self._gpu_query()
        if not gpus:
            return
        available = GaugeMetricFamily("ray_node_gpus_available",
                                      "Total GPUs available on a ray node", labels=_GPU_LABELS)
        utilization = GaugeMetricFamily("ray_node_gpus_utilization", "Total GPUs usage on a ray node",
                                        labels=_GPU_LABELS)
        used = GaugeMetricFamily("ray_node_gram_used", "Total GPU RAM usage on a ray node",
                                 labels=_GPU_LABELS)
        free = GaugeMetricFamily("ray_node_gram_available", "Total GPU RAM available on a ray node",
                                 labels=_GPU_LABELS)
        for index, name, util, mem_used, mem_total in gpus:
            labels = self._labels + [index, name]
            available.add_metric(labels, 1.0)
            utilization.add_metric(labels, util)
            used.add_metric(labels, mem_used)
            free.add_metric(labels, max(mem_total - mem_used, 0.0))
        yield from (available, utilization, used, free)


def cgroup_memory():
    """``(used bytes, limit bytes or None)`` of the cgroup this process runs in (v2, else v1),
    ``used`` less its inactive page cache, as Ray counts it; None outside a memory cgroup."""
    for current, stat, limit, inactive in (
            ("/sys/fs/cgroup/memory.current", "/sys/fs/cgroup/memory.stat",
             "/sys/fs/cgroup/memory.max", "inactive_file"),
            ("/sys/fs/cgroup/memory/memory.usage_in_bytes", "/sys/fs/cgroup/memory/memory.stat",
             "/sys/fs/cgroup/memory/memory.limit_in_bytes", "total_inactive_file")):
        try:
            with open(current) as f:
                usage = int(f.read())
            with open(stat) as f:
                fields = dict(line.split() for line in f if line.count(" ") == 1)
        except (OSError, ValueError):
            continue
        try:
            with open(limit) as f:
                cap = f.read().strip()
            cap = None if cap == "max" else int(cap)
        except (OSError, ValueError):
            cap = None
        return max(0, usage - int(fields.get(inactive, 0))), cap
    return None


def _or_none(read):
    try:
        return read()
    except (OSError, RuntimeError):
        return None
