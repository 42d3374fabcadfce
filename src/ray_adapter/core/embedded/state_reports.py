"""The State API's records of the embedded runtime (``ray.util.state``'s ``list_*``): tasks,
nodes, placement groups, actors, workers and objects, built from what each component holds.

Stateless: every call reads its collaborators' snapshots (each taken under that component's own
lock) and builds plain dicts; any thread may call.
"""
import os
import time

from ray_adapter.core.embedded.actors import creation_task_id
from ray_adapter.core.embedded.nodes import describe_all
from ray_adapter.core.embedded.pool import WorkerState


#: An object id's return index 1 (4 bytes, little-endian, as Ray lays it out).
_FIRST_RETURN = (1).to_bytes(4, "little")


class StateReports:
    """``state(kind)`` for the State API (mirrors the records of Ray's ``ray.util.state``)."""

    def __init__(self, *, job_id, driver_worker_id, driver_pid, objects, scheduler, events,
                 groups, actors, pool, drivers):
        """Collaborators: the job and driver it reports (``job_id``, ``driver_worker_id``,
        ``driver_pid``; None: a headless runtime, no driver of its own), and the components
        whose records it reads: the ``objects`` table, the ``scheduler`` (nodes), task
        ``events``, placement ``groups``, ``actors``, the worker ``pool`` and the attached
        ``drivers`` (whose ``job_records`` list the jobs)."""
        self.job_id, self.driver_worker_id, self._pid = job_id, driver_worker_id, driver_pid
        self.objects, self.scheduler, self.events = objects, scheduler, events
        self.groups, self.actors, self.pool, self.drivers = groups, actors, pool, drivers
        self._started = time.time()  # this process's driver's start (its job's)

    def state(self, kind):
        """Records of ``kind`` (tasks, nodes, placement_groups, actors, workers, objects,
        jobs), as dicts with the fields of Ray's State API (jobs: Ray's ``JobDetails``
        fields); raises ValueError for another kind."""
        if kind == "jobs":
            return self.drivers.job_records.list()
        if kind == "tasks":
            return self.events.records()
        if kind == "nodes":
            return describe_all(self.scheduler)
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
        """One record per object the table holds, owned by the attached driver it was lent to at
        creation, else by this process's driver (the head's process when headless): a sealed
        one's task FINISHED (a failed one's too, as Ray reports it), a pending one's its
        producing task's state as the owner sees it (SUBMITTED_TO_WORKER once it runs)."""
        objects = self.objects.snapshot()
        producing = {}
        if any(producer is not None for *_, producer, _owner in objects):
            producing = {r["task_id"]: r["state"] for r in self.events.records()}
        head, own_pid = self.scheduler.head, os.getpid()  # this process holds the rest
        out = []
        for oid, ready, is_error, nbytes, pinned, producer, owner in objects:
            if ready:  # as Ray's owner reports it: FINISHED, also for a failed task's result
                status = "FINISHED"
            else:  # the producing task's state as its owner sees it: a running one was submitted
                status = producing.get(producer.hex(), "PENDING_ARGS_AVAIL") if producer else "NIL"
                if status == "RUNNING":
                    status = "SUBMITTED_TO_WORKER"
            out.append({"object_id": oid.hex(), "object_size": nbytes, "task_status": status,
                        "attempt_number": 1,
                        "reference_type": "PINNED_IN_MEMORY" if pinned else "LOCAL_REFERENCE",
                        "call_site": "disabled", "type": "DRIVER",
                        "pid": owner.pid if owner is not None else own_pid,
                        "ip": owner.node.ip if owner is not None else head.ip})
        # Ray's ACTOR_HANDLE references: one per process holding a handle to an actor, under
        # the id of the actor creation task's return (its creation task id, index 1). A
        # driver's handle to a detached actor is none (Ray 2.60 counts no reference for it:
        # nobody owns the actor), a copy a worker borrowed is one.
        for actor_id, holder, detached in self.actors.scope.holders(self.pool.live_workers()):
            if holder is None and self._pid is None:
                continue
            if detached and (holder is None or holder.state is WorkerState.DRIVER):
                continue
            out.append({"object_id": (creation_task_id(actor_id) + _FIRST_RETURN).hex(),
                        "object_size": -1, "task_status": "NIL", "attempt_number": 1,
                        "reference_type": "ACTOR_HANDLE", "call_site": "disabled",
                        "type": "DRIVER" if holder is None or holder.state is WorkerState.DRIVER else "WORKER",
                        "pid": own_pid if holder is None else holder.pid,
                        "ip": head.ip if holder is None else holder.node.ip})
        return out

    def _actor_states(self):
        out = []
        for actor, worker, grant in self.actors.records():
            o = actor.options
            group = getattr(o.scheduling, "group_id", None)
            death = actor.death
            out.append({
                "actor_id": actor.actor_id.hex(), "class_name": o.class_name,
                "state": actor.state.value,
                "job_id": (o.owner_job or self.job_id).hex(), "name": o.name or "",
                "node_id": worker.node.hex if worker is not None else None,
                "pid": worker.pid if worker is not None else None,
                "ray_namespace": o.namespace, "serialized_runtime_env": None,
                "required_resources": {k: float(v) for k, v in o.resources.items()},  # Ray: floats
                "death_cause": death.facts() if death is not None else None,
                "is_detached": o.detached, "placement_group_id": group.hex() if group else None,
                "repr_name": "", "num_restarts": actor.num_restarts,
                "num_restarts_due_to_lineage_reconstruction": 0,
                "num_restarts_due_to_node_preemption": 0,
                "creation_task_id": creation_task_id(actor.actor_id).hex(),
                # Ray's actor table's (ray._private.state.actors()) beside the State API's
                "times_ms": [None if t is None else int(t * 1000) for t in actor.times],
                "node_ip": worker.node.ip if worker is not None else None})
        return out

    def _worker_states(self):
        """This process's driver (none when headless), each attached driver (not a tool
        attached as an observer: it has no job), each worker that has been given work (an
        idle pre-started one is not listed, as Ray's GCS has not heard of it), and the last
        ended ones of those, with their ``exit`` facts (the proxy writes Ray's exit type and
        detail from them). Times in milliseconds since the epoch (``end_time_ms`` 0 while
        alive, as Ray's)."""
        head = self.scheduler.head
        out = []
        if self._pid is not None:
            out.append({"worker_id": self.driver_worker_id.hex(), "is_alive": True,
                        "worker_type": "DRIVER", "exit_type": None, "node_id": head.hex,
                        "ip": head.ip, "pid": self._pid, "exit_detail": None,
                        "start_time_ms": _ms(self._started), "end_time_ms": 0})
        for w in self.pool.departed_workers():
            if w.is_driver and w.job_id is None:
                continue
            out.append(self._worker(w.worker_id, w.pid, w.node, w.is_driver, w.times, w.exit))
        for w in self.pool.live_workers():
            if w.times[1] is None or (w.state is WorkerState.DRIVER and w.job_id is None):
                continue
            out.append(self._worker(w.worker_id, w.pid, w.node, w.state is WorkerState.DRIVER,
                                    w.times, None))
        return out

    @staticmethod
    def _worker(worker_id, pid, node, is_driver, times, exit_facts):
        launched, given_work, ended = times
        return {"worker_id": worker_id.hex(), "is_alive": exit_facts is None,
                "worker_type": "DRIVER" if is_driver else "WORKER", "exit_type": None,
                "node_id": node.hex, "ip": node.ip, "pid": pid, "exit_detail": None,
                "exit": exit_facts, "worker_launch_time_ms": _ms(launched),
                "worker_launched_time_ms": _ms(launched), "start_time_ms": _ms(launched),
                "end_time_ms": _ms(ended) if ended is not None else 0}


def _ms(seconds):
    return int(seconds * 1000)
