"""The driver's object table: every object's value, its reference count and pins, and the
callbacks waiting for it.

Thread-safety: the table's state is guarded by its own lock, a leaf lock (nothing is called
out while it is held). Callbacks registered with :meth:`ObjectTable.when_ready` run outside
that lock, in the thread that sealed the last awaited object (a worker's reader thread, the
thread that called ``put``...); they must not block. Callbacks that seal further objects (a
failure cascading down a chain of dependent tasks) are run iteratively by the outermost seal in
that thread, never by recursion.

Lifetime: an object is freed once it is sealed, no reference is left (callers' refs and the
holds of pending tasks on their arguments) and it is not pinned (a ref to it escaped to where
it cannot be tracked).
"""
import collections
import enum
import threading
from _thread import allocate_lock as _allocate_lock
import traceback

from ray_adapter.core import errors
from ray_adapter.core.embedded.channel import flush_posted
from ray_adapter.core.execution import wait_seconds


class ObjectState(enum.Enum):
    PENDING = "pending"   # its producing task has not finished
    READY = "ready"       # sealed: value or error


class Entry:
    __slots__ = ("state", "data", "is_error", "refs", "pinned", "waiters", "producer")

    def __init__(self, producer=None, refs=0):
        self.state = ObjectState.PENDING
        self.data = None          # Serialized value or pickled core error
        self.is_error = False
        self.refs = refs
        self.pinned = False
        self.waiters = None       # list of _Waiter while pending
        self.producer = producer  # id of the task that produces it, while pending


class _Waiter:
    """Counts sealed objects for one ``when_ready`` registration."""

    __slots__ = ("remaining", "callback", "fired", "entries")

    def __init__(self, remaining, callback):
        self.remaining = remaining
        self.callback = callback
        self.fired = False
        self.entries = ()


class _Drain(threading.local):
    def __init__(self):
        self.active = False
        self.queue = collections.deque()


class ObjectTable:
    """Objects by id (bytes)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._objects = {}
        self._drain = _Drain()
        self._closed = False

    # -- creation ----------------------------------------------------------------------------
    def create(self, object_ids, refs, producer):
        """Pending entries for a task's returns, each with ``refs`` references."""
        with self._lock:
            for oid in object_ids:
                self._objects[oid] = Entry(producer, refs)

    def put(self, object_id, data, refs=1):
        """A sealed entry holding ``data`` (a Serialized value)."""
        entry = Entry(None, refs)
        entry.state, entry.data = ObjectState.READY, data
        with self._lock:
            self._objects[object_id] = entry

    def seal(self, object_id, data, is_error):
        """Seal a pending object; runs the callbacks it completes (outside the lock)."""
        self.seal_many(((object_id, data, is_error),))

    def seal_many(self, items):
        fired = []
        with self._lock:
            for object_id, data, is_error in items:
                entry = self._objects.get(object_id)
                if entry is None or entry.state is ObjectState.READY:
                    continue
                entry.state, entry.data, entry.is_error = ObjectState.READY, data, is_error
                entry.producer = None
                waiters, entry.waiters = entry.waiters, None
                for waiter in waiters or ():
                    waiter.remaining -= 1
                    if waiter.remaining <= 0 and not waiter.fired:
                        waiter.fired = True
                        fired.append(waiter.callback)
                self._free_if_unused(object_id, entry)
        if fired:
            self._run(fired)

    def _run(self, callbacks):
        drain = self._drain
        if drain.active:
            drain.queue.extend(callbacks)
            return
        drain.active = True
        try:
            queue = drain.queue
            queue.extend(callbacks)
            while queue:
                callback = queue.popleft()
                try:
                    callback(True)
                except Exception:  # one broken callback must not lose the others
                    traceback.print_exc()
        finally:
            drain.active = False
            drain.queue.clear()

    # -- references --------------------------------------------------------------------------
    def add_ref(self, object_id, count=1):
        with self._lock:
            entry = self._objects.get(object_id)
            if entry is not None:
                entry.refs += count

    def hold(self, object_ids):
        """One more reference on each existing id (a pending task's arguments); returns the
        ids that exist. Raises ObjectFreed for the first that does not."""
        with self._lock:
            for oid in object_ids:
                if oid not in self._objects:
                    raise errors.ObjectFreed(oid)
            for oid in object_ids:
                self._objects[oid].refs += 1

    def drop_ref(self, object_id, count=1):
        with self._lock:
            entry = self._objects.get(object_id)
            if entry is not None:
                entry.refs -= count
                self._free_if_unused(object_id, entry)

    def try_drop_ref(self, object_id):
        """:meth:`drop_ref` if the lock is free now; False (nothing done) if it is held, by
        another thread or by this one (a finalizer run inside the table's own code)."""
        if not self._lock.acquire(False):
            return False
        try:
            entry = self._objects.get(object_id)
            if entry is not None:
                entry.refs -= 1
                self._free_if_unused(object_id, entry)
        finally:
            self._lock.release()
        return True

    def release(self, object_ids):
        """Undo :meth:`hold`."""
        with self._lock:
            for oid in object_ids:
                entry = self._objects.get(oid)
                if entry is not None:
                    entry.refs -= 1
                    self._free_if_unused(oid, entry)

    def pin(self, object_ids):
        """Never free these objects (refs to them escaped where they cannot be tracked)."""
        with self._lock:
            for oid in object_ids:
                entry = self._objects.get(oid)
                if entry is not None:
                    entry.pinned = True

    def _free_if_unused(self, object_id, entry):
        if entry.refs <= 0 and entry.state is ObjectState.READY and not entry.pinned:
            del self._objects[object_id]

    # -- reading -----------------------------------------------------------------------------
    def __len__(self):
        return len(self._objects)

    def exists(self, object_id):
        return object_id in self._objects

    def producer(self, object_id):
        """The id of the task producing ``object_id`` while it is pending, else None."""
        entry = self._objects.get(object_id)
        return entry.producer if entry is not None else None

    def values(self, object_ids):
        """``[(data, is_error)]`` of sealed objects; raises ObjectFreed for a missing one."""
        out = []
        with self._lock:
            for oid in object_ids:
                entry = self._objects.get(oid)
                if entry is None or entry.state is not ObjectState.READY:
                    raise errors.ObjectFreed(oid)
                out.append((entry.data, entry.is_error))
        return out

    def first_error(self, object_ids):
        """The data of the first of ``object_ids`` sealed with an error, or None."""
        with self._lock:
            for oid in object_ids:
                entry = self._objects.get(oid)
                if entry is not None and entry.is_error:
                    return entry.data
        return None

    def ready_flags(self, object_ids):
        """True per id that is sealed or gone (a freed object counts as ready, as in Ray)."""
        with self._lock:
            objs = self._objects
            return [oid not in objs or objs[oid].state is ObjectState.READY for oid in object_ids]

    # -- waiting -----------------------------------------------------------------------------
    def when_ready(self, object_ids, callback, needed=None):
        """Call ``callback(True)`` once ``needed`` (default: all) of ``object_ids`` are sealed
        (at once, in this thread, if they are). Missing ids count as ready. Returns a token for
        :meth:`cancel_wait`; on shutdown the callback gets ``False``."""
        with self._lock:
            closed = self._closed
            if closed:
                fire, waiter = True, None
            else:
                pending = [self._objects[oid] for oid in object_ids
                           if oid in self._objects and self._objects[oid].state is ObjectState.PENDING]
                short = (len(object_ids) if needed is None else needed) - (len(object_ids) - len(pending))
                fire = short <= 0
                waiter = None
                if not fire:
                    waiter = _Waiter(short, callback)
                    waiter.entries = pending
                    for entry in pending:
                        if entry.waiters is None:
                            entry.waiters = [waiter]
                        else:
                            entry.waiters.append(waiter)
        if closed:
            callback(False)
        elif fire:
            self._run([callback])
        return waiter

    def cancel_wait(self, waiter):
        """Forget a :meth:`when_ready` registration that has not fired; True if it had not."""
        if waiter is None:
            return False
        with self._lock:
            if waiter.fired:
                return False
            waiter.fired = True
            for entry in waiter.entries:
                if entry.waiters:
                    try:
                        entry.waiters.remove(waiter)
                    except ValueError:
                        pass
            waiter.entries = ()
        return True

    def wait(self, object_ids, needed, timeout):
        """Block the calling thread until ``needed`` of ``object_ids`` are sealed; True if so
        within ``timeout`` seconds (None: forever). Raises NotInitialized on shutdown."""
        flush_posted()  # about to block: the work this waits for may still be queued here
        signal = _allocate_lock()  # held: released by the callback (cheaper than an Event)
        signal.acquire()
        outcome = []

        def done(ok):
            outcome.append(ok)
            signal.release()

        waiter = self.when_ready(object_ids, done, needed)
        if not outcome:
            if timeout is not None and timeout <= 0:
                if self.cancel_wait(waiter):
                    return False
                signal.acquire()  # it fired meanwhile: wait for its release
            else:
                seconds = wait_seconds(timeout)
                if not signal.acquire(True, -1 if seconds is None else seconds):
                    if self.cancel_wait(waiter):
                        return False
                    signal.acquire()  # it fired meanwhile: wait for its release
        if not outcome[0]:
            raise errors.NotInitialized("ray.shutdown() was called while this call was waiting")
        return True

    # -- shutdown ----------------------------------------------------------------------------
    def close(self):
        """Drop every object; every registered callback gets ``False``."""
        callbacks = []
        with self._lock:
            self._closed = True
            for entry in self._objects.values():
                for waiter in entry.waiters or ():
                    if not waiter.fired:
                        waiter.fired = True
                        callbacks.append(waiter.callback)
                entry.waiters = None
            self._objects.clear()
        for callback in callbacks:
            callback(False)
