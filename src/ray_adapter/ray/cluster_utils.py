"""``ray.cluster_utils``: a multi-node cluster on one machine, for tests (mirrors Ray's ``Cluster``).

Real Ray starts one raylet per node. The adapter starts its embedded runtime with virtual nodes:
each node has its own node id, IP label (the head ``127.0.0.1``, then ``127.0.0.2``, ...),
resources and labels, and the worker processes placed on it report that node. The usual test
shape runs unchanged::

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    node = cluster.add_node(num_cpus=2, num_gpus=1, resources={"x": 1}, labels={"zone": "a"})
    ray.init(address=cluster.address)      # or cluster.connect()
    cluster.add_node(num_cpus=2)           # joins the running runtime at once
    cluster.remove_node(node)              # a node failure: what ran there dies
    cluster.shutdown()

Nodes added before ``ray.init`` start with it; ``address`` is only meaningful to ``ray.init`` in
this process. Node defaults are Ray's for ``Cluster.add_node``: 1 CPU, no GPU, 150 MiB of object
store. Needs the embedded runtime (yr has no way to add nodes).
"""
import itertools
import os

from ray_adapter import core as _core
from ray_adapter import gaps
from ray_adapter.core.interface import NodeSpec
from ray_adapter.ray._private import local_clusters as _local_clusters
from ray_adapter.ray._private.core_access import core as _ensure_core
from ray_adapter.ray._private.core_access import translated
from ray_adapter.ray._private.worker import init as _init
from ray_adapter.ray._private.session import shutdown as _shutdown

#: Whether :class:`Cluster` is unavailable on this platform (Ray's flag, True on Windows only;
#: Ray's tests mark cluster tests with it). The adapter runs on Linux, where Cluster works.
cluster_not_supported = os.name == "nt"

_DEFAULTS = {"num_cpus": 1, "num_gpus": 0, "object_store_memory": 150 * 1024 * 1024}
_NODE_KEYS = ("num_cpus", "num_gpus", "memory", "_memory", "object_store_memory", "resources", "labels")
_ports = itertools.count(6380)


class _ClusterNode:
    """A node of a :class:`Cluster` (Ray's ``ray._private.node.Node`` as tests use it):
    ``node_id`` (hex), ``node_ip_address``, ``address`` (the cluster's), ``unique_id``."""

    def __init__(self, cluster, spec, head):
        self._cluster = cluster
        self.spec = spec
        self.head = head
        self.node_id = spec.node_id
        self.node_ip_address = spec.ip
        self.unique_id = f"{spec.ip}:{spec.node_id[:8]}"
        self.node_manager_port = 0

    @property
    def address(self):
        return self._cluster.address

    @property
    def gcs_address(self):
        return self._cluster.address

    def is_head(self):
        return self.head

    def __repr__(self):
        return f"_ClusterNode({self.node_ip_address}, {self.node_id})"


#: Node arguments accepted and ignored, as ``ray.init`` ignores them: Ray's internal tuning
#: knobs and its dashboard (Ray's own test fixtures pass ``_system_config`` to the head).
_IGNORED_KEYS = frozenset({"_system_config", "dashboard_port", "include_dashboard"})


def _spec(node_args, ip):
    unknown = sorted(k for k in node_args if k not in _NODE_KEYS and k not in _IGNORED_KEYS)
    if unknown:
        raise gaps.option_gap_error("ray.cluster_utils.Cluster.add_node", unknown[0],
                                    "Only num_cpus, num_gpus, memory, object_store_memory, "
                                    "resources and labels describe a virtual node.")
    args = dict(_DEFAULTS)
    args.update({k: v for k, v in node_args.items() if v is not None})
    return NodeSpec(num_cpus=args.get("num_cpus"), num_gpus=args.get("num_gpus"),
                    memory=args.get("memory", args.get("_memory")),
                    object_store_memory=args.get("object_store_memory"),
                    resources=dict(args.get("resources") or {}), labels=dict(args.get("labels") or {}),
                    node_id=os.urandom(28).hex(), ip=ip)


class Cluster:
    """A cluster of virtual nodes (mirrors ``ray.cluster_utils.Cluster``)."""

    def __init__(self, initialize_head=False, connect=False, head_node_args=None,
                 shutdown_at_exit=True):
        self.head_node = None
        self.worker_nodes = set()
        self.connected = False
        self._address = f"127.0.0.1:{next(_ports)}"
        self._ips = itertools.count(2)
        self._shutdown_at_exit = shutdown_at_exit
        if not initialize_head and connect:
            raise RuntimeError("Cannot connect to uninitialized cluster.")
        _local_clusters.register(self._address, self)
        if initialize_head:
            self.add_node(**(head_node_args or {}))
            if connect:
                self.connect()

    @property
    def address(self):
        return self._address if self.head_node is not None else None

    @property
    def gcs_address(self):
        return self.address

    def _running(self):
        return self.connected and _core.is_started()

    def connect(self, namespace=None):
        """``ray.init(address=cluster.address)``: start the runtime with this cluster's nodes."""
        assert self.address is not None
        assert not self.connected
        _init(address=self.address, namespace=namespace, ignore_reinit_error=True)

    def add_node(self, wait=True, **node_args):
        """Add a node (the first one is the head); returns its :class:`_ClusterNode`. Keywords:
        ``num_cpus``, ``num_gpus``, ``memory`` (bytes), ``object_store_memory``, ``resources``,
        ``labels`` (``_system_config`` and the dashboard's are accepted and ignored, as
        ``ray.init`` does); another one raises RayAdapterOptionError."""
        if self.head_node is None:
            node = _ClusterNode(self, _spec(node_args, "127.0.0.1"), True)
            self.head_node = node
            return node
        node = _ClusterNode(self, _spec(node_args, f"127.0.0.{next(self._ips)}"), False)
        if self._running():
            with translated:
                _ensure_core().add_node(node.spec)
        self.worker_nodes.add(node)
        return node

    def remove_node(self, node, allow_graceful=True):
        """Remove ``node`` as a node failure would: its worker processes are killed, its
        actors restart elsewhere if they can, its tasks are retried. Removing the head node
        the driver runs on shuts the runtime down and raises ValueError, as in Ray."""
        if node is self.head_node:
            if self._running():
                _shutdown()
                self.connected = False
                raise ValueError(
                    "Removing a node that is connected to this Ray client is not allowed because "
                    "it will break the driver. You can use the get_other_node utility to avoid "
                    "removing a node that the Ray client is connected.")
            self.head_node = None
            return
        self.worker_nodes.discard(node)
        if self._running():
            with translated:
                _ensure_core().remove_node(node.node_id)

    def wait_for_nodes(self, timeout=30):
        """Return once every added node is alive (nodes join at once here); raises
        TimeoutError when the runtime reports a different number of live nodes."""
        if not self._running():
            return
        live = [n for n in _ensure_core().nodes() if n["alive"]]
        if len(live) != len(self.list_all_nodes()):
            raise TimeoutError("Timed out while waiting for nodes to join.")

    def list_all_nodes(self):
        nodes = list(self.worker_nodes)
        return ([self.head_node] if self.head_node is not None else []) + nodes

    def remaining_processes_alive(self):
        return self._running()

    def shutdown(self):
        """Remove every node and stop the runtime this cluster started."""
        for node in list(self.worker_nodes):
            self.remove_node(node)
        if self._running():
            _shutdown()
        self.connected = False
        self.head_node = None
        _local_clusters.unregister(self._address)


__getattr__ = gaps.module_getattr("ray.cluster_utils")
