"""Nodes of the embedded runtime: the head node ``ray.init()`` starts, and virtual nodes.

Virtual nodes are logical nodes on this machine, each with its own node id, IP label
(127.0.0.2, 127.0.0.3, ...), resources and labels, so multi-node placement is real here
(``ray.cluster_utils.Cluster``). Worker processes belong to a node: the pool starts them per
node and each worker's ``Init`` names its node, so code running there reports that node.

Removing a node is a node failure: the scheduler stops using it (its placement-group bundles
are rescheduled, demands with hard affinity to it fail), then every worker process of the
node is killed; the usual exit paths retry its tasks and restart its actors elsewhere, or fail
them with NodeDied / ActorDied(NODE_DIED).

Thread-safety: ``Nodes._lock`` (a leaf lock) guards the IP counter; the scheduler owns the
node table; processes are killed after every lock is released.
"""
import os
import socket
import threading
import time

from ray_adapter.core import ids
from ray_adapter.core.embedded.resources import (Node, check_declared_gpus, detect_accelerators,
                                                 visible_device_ids)

HEAD_IP = "127.0.0.1"


def default_memory():
    """70% of the memory available now (bytes), as Ray's default ``memory`` resource."""
    return int(_available_memory() * 0.7)


def _available_memory():
    """Bytes of memory available: Linux's ``MemAvailable`` (what psutil reports there, read
    without importing psutil on ``ray.init``'s path), else psutil's figure, else 8 GiB."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil

        return psutil.virtual_memory().available
    except Exception:  # psutil missing or unreadable /proc
        return 8 * 1024 ** 3


def node_total(spec, ip, head, detect=False):
    """The resources of a node for a NodeSpec/InitOptions-like ``spec`` (as Ray's defaults:
    the machine's CPUs, detected accelerators on the head, 70% of free memory)."""
    cpus = spec.num_cpus if spec.num_cpus is not None else (os.cpu_count() or 1)
    total = {"CPU": float(cpus)}
    accel = detect_accelerators() if detect else {}
    if spec.num_gpus is not None:
        if detect:  # this machine's head: its CUDA_VISIBLE_DEVICES bounds what it declares
            check_declared_gpus(spec.num_gpus)
        accel["GPU"] = spec.num_gpus
    total.update({k: float(v) for k, v in accel.items()})
    memory = spec.memory if spec.memory is not None else default_memory()
    total["memory"] = float(memory)
    store = spec.object_store_memory
    total["object_store_memory"] = float(store if store is not None else default_memory() * 3 // 7)
    for k, v in (spec.resources or {}).items():
        total[k] = float(v)
    total[f"node:{ip}"] = 1.0
    if head:
        total["node:__internal_head__"] = 1.0
    return total


def make_head(options):
    """The head node ``ray.init()`` starts, from its InitOptions (resources, labels, node id)."""
    node_id = bytes.fromhex(options.node_id) if options.node_id else ids.random_id(ids.NODE_ID_SIZE)
    node = Node(node_id, HEAD_IP, node_total(options, HEAD_IP, True, True),
                labels=options.labels, hostname=socket.gethostname(),
                device_ids=visible_device_ids(), is_head=True)
    node.start_time = time.time()
    return node


class Nodes:
    """The virtual nodes added to and removed from a running runtime."""

    def __init__(self, *, scheduler, pool):
        """Collaborators: the ``scheduler`` (the nodes' resources) and the worker ``pool``
        (a removed node's workers are killed)."""
        self._scheduler, self._pool = scheduler, pool
        self._lock = threading.Lock()
        self._next_ip = 2

    def add(self, spec):
        """Add a virtual node for ``spec`` (a NodeSpec); returns its record (as ``nodes()``)."""
        with self._lock:
            if spec.ip:
                ip = spec.ip
                last = ip.rsplit(".", 1)[-1]
                if last.isdigit():
                    self._next_ip = max(self._next_ip, int(last) + 1)
            else:
                ip = f"127.0.0.{self._next_ip}"
                self._next_ip += 1
        node_id = bytes.fromhex(spec.node_id) if spec.node_id else ids.random_id(ids.NODE_ID_SIZE)
        node = Node(node_id, ip, node_total(spec, ip, False), labels=spec.labels,
                    hostname=socket.gethostname())
        node.start_time = time.time()
        self._scheduler.run(self._scheduler.add_node(node))
        return describe(node)

    def remove(self, node_hex):
        """Remove a node as a failure would (see the module docstring). Unknown or already
        removed nodes are ignored."""
        node = self._scheduler.by_hex.get(node_hex)
        if node is None or not node.alive:
            return
        failed, granted = self._scheduler.remove_node(node.node_id)
        node.end_time = time.time()
        for worker in self._pool.workers_of(node.node_id):
            worker.kill_group()  # its reader reaps it; the exit paths retry or fail its work
        self._scheduler.run(failed + granted)


def describe_all(scheduler):
    """The core's records of every node the ``scheduler`` knows, removed ones included (as
    ``RuntimeCore.nodes`` and the State API report them)."""
    return [describe(n) for n in scheduler.nodes.values()]


def describe(node):
    """The core's node record (see RuntimeCore.nodes)."""
    return {"node_id": node.hex, "alive": node.alive, "address": node.ip,
            "hostname": node.hostname, "resources_total": node.resources.total_dict(),
            "labels": dict(node.labels), "start_time": node.start_time,
            "end_time": node.end_time, "is_head": node.is_head}
