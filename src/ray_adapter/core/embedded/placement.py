"""Placement groups of the embedded runtime: creation, readiness, names, removal, the table.

The scheduler holds where each bundle is reserved (:mod:`.group_placement`); this manager
holds what Ray reports about a group (name, namespace, strategy, state, latency stats) and who
waits for it: ``wait()`` callers (an Event each group owns, set when it is placed or removed,
and at shutdown) and ``ready()`` objects (sealed in the object table with the caller's value,
or failed with PlacementGroupRemoved).

Removing a group fails the demands queued for it (tasks: TaskPlacementGroupRemoved, actors:
ActorUnschedulableError), evicts what runs in it (actors die, a task's worker is killed) and
returns its reservations to the nodes. A non-detached group created by an actor is removed when
that actor dies, as in Ray (a driver's groups end with the runtime).

Thread-safety: ``PlacementGroups._lock`` (a leaf lock) guards the records and the name table;
scheduler calls, object-table seals and evictions happen after it is released.
"""
import sys
import threading
import time

from ray_adapter.core import errors, ids
from ray_adapter.core.embedded.group_placement import Bundle, GroupState
from ray_adapter.core.embedded.resources import to_units
from ray_adapter.core.embedded.results import error_data
from ray_adapter.core.execution import wait_seconds


class GroupRecord:
    __slots__ = ("group_id", "name", "namespace", "bundles", "strategy", "detached", "state",
                 "creator_actor", "created", "placed_at", "attempts", "event", "ready_ids",
                 "infeasible", "owner_job")

    def __init__(self, group_id, name, namespace, bundles, strategy, detached, creator_actor):
        self.group_id = group_id
        self.name = name
        self.namespace = namespace
        self.bundles = bundles
        self.strategy = strategy
        self.detached = detached
        self.state = "PENDING"
        self.creator_actor = creator_actor
        self.created = time.monotonic()
        self.placed_at = None
        self.attempts = 1
        self.event = threading.Event()
        self.ready_ids = []
        self.infeasible = False
        self.owner_job = None  # the attached driver's job it ends with (None: the runtime's)


class PlacementGroups:
    """Placement groups: creation, readiness, removal and the table (see the module notes)."""

    def __init__(self, *, ids, job_id, namespace, objects, scheduler):
        """Collaborators: ``ids`` (IdFactory), the ``job_id`` and default ``namespace`` groups
        are created in, the ``objects`` table (each group's ready objects) and the
        ``scheduler`` (which places the bundles)."""
        self._ids, self._job_id, self._namespace = ids, job_id, namespace
        self._objects, self._scheduler = objects, scheduler
        self._lock = threading.Lock()
        self._records = {}
        self._names = {}  # (namespace, name) -> group id of a group not removed

    # -- creation ----------------------------------------------------------------------------
    def create(self, bundles, strategy, name, lifetime, selectors=None, namespace=None,
               creator_actor=None, owner_job=None):
        """Create a group; returns its id at once. ``owner_job``: the attached driver's job whose
        end removes it unless it is detached. Raises PlacementGroupNameTaken."""
        group_id = ids.random_id(ids.PLACEMENT_GROUP_ID_SIZE - ids.JOB_ID_SIZE) + (owner_job or self._job_id)
        namespace = namespace if namespace is not None else self._namespace
        amounts = [{k: float(v) for k, v in b.items()} for b in bundles]
        record = GroupRecord(group_id, name or "", namespace, amounts, strategy,
                             lifetime == "detached", creator_actor)
        record.owner_job = owner_job
        with self._lock:
            if name and (namespace, name) in self._names:
                raise errors.PlacementGroupNameTaken(group_id, name)
            self._records[group_id] = record
            if name:
                self._names[(namespace, name)] = group_id
        selectors = list(selectors or [()] * len(amounts))
        state = GroupState(group_id, [Bundle(i, {k: to_units(v) for k, v in b.items() if v}, selectors[i])
                                      for i, b in enumerate(amounts)],
                           strategy, lambda _grant, r=record: self._placed(r))
        granted = self._scheduler.add_group(state)
        if state.state == "PENDING" and not self._scheduler.group_feasible(state):
            record.infeasible = True
            _warn_infeasible(amounts, strategy)
        self._scheduler.run(granted)
        return group_id

    def _placed(self, record):
        """The scheduler placed every bundle (first time, or again after a node died)."""
        with self._lock:
            if record.state == "REMOVED":
                return
            record.state = "CREATED"
            if record.placed_at is None:
                record.placed_at = time.monotonic()
            ready, record.ready_ids = record.ready_ids, []
        record.event.set()
        if ready:
            self._objects.seal_many([(oid, data, False) for oid, data in ready])

    # -- waiting -----------------------------------------------------------------------------
    def wait(self, group_id, timeout):
        """True once the group is placed; False after ``timeout`` seconds. Raises
        PlacementGroupRemoved if it is removed (before or while waiting)."""
        record = self._record(group_id)
        record.event.wait(wait_seconds(timeout))
        if record.state == "REMOVED":
            raise errors.PlacementGroupRemoved(group_id)
        return record.state == "CREATED" and self._scheduler.groups[group_id].placed

    def ready(self, group_id, data):
        """An object id (one reference, the caller's) that becomes the serialized value
        ``data`` once placed."""
        record = self._record(group_id)
        oid = self._ids.put()
        self._objects.create([oid], 1, None)
        with self._lock:
            state = record.state
            if state == "CREATED" and not self._scheduler.groups[group_id].placed:
                state = "RESCHEDULING"  # a node died: placed again soon
            if state in ("PENDING", "RESCHEDULING"):
                record.ready_ids.append((oid, data))
        if state == "CREATED":
            self._objects.seal_many([(oid, data, False)])
        elif state == "REMOVED":
            self._objects.seal_many([(oid, error_data(errors.PlacementGroupRemoved(group_id)), True)])
        return oid

    def _record(self, group_id):
        record = self._records.get(group_id)
        if record is None:
            raise errors.CoreError(f"placement group {group_id.hex()} does not exist")
        return record

    # -- removal -----------------------------------------------------------------------------
    def remove(self, group_id):
        with self._lock:
            record = self._records.get(group_id)
            if record is None or record.state == "REMOVED":
                return
            record.state = "REMOVED"
            if record.name and self._names.get((record.namespace, record.name)) == group_id:
                del self._names[(record.namespace, record.name)]
            ready, record.ready_ids = record.ready_ids, []
        record.event.set()
        failed, evicted, granted = self._scheduler.remove_group(group_id)
        if ready:
            error = error_data(errors.PlacementGroupRemoved(group_id))
            self._objects.seal_many([(oid, error, True) for oid, _ in ready])
        for grant in evicted:
            if grant.demand is not None:
                grant.demand.evict("group_removed")
        self._scheduler.run(failed + granted)

    def on_actor_dead(self, actor_id):
        """Non-detached groups an actor created go with it (as in Ray)."""
        self._remove_owned(lambda record: record.creator_actor == actor_id)

    def end_job(self, job_id):
        """The driver of attached job ``job_id`` ended: its non-detached groups go (as in Ray)."""
        self._remove_owned(lambda record: record.owner_job == job_id)

    def _remove_owned(self, owned_by):
        with self._lock:
            owned = [r.group_id for r in self._records.values()
                     if owned_by(r) and not r.detached and r.state != "REMOVED"]
        for group_id in owned:
            self.remove(group_id)

    def close(self):
        with self._lock:
            records = list(self._records.values())
        for record in records:
            record.event.set()  # wake every wait(); the runtime is gone

    # -- reporting ---------------------------------------------------------------------------
    def table(self, group_id=None):
        """The core's records (see RuntimeCore.placement_group_table)."""
        with self._lock:
            records = [self._records[group_id]] if group_id in self._records else (
                [] if group_id is not None else list(self._records.values()))
            return [self._describe(r) for r in records]

    def _describe(self, record):
        state = self._scheduler.groups.get(record.group_id)
        nodes = [b.node.hex if (state is not None and b.node is not None) else None
                 for b in (state.bundles if state is not None else ())] or [None] * len(record.bundles)
        status = record.state
        if status != "REMOVED" and state is not None and state.state == "RESCHEDULING":
            status = "RESCHEDULING"
        if status == "CREATED":
            latency = round((record.placed_at - record.created) * 1000, 3)
            scheduling = "FINISHED"
        else:
            latency = 0.0
            scheduling = {"REMOVED": "REMOVED", "RESCHEDULING": "RESCHEDULING"}.get(
                status, "INFEASIBLE" if record.infeasible else "NO_RESOURCES")
        return {"placement_group_id": record.group_id, "name": record.name,
                "namespace": record.namespace, "bundles": [dict(b) for b in record.bundles],
                "bundle_nodes": nodes, "strategy": record.strategy, "state": status,
                "detached": record.detached, "creator_job_id": record.owner_job or self._job_id,
                "requested_at_ns": time.time_ns() - int((time.monotonic() - record.created) * 1e9),
                "stats": {"end_to_end_creation_latency_ms": latency,
                          "scheduling_latency_ms": latency,
                          "scheduling_attempt": record.attempts, "highest_retry_delay_ms": 0.0,
                          "scheduling_state": scheduling}}


def _warn_infeasible(bundles, strategy):
    """Ray's autoscaler reports a group no node type can hold; so does the adapter (stderr)."""
    shapes = {}
    for bundle in bundles:
        key = tuple(sorted(bundle.items()))
        shapes[key] = shapes.get(key, 0) + 1
    demand = ", ".join(f"{dict(k)}" + (f"*{n}" if n > 1 else "") for k, n in shapes.items())
    try:
        sys.stderr.write(f"(autoscaler) Error: No available node types can fulfill resource "
                         f"request {demand} ({strategy} placement group). Add suitable node "
                         "types to this cluster to resolve this issue.\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
