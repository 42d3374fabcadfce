"""The yuanrong backend's view of the cluster: nodes and resources from ``yr.resources()``,
the caller's context.

Mixed into :class:`~ray_adapter.core.yuanrong.backend.YuanrongBackend`. Units: yr's cpu
millicores become CPUs, memory MB becomes bytes, ``GPU/<model>/count`` becomes GPU.
"""
import socket

from ray_adapter.core.interface import CallContext
from ray_adapter.core.yuanrong import shell


class ClusterMixin:
    """nodes(), cluster_resources(), available_resources(), context(), store stats."""

    def object_store_stats(self):
        """Objects this driver's table keeps; yr does not report the bytes of its store."""
        with self._lock:
            count = len(self._objects)
        return {"num_objects": count, "bytes_used": 0, "bytes_avail": 0}

    def _yr_nodes(self):
        """``yr.resources()`` as the core's node dicts; None where yr cannot list nodes."""
        if self.local_mode:
            return None
        try:
            raw = self.yr.resources()
        except Exception:
            return None
        nodes = []
        for entry in raw or []:
            nodes.append({
                "node_id": str(entry.get("id", "")), "alive": entry.get("status", 0) in (0, "healthy", "ALIVE"),
                "address": entry.get("labels", {}).get("ip", entry.get("id", "")),
                "hostname": entry.get("labels", {}).get("hostname", ""),
                "resources_total": _from_yr_resources(entry.get("capacity", {})),
                "resources_available": _from_yr_resources(entry.get("allocatable", {})),
                "labels": dict(entry.get("labels", {})),
            })
        return nodes

    def _local_node(self):
        total = {"CPU": self.num_cpus, "memory": float(_machine_memory()),
                 "object_store_memory": float(_machine_memory() * 3 // 7),
                 "node:127.0.0.1": 1.0, "node:__internal_head__": 1.0}
        total.update({k: float(v) for k, v in self.custom_resources.items()})
        return {"node_id": self.node_id.hex(), "alive": True, "address": "127.0.0.1",
                "hostname": socket.gethostname(), "resources_total": total,
                "resources_available": dict(total), "labels": {}}

    def nodes(self):
        return self._yr_nodes() or [self._local_node()]

    def cluster_resources(self):
        out = {}
        for node in self.nodes():
            for k, v in node["resources_total"].items():
                out[k] = out.get(k, 0.0) + v
        return out

    def available_resources(self):
        out = {}
        for node in self.nodes():
            for k, v in node["resources_available"].items():
                out[k] = out.get(k, 0.0) + v
        if self.local_mode:
            with self._lock:
                for k, v in self._held.items():
                    if k in out:
                        out[k] -= v
        return {k: v for k, v in out.items() if v > 1e-9}  # nothing free: omitted, as in Ray

    def context(self):
        task_id, task_name, actor_id, actor_name, resources = shell.current_call.get()
        in_call = task_id is not None or actor_id is not None
        meta = None
        if actor_id is not None and actor_id in self._actors:
            meta = self._actors[actor_id].info.handle_meta
        return CallContext(
            job_id=self.job_id, node_id=self.node_id, worker_id=self.worker_id,
            namespace=self.namespace, is_driver=not in_call,
            task_id=task_id if in_call else None, actor_id=actor_id, task_name=task_name,
            actor_name=actor_name,
            assigned_resources={k: float(v) for k, v in resources.items()} if in_call else {},
            actor_handle_meta=meta, runtime_env=self.runtime_env, node_ip_address=self._node_ip())

    def _node_ip(self):
        if self.local_mode:
            return "127.0.0.1"
        if getattr(self, "_ip", None) is None:
            try:
                self._ip = str(self.yr.get_node_ip_address())
            except Exception:  # not reachable from this process: the local address
                self._ip = socket.gethostbyname(socket.gethostname())
        return self._ip


def _from_yr_resources(resources):
    """yr resource amounts -> Ray's: cpu millicores -> CPUs, memory MB -> bytes, GPU/x/count -> GPU."""
    out = {}
    for key, value in (resources or {}).items():
        k = str(key)
        if k.lower() == "cpu":
            out["CPU"] = out.get("CPU", 0.0) + float(value) / 1000
        elif k.lower() == "memory":
            out["memory"] = float(value) * 1024 * 1024
        elif k.startswith("GPU/") or k.startswith("NPU/"):
            kind = k.split("/", 1)[0]
            out[kind] = out.get(kind, 0.0) + float(value)
        else:
            out[k] = float(value)
    return out


def _machine_memory():
    try:
        import psutil

        return int(psutil.virtual_memory().available * 0.7)
    except Exception:
        return 8 * 1024 ** 3
