"""``ray.util.actor_pool``: :class:`ActorPool`, a work queue over a fixed set of actors."""
import collections

from ray_adapter import gaps


class ActorPool:
    """Schedules ``fn(actor, value)`` calls over a set of actor handles (mirrors
    ``ray.util.ActorPool``). Each actor runs one call at a time; surplus values wait.

    ``map`` yields results in submission order, ``map_unordered`` as they complete.
    ``get_next(timeout)`` raises ``TimeoutError`` when the next result is not ready in
    ``timeout`` seconds, ``StopIteration`` when nothing is pending.
    """

    def __init__(self, actors):
        from ray_adapter.ray.actor import ActorHandle

        self._idle = list(actors)
        for a in self._idle:
            if not isinstance(a, ActorHandle):
                raise TypeError(f"ActorPool expects actor handles, got {type(a)}")
        self._ref_to_actor = {}          # in-flight ref -> (index, actor)
        self._index_to_ref = {}          # submission index -> in-flight ref
        self._queue = collections.deque()  # (fn, value) waiting for an idle actor
        self._next_submit = 0
        self._next_return = 0

    # -- submission --------------------------------------------------------------------------
    def submit(self, fn, value):
        """Run ``fn(actor, value)`` (which returns an ObjectRef) on an idle actor, or queue it."""
        if self._idle:
            actor = self._idle.pop()
            ref = fn(actor, value)
            self._ref_to_actor[ref] = (self._next_submit, actor)
            self._index_to_ref[self._next_submit] = ref
            self._next_submit += 1
        else:
            self._queue.append((fn, value))

    def _release(self, actor):
        self._idle.append(actor)
        if self._queue:
            fn, value = self._queue.popleft()
            self.submit(fn, value)

    # -- results -----------------------------------------------------------------------------
    def has_next(self):
        """True while some submitted call has a result not yet returned."""
        return bool(self._ref_to_actor)

    def get_next(self, timeout=None, ignore_if_timedout=False):
        """The next result in submission order."""
        import ray_adapter.ray as ray

        if not self.has_next():
            raise StopIteration("No more results to get")
        if self._next_return >= self._next_submit:
            raise ValueError("It is not allowed to call get_next() after get_next_unordered().")
        ref = self._index_to_ref[self._next_return]
        if timeout is not None:
            ready, _ = ray.wait([ref], timeout=timeout)
            if not ready:
                if ignore_if_timedout:
                    self._forget(ref)
                raise TimeoutError(f"Timed out waiting for result after {timeout} s")
        del self._index_to_ref[self._next_return]
        self._next_return += 1
        _, actor = self._ref_to_actor.pop(ref)
        self._release(actor)
        return ray.get(ref)

    def _forget(self, ref):
        index, actor = self._ref_to_actor.pop(ref)
        self._index_to_ref.pop(index, None)
        self._next_return = index + 1
        self._release(actor)

    def get_next_unordered(self, timeout=None, ignore_if_timedout=False):
        """The result of whichever pending call finishes first."""
        import ray_adapter.ray as ray

        if not self.has_next():
            raise StopIteration("No more results to get")
        ready, _ = ray.wait(list(self._ref_to_actor), num_returns=1, timeout=timeout)
        if not ready:
            raise TimeoutError(f"Timed out waiting for result after {timeout} s")
        ref = ready[0]
        index, actor = self._ref_to_actor.pop(ref)
        self._index_to_ref.pop(index, None)
        # Ordered results resume after the newest one taken unordered.
        self._next_return = max(self._next_return, index + 1)
        self._release(actor)
        return ray.get(ref)

    def map(self, fn, values):
        """Yield ``fn(actor, v)`` results for ``values`` in order."""
        while self.has_next():  # drain leftovers of earlier calls, as Ray does
            try:
                self.get_next_unordered(timeout=0)
            except TimeoutError:
                break
        for v in values:
            self.submit(fn, v)
        while self.has_next():
            yield self.get_next()

    def map_unordered(self, fn, values):
        """Yield ``fn(actor, v)`` results for ``values`` as they complete."""
        for v in values:
            self.submit(fn, v)
        while self.has_next():
            yield self.get_next_unordered()

    # -- membership --------------------------------------------------------------------------
    def has_free(self):
        """True if an actor is idle and nothing is queued."""
        return bool(self._idle) and not self._queue

    def pop_idle(self):
        """Remove and return an idle actor, or None."""
        return self._idle.pop() if self.has_free() else None

    def push(self, actor):
        """Add an actor to the pool (it must not be in it already)."""
        busy = [a for _, a in self._ref_to_actor.values()]
        if actor in self._idle or actor in busy:
            raise ValueError("Actor already belongs to current ActorPool")
        self._release(actor)


__getattr__ = gaps.module_getattr("ray.util.actor_pool")
