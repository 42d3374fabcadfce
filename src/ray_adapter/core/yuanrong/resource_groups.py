"""The yuanrong backend's placement groups (yr resource groups) and scheduling placements.

On a Yuanrong cluster a placement group is a yr resource group: ``yr.create_resource_group(
bundles, name, strategy)`` (bundles in yr's units: CPU millicores, Memory MB, ``GPU/.+/count``),
``ResourceGroup.wait`` (run by one thread per group until it is placed, then it exits),
``yr.remove_resource_group(name)``, and ``resource_group_table(name)`` for where the bundles
went. A task or actor in a bundle gets ``resource_group_options=ResourceGroupOptions(name,
bundle_index)``; node affinity and node labels become ``schedule_affinities`` (RESOURCE
affinities, REQUIRED for hard and PREFERRED for soft constraints).

yr's local mode has no resource groups ("not supported in local mode"), so there the adapter
keeps the bundle accounting itself, with the embedded runtime's placement code over the one
local node: a group that fits is created at once, one that cannot fit stays pending, and
``available_resources()`` shows the reservation under Ray's ``CPU_group_...`` names. Work
placed in a bundle is not enforced there (local mode enforces no resources at all).

Thread-safety: ``ResourceGroups._lock`` (a leaf lock) guards ``_groups``, ``_group_names``
and each group's ``state``; yr calls, the local scheduler's and futures' callbacks happen
outside it. A group's ``event`` and ``ready`` are set once, by whoever settles the group.
"""
import concurrent.futures
import threading
import time

from ray_adapter.core import errors, ids
from ray_adapter.core.yuanrong import shell
from ray_adapter.core.yuanrong.invoke_options import yr_bundle
from ray_adapter.core.yuanrong.objects import settle


class _Group:
    __slots__ = ("group_id", "name", "namespace", "rg_name", "bundles", "strategy", "detached",
                 "state", "event", "ready", "handle", "local", "created", "placed_at", "nodes")

    def __init__(self, group_id, name, namespace, bundles, strategy, detached):
        self.group_id, self.name, self.namespace = group_id, name, namespace
        self.rg_name = f"rg-{group_id.hex()}"
        self.bundles, self.strategy, self.detached = bundles, strategy, detached
        self.state = "PENDING"
        self.event = threading.Event()
        self.ready = concurrent.futures.Future()  # resolved once placed (or failed at removal)
        self.handle = self.local = None
        self.created, self.placed_at = time.monotonic(), None
        self.nodes = [None] * len(bundles)


class ResourceGroups:
    """Placement groups over yr resource groups (local mode: the adapter's accounting).

    Collaborators: ``yr``, ``id_factory``, ``objects`` (the object table: a group's ready
    object), ``job_id``, ``namespace``, ``node_id`` (local mode's one node), ``scheduler``
    (local mode: the embedded scheduler of that node, shared with the task and actor grants;
    None on a cluster)."""

    def __init__(self, yr, id_factory, objects, *, job_id, namespace, node_id, scheduler):
        self.yr = yr
        self._ids = id_factory
        self.objects = objects
        self.job_id = job_id
        self.namespace = namespace
        self.node_id = node_id
        self.scheduler = scheduler
        self.local_mode = scheduler is not None
        self._lock = threading.Lock()
        self._groups = {}       # placement group id -> _Group
        self._group_names = {}  # (namespace, name) -> placement group id

    # -- groups ------------------------------------------------------------------------------
    def create(self, bundles, strategy, name, lifetime, label_selectors=None):
        """A new group (its id); PlacementGroupNameTaken for a name in use, NotImplementedError
        for label selectors on a cluster."""
        if label_selectors and any(label_selectors) and not self.local_mode:
            raise NotImplementedError(
                "bundle_label_selector cannot be honoured on a Yuanrong cluster: "
                "yr.create_resource_group takes no label selectors (see the compat matrix entry "
                "ray.util.placement_group.placement_group)")
        group_id = ids.random_id(ids.PLACEMENT_GROUP_ID_SIZE - ids.JOB_ID_SIZE) + self.job_id
        group = _Group(group_id, name or "", self.namespace, [dict(b) for b in bundles], strategy,
                       lifetime == "detached")
        with self._lock:
            if name and (self.namespace, name) in self._group_names:
                raise errors.PlacementGroupNameTaken(group_id, name)
            self._groups[group_id] = group
            if name:
                self._group_names[(self.namespace, name)] = group_id
        if self.local_mode:
            self._place_locally(group, label_selectors)
        else:
            yr_bundles = [yr_bundle(b) for b in bundles]
            group.handle = self.yr.create_resource_group(yr_bundles, name=group.rg_name, strategy=strategy)
            threading.Thread(target=self._await_group, args=(group,), daemon=True,
                             name="ray-adapter-yr-resource-group").start()
        return group_id

    def _place_locally(self, group, label_selectors):
        from ray_adapter.core.embedded.group_placement import Bundle, GroupState
        from ray_adapter.core.embedded.resources import to_units

        selectors = list(label_selectors or [()] * len(group.bundles))
        state = GroupState(group.group_id, [Bundle(i, {k: to_units(v) for k, v in b.items() if v}, selectors[i])
                                            for i, b in enumerate(group.bundles)],
                           group.strategy, lambda _g, grp=group: self._group_placed(grp))
        group.local = state
        self.scheduler.run(self.scheduler.add_group(state))

    def _await_group(self, group):
        """One thread per group on a cluster: yr's wait blocks until the group is placed."""
        try:
            group.handle.wait(-1)
        except Exception:  # noqa: BLE001 - removed meanwhile, or the runtime is gone
            return
        self._group_placed(group)

    def _group_placed(self, group):
        with self._lock:
            if group.state == "REMOVED":
                return
            group.state = "CREATED"
            group.placed_at = time.monotonic()
            if group.local is not None:
                group.nodes = [self.node_id.hex() for _ in group.bundles]
        group.event.set()
        settle(group.ready, True)

    def remove(self, placement_group_id):
        """Remove a group: its waiting work fails, its ready object fails, its name is free."""
        with self._lock:
            group = self._groups.get(placement_group_id)
            if group is None or group.state == "REMOVED":
                return
            group.state = "REMOVED"
            if group.name and self._group_names.get((group.namespace, group.name)) == placement_group_id:
                del self._group_names[(group.namespace, group.name)]
        if group.local is not None:  # its waiting work fails; what it freed is granted
            failed, _evicted, granted = self.scheduler.remove_group(placement_group_id)
            self.scheduler.run(failed + granted)
        else:
            self.yr.remove_resource_group(group.rg_name)
        group.event.set()
        settle(group.ready, None, errors.PlacementGroupRemoved(placement_group_id))

    def wait(self, placement_group_id, timeout):
        """True once the group is placed within ``timeout`` seconds (None: no limit);
        PlacementGroupRemoved if it was removed."""
        group = self._group(placement_group_id)
        group.event.wait(timeout)
        if group.state == "REMOVED":
            raise errors.PlacementGroupRemoved(placement_group_id)
        return group.state == "CREATED"

    def ready_object(self, placement_group_id, value):
        """An object resolving to ``value`` once the group is placed (failing at removal)."""
        group = self._group(placement_group_id)
        oid = self._ids.put()
        future = self.objects.new_pending(oid)

        def placed(done):  # the object may have been failed meanwhile (shutdown, a cancel)
            if done.exception() is not None:
                settle(future, None, done.exception())
            else:
                settle(future, shell.Box(True, shell.pack(value)))

        group.ready.add_done_callback(placed)
        return oid

    def table(self, placement_group_id):
        """Ray's placement group table records (all groups for None)."""
        with self._lock:
            groups = [self._groups[placement_group_id]] if placement_group_id in self._groups else (
                [] if placement_group_id is not None else list(self._groups.values()))
        return [self._describe_group(g) for g in groups]

    def _group(self, placement_group_id):
        group = self._groups.get(placement_group_id)
        if group is None:
            raise errors.CoreError(f"placement group {placement_group_id.hex()} does not exist")
        return group

    def _describe_group(self, group):
        nodes = list(group.nodes)
        if group.local is None and group.state == "CREATED":
            nodes = self._bundle_nodes(group) or nodes
        latency = round((group.placed_at - group.created) * 1000, 3) if group.placed_at else 0.0
        return {"placement_group_id": group.group_id, "name": group.name,
                "namespace": group.namespace, "bundles": [dict(b) for b in group.bundles],
                "bundle_nodes": nodes, "strategy": group.strategy, "state": group.state,
                "detached": group.detached, "creator_job_id": self.job_id,
                "requested_at_ns": time.time_ns() - int((time.monotonic() - group.created) * 1e9),
                "stats": {"end_to_end_creation_latency_ms": latency, "scheduling_latency_ms": latency,
                          "scheduling_attempt": 1, "highest_retry_delay_ms": 0.0,
                          "scheduling_state": "FINISHED" if group.state == "CREATED" else group.state}}

    def _bundle_nodes(self, group):
        """Bundle -> node from yr's ``resource_group_table`` (``{"resourceGroups": {name:
        {"bundles": [{"functionProxyId": ...}]}}}`` as the SDK declares it; read defensively)."""
        table_fn = getattr(self.yr, "resource_group_table", None)
        if table_fn is None:
            try:
                import importlib

                table_fn = importlib.import_module(self.yr.__name__ + ".apis").resource_group_table
            except Exception:  # noqa: BLE001 - no table: the nodes stay unknown
                return None
        try:
            table = table_fn(group.rg_name)
        except Exception:  # noqa: BLE001
            return None
        info = table.get("resourceGroups", table).get(group.rg_name, {}) if isinstance(table, dict) else {}
        bundles = info.get("bundles") or []
        out = [None] * len(group.bundles)
        for i, bundle in enumerate(bundles[:len(out)]):
            if isinstance(bundle, dict):
                out[i] = bundle.get("functionProxyId") or bundle.get("nodeId") or None
        return out

    def rg_name(self, placement_group_id):
        """The yr resource group name of a group, or None."""
        group = self._groups.get(placement_group_id)
        return None if group is None else group.rg_name

    def close(self, error):
        """Shutdown: every wait() returns and every ready() object fails with ``error``."""
        with self._lock:
            groups = list(self._groups.values())
            self._groups.clear()
            self._group_names.clear()
        for group in groups:
            group.event.set()
            settle(group.ready, None, error)

    def resources_local(self, which):
        """Local mode: the reservation of every group under Ray's group resource names."""
        if self.scheduler is None:
            return {}
        from ray_adapter.core.embedded.group_placement import group_resources

        with self.scheduler._lock:
            per_node = group_resources(self.scheduler.groups.values(), which)
        return per_node.get(self.node_id, {})
