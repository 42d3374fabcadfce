"""What the scheduler deals in: a :class:`Demand` (resources wanted, and where) and a
:class:`Grant` (resources given on a node or in a bundle). Plain records: the scheduler
changes them under its lock; holders read what they were given. :class:`InfeasibleWarnings`
says once per request shape that no node can satisfy a demand."""
import sys
import threading

from ray_adapter.core.embedded.group_placement import BUNDLE_RESOURCE, BUNDLE_SHARE


class Demand:
    """A request for resources: ``units`` (see :mod:`.resources`) and ``placement`` (None:
    default), for ``holder`` (a task or actor record) on behalf of ``handler`` (its manager).
    The scheduler only calls :meth:`start`, :meth:`fail` and :meth:`evict`, which hand the
    holder to the handler's ``on_grant(holder, grant)``, ``on_unschedulable(holder, reason)``
    (it can never be granted: ``"node_affinity"``, ``"group_removed"``) and ``on_evict(holder)``
    (its granted bundle is gone). No closures per demand: a queued task costs the garbage
    collector as few objects as possible."""

    __slots__ = ("handler", "holder", "units", "placement", "shape", "seq", "queued", "failure")

    def __init__(self, handler, holder, units, placement=None, shape=None):
        self.handler = handler
        self.holder = holder
        self.units = units
        self.placement = placement
        key = placement.key() if placement is not None else None
        self.shape = (shape if shape is not None else tuple(sorted(units.items())), key)
        self.seq = 0
        self.queued = False
        self.failure = None

    def start(self, grant):
        self.handler.on_grant(self.holder, grant)

    def fail(self, reason):
        self.handler.on_unschedulable(self.holder, reason)

    def evict(self, reason):
        self.handler.on_evict(self.holder)


class Grant:
    """Resources granted on ``node``: ``units`` and device ids ``devices`` ({"GPU": [0]}),
    taken from ``pool`` (the node's resources, or a bundle's: then ``bundle`` is set)."""

    __slots__ = ("node", "units", "devices", "lent", "pool", "bundle", "demand", "passes",
                 "__weakref__")

    def __init__(self, node, units, devices, pool=None, bundle=None, demand=None):
        self.passes = 0  # pipelining: tasks the lease passed to (task_pipeline)
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


class InfeasibleWarnings:
    """Warns on stderr, once per resource shape, that a task's or actor's request fits no node
    (it stays pending, as in Ray, whose autoscaler warns the same way).

    Thread-safety: its own leaf lock guards the shapes already warned about; the warning is
    written after it is released.
    """

    def __init__(self, total):
        """``total()``: the cluster's resources, ``{name: amount}`` (named in the warning)."""
        self._total = total
        self._lock = threading.Lock()
        self._seen = set()

    def warn(self, name, request):
        """``request``: ``{resource: amount}`` of ``name``."""
        key = tuple(sorted(request.items()))
        with self._lock:
            if key in self._seen:
                return
            self._seen.add(key)
        sys.stderr.write(
            f"ray-adapter: warning: the task or actor {name!r} requests {dict(request)}, which no "
            f"node can satisfy (cluster resources: {self._total()}); it stays pending "
            "until such resources exist, as in Ray.\n")
