"""Handle scope: when a non-detached actor has no handle left anywhere, it ends, as in Ray.

Holders counted per actor (:class:`ScopeState`):

- ``handles``: handle objects in the driver (:meth:`ActorScope.add_handle` / ``drop_handle``;
  ``own`` counts these alone, for the State API) and stored values that have a handle pickled
  inside (``add_handles`` when the value is stored, ``drop_handles`` once the object table
  freed it);
- ``borrowers``: worker processes holding a handle (each reports its first and last one);
- ``in_transit``: tasks, calls and actor constructors whose arguments carry a handle, until
  they finish (the worker that unpickles one reports a borrow before that);
- ``escaped``: a handle went where it cannot be tracked (a user's own pickle): the actor then
  lives until shutdown;
- ``detached``: never ends for scope.

Once nothing holds it, the actor is marked out of scope and ends after the calls it already
has (:meth:`ActorScope.end_if_idle`).

Thread-safety: shares the actor manager's lock (the counters are part of actor state).
"""


class ScopeState:
    __slots__ = ("handles", "own", "borrowers", "in_transit", "escaped", "detached", "out_of_scope")

    def __init__(self, detached):
        self.handles = 0
        self.own = 0  # of ``handles``: the driver's handle objects
        self.borrowers = 0
        self.in_transit = 0
        self.escaped = False
        self.detached = detached
        self.out_of_scope = False

    def held(self):
        return (self.handles > 0 or self.borrowers > 0 or self.in_transit > 0 or self.escaped
                or self.detached)


class ActorScope:
    def __init__(self, manager, lock):
        self._manager = manager
        self._lock = lock

    @staticmethod
    def new_state(detached):
        return ScopeState(detached)

    def _actor(self, actor_id):
        return self._manager.get(actor_id)

    # -- holders -----------------------------------------------------------------------------
    def add_handle(self, actor_id):
        """The driver made a handle object for ``actor_id``."""
        self._count((actor_id,), 1, own=True)

    def drop_handle(self, actor_id):
        """Undo :meth:`add_handle`."""
        self._count((actor_id,), -1, own=True)

    def add_handles(self, actor_ids):
        """One more holder per id (a stored value holds a handle to each, repeats counted)."""
        self._count(actor_ids, 1, own=False)

    def drop_handles(self, actor_ids):
        """Undo :meth:`add_handles`."""
        self._count(actor_ids, -1, own=False)

    def _count(self, actor_ids, delta, own):
        """``handles`` (and ``own``: the driver's handle objects) of each id += ``delta``; the
        actors nothing holds any more end."""
        ended = []
        with self._lock:
            for actor_id in actor_ids:
                actor = self._actor(actor_id)
                if actor is None:
                    continue
                actor.scope.handles += delta
                if own:
                    actor.scope.own += delta
                if delta < 0:
                    ended += self._check_locked(actor)
        self._end(ended)

    def borrow(self, worker, actor_ids, delta):
        """``worker`` took (``delta`` 1) or dropped (-1) its handles to ``actor_ids``."""
        ended = []
        with self._lock:
            for actor_id in actor_ids:
                actor = self._actor(actor_id)
                if actor is None:
                    continue
                if delta > 0 and actor_id not in worker.borrowed:
                    worker.borrowed.add(actor_id)
                    actor.scope.borrowers += 1
                elif delta < 0 and actor_id in worker.borrowed:
                    worker.borrowed.discard(actor_id)
                    actor.scope.borrowers -= 1
                    ended += self._check_locked(actor)
        self._end(ended)

    def holders(self, workers):
        """``[(actor_id, holder, detached)]``: each live actor's handle holders, once per
        holder: None for this process's driver, else the worker (an attached driver among them)
        of ``workers`` that borrowed one; ``detached``: the actor's lifetime is detached."""
        out = []
        with self._lock:
            for actor in self._manager.in_table():
                if actor.scope.own > 0:
                    out.append((actor.actor_id, None, actor.scope.detached))
            for worker in workers:
                for actor_id in worker.borrowed:
                    actor = self._actor(actor_id)
                    if actor is not None:
                        out.append((actor_id, worker, actor.scope.detached))
        return out

    def worker_gone(self, worker):
        """A dead worker's handles died with it."""
        self.borrow(worker, list(worker.borrowed), -1)

    def carry(self, actor_ids):
        if actor_ids:
            with self._lock:
                self.carry_locked(actor_ids)

    def carry_locked(self, actor_ids):
        for actor_id in actor_ids:
            actor = self._actor(actor_id)
            if actor is not None:
                actor.scope.in_transit += 1

    def uncarry(self, actor_ids):
        if not actor_ids:
            return
        ended = []
        with self._lock:
            for actor_id in actor_ids:
                actor = self._actor(actor_id)
                if actor is not None:
                    actor.scope.in_transit -= 1
                    ended += self._check_locked(actor)
        self._end(ended)

    def escape(self, actor_ids):
        """Handles to these actors went where they cannot be tracked: keep them for the session."""
        with self._lock:
            for actor_id in actor_ids:
                actor = self._actor(actor_id)
                if actor is not None:
                    actor.scope.escaped = True

    # -- ending ------------------------------------------------------------------------------
    def _check_locked(self, actor):
        """``[actor]`` if nothing holds it any more and it has no calls left (a dead one: to be
        forgotten, its record kept among the capped departed ones), else ``[]``."""
        from ray_adapter.core.embedded.actor_records import ActorState

        if actor.scope.held():
            return []
        if actor.state is ActorState.DEAD:
            return [actor]
        actor.scope.out_of_scope = True
        return [] if actor.inflight or actor.pending else [actor]

    def end_if_idle(self, actor):
        """After a call finished: end an out-of-scope actor that has no calls left."""
        if not actor.scope.out_of_scope:
            return
        with self._lock:
            idle = not actor.inflight and not actor.pending
        if idle:
            self._end([actor])

    def _end(self, actors):
        from ray_adapter.core import errors

        for actor in actors:  # (a dead one's death stays what it was: die() keeps it)
            self._manager.die(actor, errors.ActorDied(
                actor.actor_id, errors.ActorDeath.OUT_OF_SCOPE, actor.options.class_name))
            self._manager.forget(actor)
