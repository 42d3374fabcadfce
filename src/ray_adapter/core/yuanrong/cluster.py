"""The yuanrong backend's view of the cluster: nodes and resources from ``yr.resources()``
(local mode: the one local node, less what the adapter granted), the caller's context, and
the State API's records.

Units: yr's cpu millicores become CPUs, memory MB becomes bytes, ``GPU/<model>/count`` becomes
GPU. Thread-safety: no state of its own besides the node's address, computed once (a race
computes it twice, harmlessly); it reads the other components through their own locks.
"""
import os
import socket
import time

from ray_adapter.core.interface import CallContext
from ray_adapter.core.job_records import command_line, driver_job_record
from ray_adapter.core.yuanrong import shell


def local_node(node_id, num_cpus, custom_resources, num_gpus=None, num_npus=None):
    """The node dict of this machine (local mode's one node): resources in Ray's units."""
    total = {"CPU": num_cpus, "memory": float(_machine_memory()),
             "object_store_memory": float(_machine_memory() * 3 // 7),
             "node:127.0.0.1": 1.0, "node:__internal_head__": 1.0}
    total.update({k: float(v) for k, v in custom_resources.items()})
    if num_gpus:
        total["GPU"] = float(num_gpus)
    if num_npus:
        total["NPU"] = float(num_npus)
    return {"node_id": node_id.hex(), "alive": True, "address": "127.0.0.1",
            "hostname": socket.gethostname(), "resources_total": total,
            "resources_available": dict(total), "labels": {}}


class ClusterView:
    """nodes(), cluster_resources(), available_resources(), context(), state records.

    Collaborators: ``yr``, ``node`` (local mode's node dict, see :func:`local_node`),
    ``objects``, ``actors``, ``groups`` (the object, actor and resource group tables),
    ``scheduler`` (local mode's grants, or None), ``job_env``; ids of the job, node and
    driver worker, the job's namespace and the runtime's address."""

    def __init__(self, yr, node, *, objects, actors, groups, scheduler, job_env, job_id,
                 node_id, worker_id, namespace, address):
        self.yr = yr
        self.local_mode = scheduler is not None
        self._node = node
        self.objects = objects
        self.actors = actors
        self.groups = groups
        self.scheduler = scheduler
        self.job_env = job_env
        self.job_id, self.node_id, self.worker_id = job_id, node_id, worker_id
        self.namespace = namespace
        self.address = address
        self._ip = None
        self._job_started = time.time()

    def object_store_stats(self):
        """Objects this driver's table keeps; yr does not report the bytes of its store."""
        return {"num_objects": len(self.objects), "bytes_used": 0, "bytes_avail": 0}

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

    def nodes(self):
        """Ray's node dicts (``ray.nodes()``)."""
        return self._yr_nodes() or [dict(self._node, resources_available=dict(self._node["resources_available"]))]

    def cluster_resources(self):
        out = {}
        for node in self.nodes():
            for k, v in node["resources_total"].items():
                out[k] = out.get(k, 0.0) + v
        if self.local_mode:
            out.update(self.groups.resources_local("total"))
        return out

    def available_resources(self):
        out = {}
        for node in self.nodes():
            for k, v in node["resources_available"].items():
                out[k] = out.get(k, 0.0) + v
        if self.local_mode:
            for k, v in self._reserved_local().items():  # what tasks, actors and groups hold
                if k in out:
                    out[k] -= v
            out.update(self.groups.resources_local("available"))
        return {k: v for k, v in out.items() if v > 1e-9}  # nothing free: omitted, as in Ray

    def _reserved_local(self):
        scheduler = self.scheduler
        if scheduler is None:
            return {}
        with scheduler._lock:
            res = scheduler.head.resources
            total, free = res.total_dict(), res.amounts(res.available)
        return {k: total[k] - free.get(k, 0.0) for k in total if total[k] - free.get(k, 0.0) > 0}

    def resources_per_node(self, which):
        """``{node id: {resource: amount}}`` from yr.resources() (local mode: the one node)."""
        if self.local_mode:
            return {self.node_id.hex(): self.cluster_resources() if which == "total"
                    else self.available_resources()}
        key = "resources_total" if which == "total" else "resources_available"
        return {n["node_id"]: {k: v for k, v in n[key].items() if which == "total" or v > 0}
                for n in self.nodes() if n["alive"]}

    def context(self):
        task_id, task_name, actor_id, actor_name, resources = shell.current_call.get()
        in_call = task_id is not None or actor_id is not None
        info = self.actors.info(actor_id) if actor_id is not None else None
        meta = info.handle_meta if info is not None else None
        group = shell.current_group.get()
        host = shell.current_shell.get()
        devices = (shell.current_devices.get() or {}) if in_call else {}
        return CallContext(
            job_id=self.job_id, node_id=self.node_id, worker_id=self.worker_id,
            namespace=self.namespace, is_driver=not in_call,
            task_id=task_id if in_call else None, actor_id=actor_id, task_name=task_name,
            function_name=shell.current_function.get() if in_call else "",
            actor_name=actor_name,
            assigned_resources={k: float(v) for k, v in resources.items()} if in_call else {},
            gpu_ids=list(devices.get("GPU", ())),
            accelerator_ids={k: list(v) for k, v in devices.items()},
            actor_handle_meta=meta, runtime_env=self.job_env.runtime_env, node_ip_address=self._node_ip(),
            placement_group_id=group[0] if group else None,
            capture_child_tasks=bool(group and group[1]),
            gcs_address=self.address,
            is_canceled=shell.cancel_requested(task_id),
            actor_is_async=host is not None and host.loops is not None,
            was_restarted=host is not None and host.restart_count > 0)

    def state(self, kind):
        """State API records from what this backend knows (no task events are recorded)."""
        if kind == "nodes":
            return [dict(n, is_head=self.local_mode or i == 0) for i, n in enumerate(self.nodes())]
        if kind == "placement_groups":
            return self.groups.table(None)
        if kind == "workers":
            return [{"worker_id": self.worker_id.hex(), "is_alive": True, "worker_type": "DRIVER",
                     "exit_type": None, "node_id": self.node_id.hex(), "ip": self._node_ip(),
                     "pid": os.getpid(), "exit_detail": None,
                     "start_time_ms": int(self._job_started * 1000), "end_time_ms": 0}]
        if kind == "actors":
            actors = self.actors.records()
            return [{"actor_id": a.actor_id.hex(), "class_name": a.info.class_name,
                     "state": "DEAD" if a.dead else "ALIVE", "job_id": self.job_id.hex(),
                     "name": a.info.name or "", "node_id": self.node_id.hex() if self.local_mode else None,
                     "pid": os.getpid() if self.local_mode else None, "ray_namespace": a.info.namespace,
                     "required_resources": {k: float(v) for k, v in a.resources.items()}, "is_detached": a.detached,
                     "death_cause": a.death.facts() if a.death is not None else None,
                     "num_restarts": 0, "num_restarts_due_to_lineage_reconstruction": 0,
                     "num_restarts_due_to_node_preemption": 0,
                     "times_ms": [None if t is None else int(t * 1000) for t in a.times],
                     "node_ip": self._node_ip() if self.local_mode else None} for a in actors]
        if kind == "objects":
            return self.objects.states(self._node_ip())
        if kind == "jobs":  # this driver's: the others of a cluster are its job server's
            job = driver_job_record(self.job_id.hex(), os.getpid(), self._node_ip(),
                                    command_line(os.getpid()))
            return [dict(job, start_time=int(self._job_started * 1000))]
        raise NotImplementedError(f"the yuanrong backend records no {kind}")

    def _node_ip(self):
        if self.local_mode:
            return "127.0.0.1"
        if self._ip is None:
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
