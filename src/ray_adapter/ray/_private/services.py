"""``ray._private.services``: the one name workloads import from it, ``get_node_ip_address``; its other
names launch or find Ray's own processes and are gaps (see the compat matrix)."""
import sys

from ray_adapter import gaps


def get_node_ip_address(address="8.8.8.8:53"):
    """The IP address of the node the caller runs on (mirrors Ray's): inside the runtime the
    node's address (the head is ``127.0.0.1``; virtual nodes have their own loopback address);
    before ``ray.init()`` this machine's address as seen on the route to ``address`` (no packet
    is sent), falling back to ``127.0.0.1``."""
    # Through the module attribute, as Ray's reads ``ray._private.worker._global_node``.
    node = getattr(sys.modules["ray_adapter.ray._private"].worker, "_global_node", None)
    if node is not None:
        return node.node_ip_address
    host, _, port = address.rpartition(":")
    import socket  # lazy: keeps `import ray` fast

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, int(port)))
            return s.getsockname()[0]
    except (OSError, ValueError):
        return "127.0.0.1"



__getattr__ = gaps.module_getattr("ray._private.services")
