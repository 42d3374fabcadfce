"""Placement groups inside the scheduler: their bundles, and where bundles go on the nodes.

A placement group reserves each bundle's resources on one node (one reservation per bundle);
a reserved bundle becomes a resource pool (:class:`~.resources.NodeResources`) that the tasks
and actors placed in that bundle draw from. Placement is all or nothing: bundles are reserved
one by one and rolled back if any cannot be placed, so the nodes never hold half a group.

Strategies, as Ray's: ``STRICT_PACK`` every bundle on one node; ``PACK`` one node if possible,
else as few as possible (nodes the group already uses first); ``SPREAD`` bundles on distinct
nodes where possible (least used by the group first); ``STRICT_SPREAD`` every bundle on a
distinct node. A bundle's label selector restricts the nodes it may use.

Plain data and functions; everything here runs under ``Scheduler._lock``.
"""
from ray_adapter.core.embedded.resources import UNIT, NodeResources, from_units
from ray_adapter.core.scheduling import matches_all

#: The synthetic resource every bundle has, as Ray's ``bundle`` resource: 1000 per bundle,
#: and each task or actor placed in the bundle holds 0.001 of it.
BUNDLE_RESOURCE = "bundle"
BUNDLE_TOTAL = 1000 * UNIT
BUNDLE_SHARE = UNIT // 1000


class Bundle:
    """Bundle ``index`` of a group: ``units`` (its request), ``selector`` (label expressions its
    node must match); once placed, ``node``, ``reservation`` (device ids it took there) and
    ``pool`` (what tasks in it draw from); ``grants`` are the live grants drawn from it."""

    __slots__ = ("index", "units", "selector", "node", "reservation", "pool", "grants")

    def __init__(self, index, units, selector=()):
        self.index = index
        self.units = units
        self.selector = tuple(selector or ())
        self.node = None
        self.reservation = None
        self.pool = None
        self.grants = set()


class GroupState:
    """The scheduler's side of one placement group. ``start(None)`` is called (outside the
    lock) each time it becomes fully placed; ``state`` is PENDING, CREATED, RESCHEDULING or
    REMOVED."""

    __slots__ = ("group_id", "hex", "bundles", "strategy", "state", "start", "seq", "queued")

    def __init__(self, group_id, bundles, strategy, start):
        self.group_id = group_id
        self.hex = group_id.hex()
        self.bundles = bundles
        self.strategy = strategy
        self.state = "PENDING"
        self.start = start
        self.seq = 0
        self.queued = False

    @property
    def placed(self):
        return all(b.pool is not None for b in self.bundles)


def place(nodes, group):
    """Reserve every unplaced bundle of ``group`` on ``nodes`` (live nodes, in preference
    order) following its strategy; True if all are placed now (else nothing changed)."""
    todo = [b for b in group.bundles if b.node is None]
    if not todo:
        return True
    taken = _choose(nodes, group, todo)
    if taken is None:
        return False
    for bundle, node, devices in taken:
        bundle.node, bundle.reservation = node, devices
        total = {k: from_units(v) for k, v in bundle.units.items()}
        total[BUNDLE_RESOURCE] = from_units(BUNDLE_TOTAL)
        bundle.pool = NodeResources(total, devices=node.resources.reserved_devices(bundle.units, devices))
    return True


def feasible(nodes, group):
    """Could ``group`` ever be placed on ``nodes`` if nothing else held anything?"""
    fresh = [_Fresh(n) for n in nodes]
    bundles = [Bundle(b.index, b.units, b.selector) for b in group.bundles]
    probe = GroupState(group.group_id, bundles, group.strategy, None)
    return _choose(fresh, probe, bundles) is not None


def unplace(bundle):
    """Give a placed bundle's reservation back to its node (group removed)."""
    if bundle.node is not None and bundle.node.alive:
        bundle.node.resources.release(bundle.units, bundle.reservation)
    bundle.node = bundle.reservation = bundle.pool = None


def group_resources(groups, which):
    """``{node id: {name: amount}}`` of every placed bundle under Ray's group resource names
    (``CPU_group_<i>_<id>``, ``CPU_group_<id>``, ``bundle_group_...``); ``which``: "total" or
    "available"."""
    out = {}
    for group in groups:
        if group.state == "REMOVED":
            continue
        for bundle in group.bundles:
            if bundle.pool is None:
                continue
            amounts = bundle.pool.total_dict() if which == "total" else bundle.pool.available_dict()
            node = out.setdefault(bundle.node.node_id, {})
            for k, v in amounts.items():
                node[f"{k}_group_{bundle.index}_{group.hex}"] = v
                wide = f"{k}_group_{group.hex}"
                node[wide] = node.get(wide, 0.0) + v
    return out


class _Fresh:
    """A node as if empty (for :func:`feasible`)."""

    __slots__ = ("node_id", "labels", "resources", "alive")

    def __init__(self, node):
        self.node_id, self.labels, self.alive = node.node_id, node.labels, True
        self.resources = NodeResources(node.resources.total_dict(),
                                       device_ids=node.resources.device_ids)


def _choose(nodes, group, todo):
    """``[(bundle, node, devices)]`` reserved for ``todo``, or None (all rolled back)."""
    used = {}
    for b in group.bundles:
        if b.node is not None:
            used[b.node.node_id] = used.get(b.node.node_id, 0) + 1
    strategy = group.strategy
    if strategy in ("STRICT_PACK", "PACK"):
        pinned = [n for n in nodes if n.node_id in used]
        for node in (pinned or nodes):
            taken = _all_on(node, todo)
            if taken is not None:
                return taken
            if strategy == "STRICT_PACK" and pinned:
                return None
        if strategy == "STRICT_PACK":
            return None
    taken = []
    for bundle in todo:
        chosen = None
        for node in _order(nodes, used, strategy):
            if strategy == "STRICT_SPREAD" and used.get(node.node_id):
                continue
            if matches_all(node.labels, bundle.selector) and node.resources.fits(bundle.units):
                chosen = node
                break
        if chosen is None:
            _rollback(taken)
            return None
        taken.append((bundle, chosen, chosen.resources.acquire(bundle.units)))
        used[chosen.node_id] = used.get(chosen.node_id, 0) + 1
    return taken


def _order(nodes, used, strategy):
    if strategy == "PACK":  # nodes the group already uses first, then the rest in order
        return sorted(nodes, key=lambda n: 0 if used.get(n.node_id) else 1)
    if strategy == "SPREAD":  # least used by the group first
        return sorted(nodes, key=lambda n: used.get(n.node_id, 0))
    return nodes


def _all_on(node, todo):
    taken = []
    for bundle in todo:
        if not matches_all(node.labels, bundle.selector) or not node.resources.fits(bundle.units):
            _rollback(taken)
            return None
        taken.append((bundle, node, node.resources.acquire(bundle.units)))
    return taken


def _rollback(taken):
    for bundle, node, devices in reversed(taken):
        node.resources.release(bundle.units, devices)
    del taken[:]
