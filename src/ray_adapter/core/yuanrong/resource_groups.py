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

Mixed into :class:`~ray_adapter.core.yuanrong.backend.YuanrongBackend`; its state
(``_groups``, ``_group_names``) is guarded by the backend's lock; yr calls happen outside it.
"""
import concurrent.futures
import threading
import time

from ray_adapter.core import errors, ids
from ray_adapter.core.yuanrong import shell

#: The node label the adapter matches for node affinity on a Yuanrong cluster (the key under
#: which yr nodes carry their id). Not verified against a live cluster: none can run here.
NODE_ID_LABEL = "NODE_ID"
_OPERATORS = {"in": "LABEL_IN", "not_in": "LABEL_NOT_IN", "exists": "LABEL_EXISTS",
              "does_not_exist": "LABEL_NOT_EXISTS"}


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


class ResourceGroupsMixin:
    """Placement groups over yr resource groups (local mode: the adapter's accounting)."""

    def _local_scheduler(self):
        if getattr(self, "_rg_scheduler", None) is None:
            from ray_adapter.core.embedded.resources import Node
            from ray_adapter.core.embedded.scheduler import Scheduler

            from ray_adapter.core.embedded.resources import visible_device_ids

            node = self._local_node()
            self._rg_scheduler = Scheduler([Node(self.node_id, node["address"], node["resources_total"],
                                                 device_ids=visible_device_ids())])
        return self._rg_scheduler

    # -- the RuntimeCore methods -------------------------------------------------------------
    def create_placement_group(self, bundles, strategy, name, lifetime, label_selectors=None,
                               _creator_actor=None):
        self._check_started()
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
            yr_bundles = [self._yr_bundle(b) for b in bundles]
            group.handle = self.yr.create_resource_group(yr_bundles, name=group.rg_name, strategy=strategy)
            threading.Thread(target=self._await_group, args=(group,), daemon=True,
                             name="ray-adapter-yr-resource-group").start()
        return group_id

    def _yr_bundle(self, bundle):
        """A bundle in yr's units (``CPU`` millicores, ``Memory`` MB, ``GPU/.+/count``)."""
        opts = self.invoke_kwargs(bundle)
        out = {"CPU": opts.get("cpu", 0)}
        if opts.get("memory"):
            out["Memory"] = opts["memory"]
        out.update(opts.get("custom_resources") or {})
        return {k: v for k, v in out.items() if v}

    def _place_locally(self, group, label_selectors):
        from ray_adapter.core.embedded.group_placement import Bundle, GroupState
        from ray_adapter.core.embedded.resources import to_units

        selectors = list(label_selectors or [()] * len(group.bundles))
        state = GroupState(group.group_id, [Bundle(i, {k: to_units(v) for k, v in b.items() if v}, selectors[i])
                                            for i, b in enumerate(group.bundles)],
                           group.strategy, lambda _g, grp=group: self._group_placed(grp))
        group.local = state
        self._local_scheduler().run(self._local_scheduler().add_group(state))

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
        if not group.ready.done():
            group.ready.set_result(True)

    def remove_placement_group(self, placement_group_id):
        self._check_started()
        with self._lock:
            group = self._groups.get(placement_group_id)
            if group is None or group.state == "REMOVED":
                return
            group.state = "REMOVED"
            if group.name and self._group_names.get((group.namespace, group.name)) == placement_group_id:
                del self._group_names[(group.namespace, group.name)]
        if group.local is not None:  # its waiting work fails; what it freed is granted
            scheduler = self._local_scheduler()
            failed, _evicted, granted = scheduler.remove_group(placement_group_id)
            scheduler.run(failed + granted)
        else:
            self.yr.remove_resource_group(group.rg_name)
        group.event.set()
        if not group.ready.done():
            group.ready.set_exception(errors.PlacementGroupRemoved(placement_group_id))

    def wait_placement_group(self, placement_group_id, timeout):
        group = self._group(placement_group_id)
        group.event.wait(timeout)
        if group.state == "REMOVED":
            raise errors.PlacementGroupRemoved(placement_group_id)
        return group.state == "CREATED"

    def placement_group_ready(self, placement_group_id, value):
        group = self._group(placement_group_id)
        oid = self._ids.put()
        future = concurrent.futures.Future()

        def settle(done):
            if done.exception() is not None:
                future.set_exception(done.exception())
            else:
                future.set_result(shell.Box(True, shell.pack(value)))

        group.ready.add_done_callback(settle)
        self._new_id(None, None, None, oid)
        self._objects[oid].future = future
        return oid

    def placement_group_table(self, placement_group_id):
        self._check_started()
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

    def captured_placement_group(self):
        group = shell.current_group.get()
        if group is not None and group[1]:
            return group[0], -1
        return None

    def _close_groups(self, error):
        """Shutdown: every wait() returns and every ready() object fails with ``error``."""
        with self._lock:
            groups = list(self._groups.values())
            self._groups.clear()
            self._group_names.clear()
        for group in groups:
            group.event.set()
            if not group.ready.done():
                group.ready.set_exception(error)

    # -- InvokeOptions for a placement -------------------------------------------------------
    def placement_kwargs(self, placement):
        """InvokeOptions fields for a core Placement (cluster mode; local mode ignores them)."""
        if placement is None or self.local_mode:
            return {}
        yr = self.yr
        out = {}
        if placement.in_group:
            group = self._groups.get(placement.group_id)
            if group is not None:
                out["resource_group_options"] = yr.ResourceGroupOptions(
                    resource_group_name=group.rg_name, bundle_index=placement.bundle_index)
        affinities = []
        kind, kinds = yr.affinity.AffinityKind.RESOURCE, yr.affinity.AffinityType
        if placement.kind == "node":
            op = yr.LabelOperator(yr.affinity.OperatorType.LABEL_IN, NODE_ID_LABEL, [placement.node_id])
            affinities.append(yr.Affinity(kind, kinds.PREFERRED if placement.soft else kinds.REQUIRED, [op]))
        for expressions, level in ((placement.hard, kinds.REQUIRED), (placement.soft_labels, kinds.PREFERRED)):
            if expressions:
                ops = [yr.LabelOperator(getattr(yr.affinity.OperatorType, _OPERATORS[e.op]), e.key,
                                        list(e.values)) for e in expressions]
                affinities.append(yr.Affinity(kind, level, ops))
        if affinities:
            out["schedule_affinities"] = affinities
        return out

    def group_resources_local(self, which):
        """Local mode: the reservation of every group under Ray's group resource names."""
        if getattr(self, "_rg_scheduler", None) is None:
            return {}
        from ray_adapter.core.embedded.group_placement import group_resources

        with self._rg_scheduler._lock:
            per_node = group_resources(self._rg_scheduler.groups.values(), which)
        return per_node.get(self.node_id, {})
