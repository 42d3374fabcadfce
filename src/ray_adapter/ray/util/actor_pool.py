"""``ray.util.actor_pool``: :class:`ActorPool`, a work queue over a fixed set of actors."""
from ray_adapter import gaps
from ray_adapter.ray._private.worker import get, wait
from ray_adapter.ray.exceptions import ActorDiedError

_TIMED_OUT = "Timed out waiting for result"


class ActorPool:
    """Schedules ``fn(actor, value)`` calls over a set of actor handles (mirrors
    ``ray.util.ActorPool`` of Ray 2.60). ``fn`` returns an ObjectRef (or a list of them, for a
    method with ``num_returns > 1``); the actor counts as busy until its result is taken with
    one of the getters. A value submitted while no actor is idle waits in the pool and is
    submitted when a result is taken (or an actor pushed).

    Not thread-safe, like Ray's: one thread uses a pool.

    - ``map(fn, values)`` / ``map_unordered(fn, values)`` first discard what earlier
      ``submit()`` calls left: ``map`` takes each pending result that is ready now and ignores
      (drops, without waiting) the others; ``map_unordered`` waits for every one of them.
      Either raises the error of a discarded call it takes (``RayTaskError``...). Then they
      submit every value at once and return a generator of the results (in submission order,
      or as they complete).
    - ``get_next(timeout=None, ignore_if_timedout=False)`` returns the next result in
      submission order; ``get_next_unordered(...)`` whichever pending result is ready first.
      Nothing pending: ``StopIteration("No more results to get")``. Not ready within
      ``timeout`` seconds: ``TimeoutError("Timed out waiting for result")``, the call stays
      pending; with ``ignore_if_timedout`` the call is dropped and its actor counts as idle
      again (``TimeoutError("Timed out waiting for result. The task ObjectRef(...) has been
      ignored.")``). ``get_next`` after ``get_next_unordered`` took a later call than the next
      ordered one: ``ValueError``. A task's error is raised by the getter; an actor whose call
      raised ``ActorDiedError`` leaves the pool.
    - ``get_next_unordered(timeout, ignore_if_timedout=True)`` that times out drops the oldest
      pending call (Ray 2.60 raises ``UnboundLocalError`` there, a bug later Ray versions
      fixed this way).
    - ``has_next()``: some result not yet taken; ``has_free()``: an idle actor and no waiting
      value; ``pop_idle()``: removes and returns an idle actor (None when ``has_free()`` is
      false); ``push(actor)``: adds an actor (``ValueError`` if it is in the pool already).
    """

    def __init__(self, actors):
        self._idle_actors = list(actors)
        self._pending = {}    # key of an in-flight call's refs -> (submission index, actor)
        self._by_index = {}   # submission index -> the refs fn returned (a ref or a list)
        self._pending_submits = []    # (fn, value) submitted while no actor was idle, oldest first
        self._next_task_index = 0
        self._next_return_index = 0

    # -- submission --------------------------------------------------------------------------
    def submit(self, fn, value):
        """Run ``fn(actor, value)`` on an idle actor now, or keep it until one is idle."""
        if not self._idle_actors:
            self._pending_submits.append((fn, value))
            return
        actor = self._idle_actors.pop()
        refs = fn(actor, value)
        self._pending[_key(refs)] = (self._next_task_index, actor)
        self._by_index[self._next_task_index] = refs
        self._next_task_index += 1

    def _return_actor(self, actor, alive=True):
        if alive:
            self._idle_actors.append(actor)
        if self._pending_submits and self._idle_actors:
            self.submit(*self._pending_submits.pop(0))

    def _take(self, refs, actor):
        """The result of a call that has left the pending set; its actor is idle again unless
        the call says the actor died."""
        alive = True
        try:
            return get(refs)
        except ActorDiedError:
            alive = False
            raise
        finally:
            self._return_actor(actor, alive)

    def _ignore(self, refs, actor):
        self._return_actor(actor)
        raise TimeoutError(f"{_TIMED_OUT}. The task {refs} has been ignored.")

    # -- results -----------------------------------------------------------------------------
    def has_next(self):
        """True while some submitted call has a result not yet returned."""
        return bool(self._pending)

    def get_next(self, timeout=None, ignore_if_timedout=False):
        """The next result in submission order (see the class docstring for the errors)."""
        if not self.has_next():
            raise StopIteration("No more results to get")
        if self._next_return_index >= self._next_task_index:
            raise ValueError("It is not allowed to call get_next() after get_next_unordered().")
        refs = self._by_index[self._next_return_index]
        timed_out = False
        if timeout is not None:
            ready, _ = wait([refs], timeout=timeout)
            if not ready:
                if not ignore_if_timedout:
                    raise TimeoutError(_TIMED_OUT)
                timed_out = True
        del self._by_index[self._next_return_index]
        self._next_return_index += 1
        _, actor = self._pending.pop(_key(refs))
        if timed_out:
            self._ignore(refs, actor)
        return self._take(refs, actor)

    def get_next_unordered(self, timeout=None, ignore_if_timedout=False):
        """The result of whichever pending call is ready first (see the class docstring)."""
        if not self.has_next():
            raise StopIteration("No more results to get")
        ready, _ = wait(list(self._pending), num_returns=1, timeout=timeout)
        if ready:
            key = ready[0]
        elif not ignore_if_timedout:
            raise TimeoutError(_TIMED_OUT)
        else:
            key = next(iter(self._pending))  # the oldest pending call
        index, actor = self._pending.pop(key)
        refs = self._by_index.pop(index)
        # Ordered results resume after the newest one taken unordered.
        self._next_return_index = max(self._next_return_index, index + 1)
        if not ready:
            self._ignore(refs, actor)
        return self._take(refs, actor)

    def map(self, fn, values):
        """Submit ``fn(actor, v)`` for every value now; a generator of the results in order.
        What earlier ``submit()`` calls left is discarded first (see the class docstring)."""
        while self.has_next():
            try:
                self.get_next(timeout=0, ignore_if_timedout=True)
            except TimeoutError:
                pass
        for v in values:
            self.submit(fn, v)
        return self._results(self.get_next)

    def map_unordered(self, fn, values):
        """Submit ``fn(actor, v)`` for every value now; a generator of the results as they
        complete. Earlier ``submit()`` calls are waited for and discarded first."""
        while self.has_next():
            self.get_next_unordered()
        for v in values:
            self.submit(fn, v)
        return self._results(self.get_next_unordered)

    def _results(self, getter):
        while self.has_next():
            yield getter()

    # -- membership --------------------------------------------------------------------------
    def has_free(self):
        """True if an actor is idle and no submitted value is waiting for one."""
        return bool(self._idle_actors) and not self._pending_submits

    def pop_idle(self):
        """Remove and return an idle actor; None when :meth:`has_free` is false."""
        return self._idle_actors.pop() if self.has_free() else None

    def push(self, actor):
        """Add ``actor`` to the pool as idle (it takes a waiting value at once, if any);
        ``ValueError`` if it belongs to the pool already."""
        busy = [a for _, a in self._pending.values()]
        if actor in self._idle_actors or actor in busy:
            raise ValueError("Actor already belongs to current ActorPool")
        self._return_actor(actor)


def _key(refs):
    """A dict key for what ``fn`` returned: a list of refs (num_returns > 1) as a tuple."""
    return tuple(refs) if isinstance(refs, list) else refs


__getattr__ = gaps.module_getattr("ray.util.actor_pool")
