"""The scheduler: nodes and their resources, placement groups, and the demands waiting for them.

It decides; it never sends, spawns or runs user code. A demand (a task to run, an actor to
place) is granted resources on a node or in a placement-group bundle at once, queued, or
failed (it can never be placed: ``demand.failure``); every path that returns resources
(:meth:`Scheduler.release`, :meth:`Scheduler.lend`, a node added, a group removed) retries
every queued demand and pending group, and hands back what it granted (and failed) for the
caller to act on outside the lock (:meth:`Scheduler.run`).

Where a demand may go is its :class:`~ray_adapter.core.scheduling.Placement`: any node (first
that fits, head first), spread (round robin), node affinity, node labels, or a bundle of a
placement group (:mod:`.group_placement`). Queues are FIFO per resource shape and placement
(actor creations apart from tasks): a demand never overtakes an earlier one of the same kind,
while a small demand may start beside a large one that does not fit yet, and lines take turns
at freed resources (as Ray's scheduling classes do).

Placement groups and nodes coming and going (:meth:`Scheduler.add_group`,
:meth:`Scheduler.add_node`, ...) change its world in the same class, under the same lock;
those that free or move resources return the grants that made possible. It also reports the
per-node totals and availability the State API and ``ray.available_resources()`` read.

Thread-safety: all state is guarded by ``Scheduler._lock``, a leaf lock; any thread may call.
:meth:`Scheduler.run` is not re-entered on one thread: grants that starting a demand hands
back (a task that cannot start returns its resources to the next in line) join the loop that
is running, so a long line of failures never nests (its state is per thread).
"""
import collections
import itertools
import threading
import traceback

from ray_adapter.core.embedded import group_placement
from ray_adapter.core.embedded.demands import Grant
from ray_adapter.core.embedded.group_placement import BUNDLE_RESOURCE, BUNDLE_SHARE
from ray_adapter.core.embedded.resources import UNIT, NodeResources
from ray_adapter.core.scheduling import matches_all


class _Running(threading.local):
    def __init__(self):
        self.active = False
        self.queue = collections.deque()


class Scheduler:
    def __init__(self, nodes):
        self._lock = threading.Lock()
        self.nodes = {n.node_id: n for n in nodes}
        self.by_hex = {n.hex: n for n in nodes}
        self.groups = {}          # group id -> GroupState
        self._pending_groups = []  # GroupState waiting to be (re)placed, in order
        self._queues = collections.OrderedDict()  # shape -> deque of Demand
        self._seq = itertools.count()
        self._spread = 0
        self.spare = None  # called after every run(): resources may be free (see run)
        self._running = _Running()  # this thread's run() loop: active flag and its queue
        self._feasible = {}  # resource shape -> feasible on some node (cleared as nodes change)

    @property
    def head(self):
        return next(iter(self.nodes.values()))

    def live_nodes(self):
        return [n for n in self.nodes.values() if n.alive]

    # -- feasibility -------------------------------------------------------------------------
    def feasible(self, units, placement=None, shape=None):
        """Could the demand ever fit (some live node, its affinity node, or a bundle)?
        ``shape``: ``units`` as a sorted tuple of items, when the caller has it."""
        if placement is None:  # the hot path: node totals only change when nodes do
            if shape is None:
                shape = tuple(sorted(units.items()))
            known = self._feasible.get(shape)
            if known is None:
                known = any(n.alive and n.resources.feasible(units) for n in list(self.nodes.values()))
                self._feasible[shape] = known
            return known
        with self._lock:
            if placement is not None and placement.in_group:
                group = self.groups.get(placement.group_id)
                if group is None:
                    return True  # unknown yet: nothing to judge
                index = placement.bundle_index
                bundles = group.bundles if index < 0 else group.bundles[index:index + 1]
                return any(_bundle_resources(b.units).feasible(units) for b in bundles)
            if placement is not None and placement.kind == "node" and not placement.soft:
                target = self.by_hex.get(placement.node_id)
                if target is None or not target.alive:
                    return True  # it fails at once (unschedulable); nothing to warn about
            return any(n.resources.feasible(units) for n in self._nodes_for(placement))

    def _nodes_for(self, placement):
        nodes = self.live_nodes()
        if placement is None:
            return nodes
        if placement.kind == "node":
            target = self.by_hex.get(placement.node_id)
            if target is not None and target.alive:
                return [target] + ([n for n in nodes if n is not target] if placement.soft else [])
            return nodes if placement.soft else []
        if placement.hard:
            nodes = [n for n in nodes if matches_all(n.labels, placement.hard)]
        return nodes

    # -- granting ----------------------------------------------------------------------------
    def submit(self, demand):
        """Grant ``demand`` now (returns the Grant), or queue it, or fail it (returns None
        with ``demand.failure`` set: it can never be granted)."""
        with self._lock:
            demand.seq = next(self._seq)
            queue = self._queues.get(demand.shape)
            if not queue:
                grant = self._try(demand)
                if grant is not None or demand.failure is not None:
                    return grant
            if queue is None:
                queue = self._queues[demand.shape] = collections.deque()
            queue.append(demand)
            demand.queued = True
            return None

    def fits_now(self, units):
        """Whether ``units`` (default placement) fit on some live node right now."""
        with self._lock:
            return any(n.alive and n.resources.fits(units) for n in self.nodes.values())

    def take_followers(self, shape, limit, beside_others=False):
        """Pop up to ``limit`` of the oldest queued demands of ``shape`` to run under a lease
        their taker already has (pipelining), at most half of that line (the rest stays for
        other workers). None while placement groups wait, nor while other lines wait unless
        ``beside_others`` (the taker's work is brief: the lease will soon come back to them).
        Returns a list, oldest first."""
        with self._lock:
            queue = self._queues.get(shape)
            if not queue or self._pending_groups:
                return []
            if not beside_others and len(self._queues) > 1 and any(
                    q for k, q in self._queues.items() if k != shape):
                return []
            taken = []
            for _ in range(min(limit, (len(queue) + 1) // 2)):
                demand = queue.popleft()
                demand.queued = False
                taken.append(demand)
            if not queue:
                del self._queues[shape]
            return taken

    def resubmit_front(self, demand):
        """A demand :meth:`take_followers` gave out comes back unrun: first in its line again
        (it was the oldest of its shape). Returns the grants this made possible."""
        with self._lock:
            queue = self._queues.get(demand.shape)
            if queue is None:
                queue = self._queues[demand.shape] = collections.deque()
            queue.appendleft(demand)
            demand.queued = True
            return self._grant_waiting()

    def withdraw(self, demand):
        """Remove a queued demand; True if it was queued (it will not be granted)."""
        with self._lock:
            if not demand.queued:
                return False
            demand.queued = False
            queue = self._queues.get(demand.shape)
            if queue is not None:
                try:
                    queue.remove(demand)
                except ValueError:
                    pass
            return True

    def _try(self, demand):
        """A Grant for ``demand`` now, or None (``demand.failure`` set if it never can be)."""
        units, p = demand.units, demand.placement
        if p is None:
            for node in self.nodes.values():
                if node.alive and node.resources.fits(units):
                    return Grant(node, units, node.resources.acquire(units), demand=demand)
            return None
        if p.in_group:
            return self._try_group(demand)
        if p.kind == "node":
            target = self.by_hex.get(p.node_id)
            usable = target is not None and target.alive and target.resources.feasible(units)
            if usable and target.resources.fits(units):
                return Grant(target, units, target.resources.acquire(units), demand=demand)
            if not usable and not p.soft:
                demand.failure = "node_affinity"
                return None
            if usable and not (p.soft and p.spill):
                if p.fail:
                    demand.failure = "node_affinity"
                return None  # wait for the target node
            candidates = [n for n in self.live_nodes() if n is not target]
        else:
            candidates = self._nodes_for(p)
            if p.soft_labels:
                candidates.sort(key=lambda n: 0 if matches_all(n.labels, p.soft_labels) else 1)
        if p.kind == "spread" and candidates:
            start = self._spread % len(candidates)
            candidates = candidates[start:] + candidates[:start]
        for node in candidates:
            if node.resources.fits(units):
                if p.kind == "spread":
                    self._spread += 1
                return Grant(node, units, node.resources.acquire(units), demand=demand)
        return None

    def _try_group(self, demand):
        p = demand.placement
        group = self.groups.get(p.group_id)
        if group is None or group.state == "REMOVED":
            return None  # as Ray: work for a removed (or unknown) group stays pending
        index = p.bundle_index
        bundles = group.bundles if index < 0 else group.bundles[index:index + 1]
        want = dict(demand.units, **{BUNDLE_RESOURCE: BUNDLE_SHARE})
        for bundle in bundles:
            pool = bundle.pool
            if pool is not None and bundle.node.alive and pool.fits(want):
                grant = Grant(bundle.node, demand.units, pool.acquire(want), pool, bundle, demand)
                bundle.grants.add(grant)
                return grant
        return None

    def _grant_waiting(self):
        """Place pending groups, then grant queued demands that fit now, oldest first within
        a shape; a line that got resources and still waits goes to the back, so lines take
        turns (an actor queued behind a backlog of tasks starts with the next CPU freed, as
        Ray's scheduling classes share the node). Failed demands come back with grant None
        (lock held)."""
        granted = []
        if self._pending_groups:
            nodes = self.live_nodes()
            for group in list(self._pending_groups):
                if group_placement.place(nodes, group):
                    self._pending_groups.remove(group)
                    group.queued = False
                    group.state = "CREATED"
                    granted.append((group, None))
        served = []
        for shape in list(self._queues):
            queue = self._queues[shape]
            took = False
            while queue:
                demand = queue[0]
                grant = self._try(demand)
                if grant is None and demand.failure is None:
                    break
                queue.popleft()
                demand.queued = False
                granted.append((demand, grant))
                took = True
            if not queue:
                del self._queues[shape]
            elif took:
                served.append(shape)
        for shape in served:  # the next resources freed go to the other lines first
            self._queues.move_to_end(shape)
        granted.sort(key=lambda pair: pair[0].seq)
        return granted

    def run(self, granted):
        """Start (or fail) what a grant-returning call decided (call outside any lock). Then
        :attr:`spare` is called: resources may be free that no queued demand could take and
        that work held back elsewhere (a pipelined follower) could use (:meth:`fits_now`)."""
        running = self._running
        running.queue.extend(granted)
        if running.active:  # called from a demand this thread is starting: the loop below runs it
            return
        running.active = True
        try:
            while running.queue:
                demand, grant = running.queue.popleft()
                try:
                    if grant is None and getattr(demand, "failure", None) is not None:
                        demand.fail(demand.failure)
                    else:
                        demand.start(grant)
                except Exception:  # noqa: BLE001 - one broken start must not strand the rest
                    traceback.print_exc()
        finally:
            running.active = False
        if self.spare is not None:
            self.spare()

    def release_and_start(self, grant):
        """Return ``grant``'s resources and start what they make possible (:meth:`release`
        then :meth:`run`: call outside any lock). Every caller that only gives a grant back
        uses this: the grants a release makes cannot be forgotten."""
        self.run(self.release(grant))

    def release(self, grant):
        """Return ``grant``'s resources (less any lent part); returns the new grants
        ``[(demand, grant)]`` this made possible, for :meth:`run` (prefer
        :meth:`release_and_start`)."""
        with self._lock:
            units = grant.pool_units()
            if grant.lent:
                units = {k: v - grant.lent.get(k, 0) for k, v in units.items()}
                grant.lent = None
            grant.pool.release(units, grant.devices)
            if grant.bundle is not None:
                grant.bundle.grants.discard(grant)
            return self._grant_waiting()

    def lend(self, grant, names=("CPU",)):
        """The holder is blocked (waiting in ``get``): lend its ``names`` resources back so
        other demands can run. Returns the new grants."""
        with self._lock:
            if grant.lent is not None:
                return []
            grant.lent = {k: v for k, v in grant.units.items() if k in names}
            grant.pool.release(grant.lent, None)
            return self._grant_waiting()

    def reclaim(self, grant):
        """Take back what :meth:`lend` lent (may oversubscribe for a moment, as Ray does)."""
        with self._lock:
            if grant.lent:
                grant.pool.acquire_amounts(grant.lent)
            grant.lent = None

    def retry(self):
        """Grant whatever fits now (after nodes changed); returns the new grants."""
        with self._lock:
            return self._grant_waiting()

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


def _bundle_resources(units):
    """A bundle of ``units`` as a node of its own, for feasibility: its GPUs/NPUs as the device
    slots it reserves (a fraction of one device for ``{"GPU": 0.5}``, which a task asking for
    0.25 fits in; whole devices otherwise)."""
    devices = {}
    for kind in NodeResources.DEVICE_KINDS:
        need = units.get(kind, 0)
        if need:
            whole, part = divmod(need, UNIT)
            devices[kind] = [(i, UNIT) for i in range(whole)] + ([(whole, part)] if part else [])
    return NodeResources(NodeResources({}).amounts(units), devices=devices)
