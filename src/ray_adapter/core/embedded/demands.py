"""What the scheduler deals in: a :class:`Demand` (resources wanted, and where) and a
:class:`Grant` (resources given on a node or in a bundle). Plain records: the scheduler
changes them under its lock; holders read what they were given."""
from ray_adapter.core.embedded.group_placement import BUNDLE_RESOURCE, BUNDLE_SHARE


class Demand:
    """A request for resources: ``units`` (see :mod:`.resources`) and ``placement`` (None:
    default). ``start(grant)`` and ``fail(reason)`` are opaque to the scheduler: what the holder
    calls with a new grant, or when the demand can never be granted (``"node_affinity"``,
    ``"group_removed"``); ``evict(reason)``: its granted bundle is gone (``"group_removed"``)."""

    __slots__ = ("start", "fail", "evict", "units", "placement", "shape", "seq", "queued",
                 "failure", "holder")

    def __init__(self, start, units, placement=None, fail=None, evict=None, shape=None):
        self.start = start
        self.fail = fail
        self.evict = evict
        self.units = units
        self.placement = placement
        key = placement.key() if placement is not None else None
        self.shape = (shape if shape is not None else tuple(sorted(units.items())), key)
        self.seq = 0
        self.queued = False
        self.failure = None
        self.holder = None  # what the demand is for (a task record), for its holder's own use


class Grant:
    """Resources granted on ``node``: ``units`` and device ids ``devices`` ({"GPU": [0]}),
    taken from ``pool`` (the node's resources, or a bundle's: then ``bundle`` is set)."""

    __slots__ = ("node", "units", "devices", "lent", "pool", "bundle", "demand", "__weakref__")

    def __init__(self, node, units, devices, pool=None, bundle=None, demand=None):
        self.node = node
        self.units = units
        self.devices = devices
        self.lent = None  # units lent back while the holder is blocked (see Scheduler.lend)
        self.pool = pool if pool is not None else node.resources
        self.bundle = bundle
        self.demand = demand

    def amounts(self):
        return self.node.resources.amounts(self.units)

    def pool_units(self):
        if self.bundle is None:
            return self.units
        return dict(self.units, **{BUNDLE_RESOURCE: BUNDLE_SHARE})
