"""What changes the scheduler's world, and what it reports of it: placement groups added and
removed, nodes joining and dying, and the per-node totals and availability the State API and
``ray.available_resources()`` read.

Mixed into :class:`~ray_adapter.core.embedded.scheduler.Scheduler`: every method takes the
scheduler's (leaf) lock, and those that free or move resources return the grants that made
possible (the caller runs them outside the lock, :meth:`Scheduler.run`).
"""
import collections

from ray_adapter.core.embedded import group_placement


class TopologyMixin:
    """Placement groups, nodes and reporting of :class:`Scheduler` (see the module notes)."""

    # -- placement groups --------------------------------------------------------------------
    def add_group(self, group):
        """Place ``group`` (a GroupState) now or keep it pending; returns the new grants
        (the group itself among them when placed)."""
        with self._lock:
            self.groups[group.group_id] = group
            group.seq = next(self._seq)
            group.queued = True
            self._pending_groups.append(group)
            return self._grant_waiting()

    def group_feasible(self, group):
        with self._lock:
            return group_placement.feasible(self.live_nodes(), group)

    def remove_group(self, group_id):
        """Release the group's bundles. Returns ``(failed, evicted, granted)``: queued demands
        for the group (failed with ``"group_removed"``), live grants drawn from its bundles
        (their holders must stop), and what the freed resources granted."""
        with self._lock:
            group = self.groups.get(group_id)
            if group is None or group.state == "REMOVED":
                return [], [], []
            group.state = "REMOVED"
            if group.queued:
                self._pending_groups.remove(group)
                group.queued = False
            evicted = []
            for bundle in group.bundles:
                evicted.extend(bundle.grants)
                bundle.grants = set()
                group_placement.unplace(bundle)
            failed = self._withdraw_where(lambda d: d.placement is not None and d.placement.in_group
                                          and d.placement.group_id == group_id, "group_removed")
            return failed, evicted, self._grant_waiting()

    def _withdraw_where(self, predicate, failure):
        failed = []
        for shape in list(self._queues):
            queue = self._queues[shape]
            keep = collections.deque()
            for demand in queue:
                if predicate(demand):
                    demand.queued = False
                    demand.failure = failure
                    failed.append((demand, None))
                else:
                    keep.append(demand)
            if keep:
                self._queues[shape] = keep
            else:
                del self._queues[shape]
        return failed

    # -- nodes -------------------------------------------------------------------------------
    def add_node(self, node):
        """A node joins; returns what it made possible."""
        with self._lock:
            self.nodes[node.node_id] = node
            self.by_hex[node.hex] = node
            self._feasible = {}
            return self._grant_waiting()

    def remove_node(self, node_id):
        """A node dies: its bundles are rescheduled elsewhere, demands with hard affinity to it
        fail. Returns ``(failed, granted)``; the caller ends the processes that ran there."""
        with self._lock:
            node = self.nodes.get(node_id)
            if node is None or not node.alive:
                return [], []
            node.alive = False
            self._feasible = {}
            for group in self.groups.values():
                if group.state == "REMOVED":
                    continue
                lost = [b for b in group.bundles if b.node is node]
                for bundle in lost:
                    bundle.node = bundle.reservation = bundle.pool = None
                    bundle.grants = set()
                if lost and not group.queued:
                    group.state = "RESCHEDULING"
                    group.queued = True
                    self._pending_groups.append(group)
            hex_id = node.hex
            failed = self._withdraw_where(
                lambda d: d.placement is not None and d.placement.kind == "node" and not d.placement.soft
                and d.placement.node_id == hex_id, "node_affinity")
            return failed, self._grant_waiting()

    # -- reporting ---------------------------------------------------------------------------
    def per_node(self, which="total"):
        """``{node id hex: {resource: amount}}`` of live nodes, group resources included;
        ``which``: "total" or "available" (nothing free: omitted)."""
        out = {}
        with self._lock:
            groups = group_placement.group_resources(self.groups.values(), which)
            for node in self.nodes.values():
                if node.alive:
                    amounts = node.resources.total_dict() if which == "total" else node.resources.available_dict()
                    amounts.update(groups.get(node.node_id, {}))
                    out[node.hex] = amounts
        return out

    def _summed(self, which):
        out = {}
        for amounts in self.per_node(which).values():
            for k, v in amounts.items():
                out[k] = out.get(k, 0.0) + v
        return out

    def total(self):
        return self._summed("total")

    def available(self):
        return self._summed("available")

    def queued(self):
        """How many demands wait, for tests and state APIs."""
        with self._lock:
            return sum(len(q) for q in self._queues.values())
