"""The ``ray.cluster_utils.Cluster`` objects of this process, by address: what ``ray.init`` looks
up to start the embedded runtime with a cluster's virtual nodes.

Below both its users (:mod:`ray_adapter.ray.cluster_utils` registers clusters, the session's
``init`` reads them and ``shutdown`` marks them disconnected), so neither imports the other.
Thread-safety: ``_lock`` guards the table; a cluster's own fields are set by its methods.
"""
import threading

_lock = threading.Lock()
_clusters = {}  # address -> Cluster (connected or not)


def register(address, cluster):
    """``cluster`` (a ``ray.cluster_utils.Cluster``) answers ``ray.init(address=address)``."""
    with _lock:
        _clusters[address] = cluster


def unregister(address):
    with _lock:
        _clusters.pop(address, None)


def init_options_for(address):
    """``(head NodeSpec, [worker NodeSpec])`` of the Cluster at ``address`` (``"auto"``: the
    newest of this process with a head node), or None; marks it connected."""
    with _lock:
        if address == "auto":
            candidates = [c for c in _clusters.values() if c.head_node is not None]
            cluster = candidates[-1] if candidates else None
        else:
            cluster = _clusters.get(address)
    if cluster is None or cluster.head_node is None:
        return None
    cluster.connected = True
    workers = sorted(cluster.worker_nodes, key=lambda n: int(n.node_ip_address.rsplit(".", 1)[-1]))
    return cluster.head_node.spec, [n.spec for n in workers]


def disconnected():
    """``ray.shutdown()`` ended the runtime: no cluster is connected any more."""
    with _lock:
        clusters = list(_clusters.values())
    for cluster in clusters:
        cluster.connected = False
