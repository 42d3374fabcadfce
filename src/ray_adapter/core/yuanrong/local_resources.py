"""yr-local: the resources tasks and actors declare, granted by the adapter as Ray grants them.

yr's local mode enforces no resources (a ``num_gpus=1`` task runs while an actor holds the only
GPU) and assigns no device ids. In local mode the adapter therefore keeps the accounting
itself, with the embedded runtime's scheduler over the one local node (the one that already
places the placement-group bundles, see :mod:`.resource_groups`):

- a task asks for its resources when its thread starts (after yr resolved its arguments, as
  Ray leases a worker once the arguments are ready); an actor when its constructor runs. A
  request that does not fit waits, queued in the scheduler (FIFO per resource shape), on an
  Event of its own, set when the scheduler grants it (a release, a group placed), or when it
  is aborted (cancel, kill, shutdown): no polling;
- the grant's device ids are the call's ``ray.get_gpu_ids()`` / accelerator ids;
- a task gives its resources back when it ends, an actor when it dies;
- a task blocked in ``get`` / ``wait`` lends its CPUs back meanwhile (as Ray and the embedded
  runtime do), so nested tasks cannot deadlock on the CPUs their callers hold.

What a thread cannot have: ``CUDA_VISIBLE_DEVICES`` is one variable of the process, shared by
every task and the driver, and CUDA reads it once per process; it is left as it is (code
picks its device from ``ray.get_gpu_ids()``). A waiting task or actor occupies the yr thread
that runs it (yr local mode makes one per call it cannot serve at once).

Thread-safety: ``_lock`` (a leaf lock) guards ``_waiting`` and ``_held``; the scheduler has its
own. The scheduler's grants are started by :meth:`Scheduler.run`, outside both locks.
"""
import threading

from ray_adapter.core import errors
from ray_adapter.core.embedded.demands import Demand, InfeasibleWarnings
from ray_adapter.core.embedded.resources import to_units


class _Waiter:
    """One request: granted (``grant``) or aborted (``error``), then settled: ``event`` set,
    and ``callback(grant, error)`` called when the requester did not block (``deferred``)."""

    __slots__ = ("key", "name", "actor", "event", "grant", "error", "demand", "callback", "deferred")

    def __init__(self, key, name, callback=None, actor=False):
        self.key = key
        self.name = name
        self.actor = actor  # an actor's creation (key: its id), not a task
        self.callback = callback
        self.deferred = False  # acquire() returned without it: the callback reports it
        self.event = threading.Event()
        self.grant = None
        self.error = None
        self.demand = None


class LocalResources:
    """Grants of the local node's resources to tasks and actors (keyed by task or actor id)."""

    def __init__(self, scheduler):
        self.scheduler = scheduler
        self._lock = threading.Lock()
        self._waiting = {}  # key -> _Waiter not granted yet
        self._held = {}     # key -> Grant held by a running task or a live actor
        self._closed = None  # the error every request gets after close()
        self._infeasible = InfeasibleWarnings(scheduler.total)  # shapes warned about, once each

    # -- the requesting thread (a yr thread running a task or an actor's constructor) --------
    def acquire(self, key, resources, placement=None, name="", callback=None, actor=False):
        """Block until ``resources`` (``{name: amount}``; ``placement``: a core Placement or
        None) are granted to ``key``; returns the Grant (None when nothing is asked). Raises
        the error the request was aborted with (cancelled, killed, shut down, or
        unschedulable). ``name`` names the task (or the actor's class, with ``actor``) in the
        error of a request that can never be granted (Unschedulable, PlacementGroupRemoved;
        for an actor, ActorDied with cause UNSCHEDULABLE / PLACEMENT_GROUP_REMOVED).

        With ``callback``, never blocks: returns ``(grant, False)`` when settled at once (or
        raises), else ``(None, True)``, and ``callback(grant, error)`` runs once granted or
        aborted, in the thread that freed the resources or aborted it (it must not block)."""
        units = {k: to_units(v) for k, v in (resources or {}).items() if v}
        in_group = placement is not None and placement.in_group
        if not units and not in_group:
            return None if callback is None else (None, False)
        waiter = _Waiter(key, name, callback, actor)
        with self._lock:
            if self._closed is not None:
                raise self._closed
            self._waiting[key] = waiter
        where = placement if in_group or (placement is not None and placement.kind == "node") else None
        if not self.scheduler.feasible(units, where):
            self._infeasible.warn(name, resources)
        demand = waiter.demand = Demand(self, waiter, units, where)
        grant = self.scheduler.submit(demand)
        if grant is not None:
            self.on_grant(waiter, grant)
        elif demand.failure is not None:
            self.on_unschedulable(waiter, demand.failure)
        if callback is not None:
            with self._lock:
                settled = waiter.event.is_set()
                waiter.deferred = not settled
            if not settled:
                return None, True
        waiter.event.wait()  # set by on_grant / on_unschedulable / abort / close
        if waiter.error is not None:
            raise waiter.error
        return waiter.grant if callback is None else (waiter.grant, False)

    def _settle(self, waiter):
        with self._lock:
            waiter.event.set()
            deferred = waiter.deferred
        if deferred:
            waiter.callback(waiter.grant, waiter.error)

    def release(self, key):
        """``key`` ended (a task finished, an actor died): its grant goes back to the node, and
        a request still waiting for ``key`` is aborted (an actor killed while it waited)."""
        with self._lock:
            grant = self._held.pop(key, None)
            waiting = key in self._waiting
        if waiting:
            self.abort(key, errors.CoreError(f"{key.hex()} ended before it was scheduled"))
        if grant is not None:
            self.scheduler.release_and_start(grant)

    def abort(self, key, error):
        """Fail ``key``'s waiting request with ``error``; True if one was waiting."""
        with self._lock:
            waiter = self._waiting.pop(key, None)
            if waiter is None:
                return False
            waiter.error = error
        self.scheduler.withdraw(waiter.demand)  # granted meanwhile: on_grant gives it back
        self._settle(waiter)
        return True

    def close(self, error):
        """Shutdown: every waiting request fails with ``error``; later ones too."""
        with self._lock:
            self._closed = error
            waiting, self._waiting = list(self._waiting.values()), {}
            for waiter in waiting:
                waiter.error = error
        for waiter in waiting:
            self.scheduler.withdraw(waiter.demand)
            self._settle(waiter)

    # -- blocked in get / wait -------------------------------------------------------------
    def lend(self, grant):
        """The holder of ``grant`` waits in ``get``/``wait``: its CPUs go back meanwhile."""
        self.scheduler.run(self.scheduler.lend(grant))

    def reclaim(self, grant):
        """The holder of ``grant`` runs again: it takes back what :meth:`lend` lent."""
        self.scheduler.reclaim(grant)

    # -- the scheduler's handler (called from Scheduler.run, outside its lock) ---------------
    def on_grant(self, waiter, grant):
        with self._lock:
            live = self._waiting.get(waiter.key) is waiter
            if live:
                del self._waiting[waiter.key]
                self._held[waiter.key] = grant
                waiter.grant = grant
        if not live:  # aborted while the grant was on its way: give it back
            self.scheduler.release_and_start(grant)
            return
        self._settle(waiter)

    def on_unschedulable(self, waiter, reason):
        group_id = getattr(waiter.demand.placement, "group_id", None)
        if waiter.actor:  # as the embedded runtime: ActorUnschedulableError for its calls
            if reason == "group_removed":
                error = errors.ActorDied(waiter.key, errors.ActorDeath.PLACEMENT_GROUP_REMOVED,
                                         waiter.name, group_id=group_id, started=False)
            else:
                error = errors.ActorDied(waiter.key, errors.ActorDeath.UNSCHEDULABLE, waiter.name)
        elif reason == "group_removed":
            error = errors.PlacementGroupRemoved(group_id)
        else:
            error = errors.Unschedulable(waiter.name, errors.UnschedulableReason.NODE_AFFINITY)
        self.abort(waiter.key, error)

    def on_evict(self, waiter):
        """Its placement group was removed while it ran: a thread cannot be stopped; the call
        runs to its end (the embedded runtime kills the worker)."""
