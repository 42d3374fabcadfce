"""The embedded backend's cluster surface: nodes, resources, placement groups, the State API.

Mixed into :class:`~ray_adapter.core.embedded.backend.EmbeddedBackend`; every method delegates
to a component (the scheduler, :mod:`.nodes`, :mod:`.placement`, :mod:`.task_events`) and builds
the neutral records of :class:`~ray_adapter.core.interface.RuntimeCore`. Stateless itself.
"""
from ray_adapter.core import serialization
from ray_adapter.core.embedded.actors import creation_task_id
from ray_adapter.core.embedded.nodes import describe
from ray_adapter.core.embedded.pool import WorkerState
from ray_adapter.core.interface import CallContext


class ClusterStateMixin:
    """nodes(), resources, context(), placement groups, add/remove node, state()."""

    # -- nodes and resources -----------------------------------------------------------------
    def nodes(self):
        return self.node_manager.describe_all()

    def cluster_resources(self):
        return self.scheduler.total()

    def available_resources(self):
        return self.scheduler.available()

    def resources_per_node(self, which):
        return self.scheduler.per_node(which)

    def add_node(self, spec):
        self._check_started()
        return self.node_manager.add(spec)

    def remove_node(self, node_id):
        self._check_started()
        self.node_manager.remove(node_id)

    def context(self):
        return CallContext(job_id=self.job_id, node_id=self.node_id, worker_id=self.driver_worker_id,
                           namespace=self.namespace, is_driver=True, task_id=self.driver_task_id,
                           runtime_env=self.job_runtime_env, node_ip_address=self.head_ip,
                           gcs_address=self.address)

    # -- placement groups --------------------------------------------------------------------
    def create_placement_group(self, bundles, strategy, name, lifetime, label_selectors=None,
                               _creator_actor=None):
        self._check_started()
        return self.groups.create(bundles, strategy, name, lifetime, label_selectors,
                                  creator_actor=_creator_actor)

    def remove_placement_group(self, placement_group_id):
        self._check_started()
        self.groups.remove(placement_group_id)

    def placement_group_table(self, placement_group_id):
        self._check_started()
        return self.groups.table(placement_group_id)

    def wait_placement_group(self, placement_group_id, timeout):
        self._check_started()
        return self.groups.wait(placement_group_id, timeout)

    def placement_group_ready(self, placement_group_id, value):
        self._check_started()
        return self.groups.ready(placement_group_id, serialization.dumps(value))

    def placement_group_ready_serialized(self, placement_group_id, data):
        """:meth:`placement_group_ready` with the value already serialized (a worker's)."""
        self._check_started()
        return self.groups.ready(placement_group_id, data)

    # -- the State API -----------------------------------------------------------------------
    def state(self, kind):
        self._check_started()
        if kind == "tasks":
            return self.events.records()
        if kind == "nodes":
            return [describe(n) for n in self.scheduler.nodes.values()]
        if kind == "placement_groups":
            return self.groups.table(None)
        if kind == "actors":
            return self._actor_states()
        if kind == "workers":
            return self._worker_states()
        if kind == "objects":
            return self._object_states()
        raise ValueError(f"unknown state kind {kind!r}")

    def _object_states(self):
        """One record per object the driver's table holds (it owns every object): a sealed
        one's task FINISHED (a failed one's too, as Ray reports it), a pending one's its
        producing task's state as the owner sees it (SUBMITTED_TO_WORKER once it runs)."""
        objects = self.objects.snapshot()
        producing = {}
        if any(producer is not None for *_, producer in objects):
            producing = {r["task_id"]: r["state"] for r in self.events.records()}
        head = self.scheduler.head
        out = []
        for oid, ready, is_error, nbytes, pinned, producer in objects:
            if ready:  # as Ray's owner reports it: FINISHED, also for a failed task's result
                status = "FINISHED"
            else:  # the producing task's state as its owner sees it: a running one was submitted
                status = producing.get(producer.hex(), "PENDING_ARGS_AVAIL") if producer else "NIL"
                if status == "RUNNING":
                    status = "SUBMITTED_TO_WORKER"
            out.append({"object_id": oid.hex(), "object_size": nbytes, "task_status": status,
                        "attempt_number": 1,
                        "reference_type": "PINNED_IN_MEMORY" if pinned else "LOCAL_REFERENCE",
                        "call_site": "disabled", "type": "DRIVER", "pid": self._pid, "ip": head.ip})
        return out

    def _actor_states(self):
        out = []
        for actor, worker, grant in self.actors.records():
            o = actor.options
            group = getattr(o.scheduling, "group_id", None)
            death = actor.death
            out.append({
                "actor_id": actor.actor_id.hex(), "class_name": o.class_name,
                "state": actor.state.value, "job_id": self.job_id.hex(), "name": o.name or "",
                "node_id": worker.node.hex if worker is not None else None,
                "pid": worker.pid if worker is not None else None,
                "ray_namespace": o.namespace, "serialized_runtime_env": None,
                "required_resources": dict(o.resources),
                "death_cause": {"reason": death.cause.value} if death is not None else None,
                "is_detached": o.detached, "placement_group_id": group.hex() if group else None,
                "repr_name": "", "num_restarts": actor.num_restarts,
                "num_restarts_due_to_lineage_reconstruction": 0,
                "creation_task_id": creation_task_id(actor.actor_id).hex()})
        return out

    def _worker_states(self):
        head = self.scheduler.head
        out = [{"worker_id": self.driver_worker_id.hex(), "is_alive": True, "worker_type": "DRIVER",
                "exit_type": None, "node_id": head.hex, "ip": head.ip, "pid": self._pid,
                "exit_detail": None}]
        for w in self.pool.live_workers():
            out.append({"worker_id": w.worker_id.hex(), "is_alive": w.state is not WorkerState.DEAD,
                        "worker_type": "WORKER", "exit_type": None, "node_id": w.node.hex,
                        "ip": w.node.ip, "pid": w.pid, "exit_detail": None})
        return out
