"""The scheduler: nodes and their resources, and the demands waiting for them.

It decides; it never sends, spawns or runs user code. A demand (a task to run, an actor to
place) is granted resources on a node at once or queued; every path that returns resources
(:meth:`Scheduler.release`, :meth:`Scheduler.lend`) retries every queued demand, tasks and
actors alike, and hands back the new grants for the caller to act on outside the lock.

Queues are FIFO per resource shape: a demand never overtakes an earlier one of the same shape,
while a small demand may start beside a large one that does not fit yet (as Ray's scheduling
classes do). State is plain data (ids, amounts), so it can move behind a service later.

Thread-safety: all state is guarded by ``Scheduler._lock``, a leaf lock; any thread may call.
"""
import collections
import itertools
import threading

from ray_adapter.core.embedded.resources import NodeResources


class Node:
    """One (real or virtual) node: ``node_id`` (bytes), ``ip``, ``labels``, its resources."""

    __slots__ = ("node_id", "ip", "labels", "resources", "alive", "hostname", "idle_limit")

    def __init__(self, node_id, ip, total, labels=None, hostname=""):
        self.node_id = node_id
        self.ip = ip
        self.labels = dict(labels or {})
        self.resources = NodeResources(total)
        self.alive = True
        self.hostname = hostname
        self.idle_limit = None  # idle workers the pool keeps for it (worked out once)


class Demand:
    """A request for resources: ``units`` (see :mod:`.resources`), and ``start``, opaque to
    the scheduler: what the holder of a new grant calls with it (``start(grant)``)."""

    __slots__ = ("start", "units", "shape", "seq", "queued")

    def __init__(self, start, units, shape=None):
        self.start = start
        self.units = units
        self.shape = shape if shape is not None else tuple(sorted(units.items()))
        self.seq = 0
        self.queued = False


class Grant:
    """Resources granted on ``node``: ``units`` and device ids ``devices`` ({"GPU": [0]})."""

    __slots__ = ("node", "units", "devices", "lent")

    def __init__(self, node, units, devices):
        self.node = node
        self.units = units
        self.devices = devices
        self.lent = None  # units lent back while the holder is blocked (see Scheduler.lend)

    def amounts(self):
        return self.node.resources.amounts(self.units)


class Scheduler:
    def __init__(self, nodes):
        self._lock = threading.Lock()
        self.nodes = {n.node_id: n for n in nodes}
        self._queues = collections.OrderedDict()  # shape -> deque of Demand
        self._seq = itertools.count()

    @property
    def head(self):
        return next(iter(self.nodes.values()))

    # -- feasibility -------------------------------------------------------------------------
    def feasible(self, units):
        """Could the demand ever fit on some live node?"""
        return any(n.alive and n.resources.feasible(units) for n in self.nodes.values())

    # -- granting ----------------------------------------------------------------------------
    def submit(self, demand):
        """Grant ``demand`` now (returns the Grant) or queue it (returns None)."""
        with self._lock:
            demand.seq = next(self._seq)
            queue = self._queues.get(demand.shape)
            if not queue:
                grant = self._try(demand.units)
                if grant is not None:
                    return grant
            if queue is None:
                queue = self._queues[demand.shape] = collections.deque()
            queue.append(demand)
            demand.queued = True
            return None

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

    def _try(self, units):
        for node in self.nodes.values():
            if node.alive and node.resources.fits(units):
                return Grant(node, units, node.resources.acquire(units))
        return None

    def _grant_waiting(self):
        """Grant queued demands that fit now, oldest first within a shape (lock held)."""
        granted = []
        for shape in list(self._queues):
            queue = self._queues[shape]
            while queue:
                demand = queue[0]
                grant = self._try(demand.units)
                if grant is None:
                    break
                queue.popleft()
                demand.queued = False
                granted.append((demand, grant))
            if not queue:
                del self._queues[shape]
        granted.sort(key=lambda pair: pair[0].seq)
        return granted

    @staticmethod
    def run(granted):
        """Start what a grant-returning call granted (call outside any lock)."""
        for demand, grant in granted:
            demand.start(grant)

    def release(self, grant):
        """Return ``grant``'s resources (less any lent part); returns the new grants
        ``[(demand, grant)]`` this made possible."""
        with self._lock:
            units = grant.units
            if grant.lent:
                units = {k: v - grant.lent.get(k, 0) for k, v in units.items()}
                grant.lent = None
            grant.node.resources.release(units, grant.devices)
            return self._grant_waiting()

    def lend(self, grant, names=("CPU",)):
        """The holder is blocked (waiting in ``get``): lend its ``names`` resources back so
        other demands can run. Returns the new grants."""
        with self._lock:
            if grant.lent is not None:
                return []
            grant.lent = {k: v for k, v in grant.units.items() if k in names}
            grant.node.resources.release(grant.lent, None)
            return self._grant_waiting()

    def reclaim(self, grant):
        """Take back what :meth:`lend` lent (may oversubscribe for a moment, as Ray does)."""
        with self._lock:
            if grant.lent:
                grant.node.resources.acquire_amounts(grant.lent)
            grant.lent = None

    def retry(self):
        """Grant whatever fits now (after nodes changed); returns the new grants."""
        with self._lock:
            return self._grant_waiting()

    # -- reporting ---------------------------------------------------------------------------
    def total(self):
        out = {}
        with self._lock:
            for node in self.nodes.values():
                if node.alive:
                    for k, v in node.resources.total_dict().items():
                        out[k] = out.get(k, 0.0) + v
        return out

    def available(self):
        out = {}
        with self._lock:
            for node in self.nodes.values():
                if node.alive:
                    for k, v in node.resources.available_dict().items():
                        out[k] = out.get(k, 0.0) + v
        return out

    def queued(self):
        """How many demands wait, for tests and state APIs."""
        with self._lock:
            return sum(len(q) for q in self._queues.values())
