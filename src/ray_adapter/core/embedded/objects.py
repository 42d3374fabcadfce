"""The driver's object table: every object's value, its reference count and pins, and the
callbacks waiting for it.

Thread-safety: the table's state is guarded by its own lock, a leaf lock (nothing is called
out while it is held). Callbacks registered with :meth:`ObjectTable.when_ready` run outside
that lock, in the thread that sealed the last awaited object (a worker's reader thread, the
thread that called ``put``...); they must not block. Callbacks that seal further objects (a
failure cascading down a chain of dependent tasks) are run iteratively by the outermost seal in
that thread, never by recursion.

Lifetime (Ray's borrower protocol, on one machine: the driver's table owns every object): an
object is freed once it is sealed, nothing holds it and it is not pinned (a ref to it escaped
to where it cannot be tracked, such as a user's own pickle). Its holders, all counted in
``Entry.refs``:

- the driver's ObjectRefs (:meth:`ObjectTable.add_ref` / ``drop_ref``);
- pending tasks, calls and actors, on their top-level and nested argument refs (``hold`` /
  ``release``, until they finish; an actor until it dies, for its restarts);
- *containers*: a stored value that has refs pickled inside holds each of them until the
  container itself is freed (frees cascade down nested containers, iteratively);
- *borrowers*: a worker process holding ObjectRefs to an object (its own puts and
  submissions, lent to it with the reply, and refs it unpickled, reported by the worker with
  its first local ref) until it reports its last one dropped or dies (:meth:`borrow`,
  :meth:`lend`, :meth:`unborrow`, :meth:`worker_gone`).

A borrow is registered before the lender can let go: a worker reports it on the same channel,
and before, the message that releases what carried the ref (the task's result, the drop of the
container it read). Actor handles pickled inside a stored value are held the same way, in the
actor scope: the table reports, through ``on_free_handles`` (called under its lock: it must
only queue), the handles of a value it no longer keeps.

Unread errors (Ray's "Unhandled error" report): an object sealed with an error is *read* once a
``get`` (the driver's or a worker's), a ``wait`` that finds it sealed, a future, or a task or
actor that takes it as an argument has seen it. One freed unread -- its refs dropped without
a look, or a fire-and-forget call's error sealed with no holder left -- is handed, with its
data, to ``on_unread_error`` (called under the lock: it must only queue).

Methods ending in ``_locked`` are called with the table's lock held.
"""
import collections
import enum
import threading
from _thread import allocate_lock as _allocate_lock
from time import monotonic as _monotonic
import traceback

from ray_adapter.core import errors
from ray_adapter.core.embedded.posts import flush_posted
from ray_adapter.core.execution import wait_seconds


class ObjectState(enum.Enum):
    PENDING = "pending"   # its producing task has not finished
    READY = "ready"       # sealed: value or error


_READY = ObjectState.READY


class Entry:
    __slots__ = ("state", "data", "is_error", "refs", "pinned", "waiters", "producer",
                 "contained", "handles", "read", "owner")

    def __init__(self, producer=None, refs=0):
        self.state = ObjectState.PENDING
        self.data = None          # Serialized value or pickled core error
        self.is_error = False
        self.refs = refs
        self.pinned = False
        self.waiters = None       # list of _Waiter while pending
        self.producer = producer  # id of the task that produces it, while pending
        self.contained = None     # ids of the objects its value holds (refs pickled inside)
        self.handles = None       # ids of the actors whose handles its value holds
        self.read = False         # an error someone has seen (see the module notes)
        self.owner = None         # the attached driver it was lent to at creation (see lend)


class _Waiter:
    """Counts sealed objects for one ``when_ready`` registration."""

    __slots__ = ("remaining", "callback", "fired", "entries", "on_error", "direct", "user")

    def __init__(self, remaining, callback, on_error=False, direct=False, user=False):
        self.remaining = remaining
        self.callback = callback
        self.fired = False
        self.entries = ()
        self.on_error = on_error  # fire as soon as one is sealed with an error (ray.get)
        self.direct = direct      # a waiter's wake-up: called at once (see when_ready)
        self.user = user          # it may run user code (see when_ready)


class _Drain(threading.local):
    def __init__(self):
        self.active = False
        self.held = False  # this thread reads a worker's frames inside get (see wait)
        self.queue = collections.deque()


class ObjectTable:
    """Objects by id (bytes)."""

    def __init__(self, on_free_handles=None, on_unread_error=None, on_adopt_handles=None,
                 run_elsewhere=None):
        """``on_free_handles(actor_ids)``: the actor handles pickled inside a value no longer
        kept (called under the table's lock: it must only queue); ``on_unread_error(data,
        owner)``: an error freed unread, and the process it was lent to at creation (None: the
        driver's own) (the same); ``on_adopt_handles(actor_ids)``: the handles inside a
        value about to be stored (called outside the lock, before it is stored);
        ``run_elsewhere(callbacks)``: have another thread call :meth:`run_callbacks` with
        them (the callbacks that may run user code, completed by a ``get`` that reads a
        worker's frames itself: never run on that caller; see :meth:`wait`)."""
        self._lock = threading.Lock()
        self._objects = {}
        self._borrows = {}  # borrower (a worker handle) -> ids of the objects it holds
        self._drain = _Drain()
        self._closed = False
        self._unfulfillable = set()  # waiters short of sealed objects even if all pending seal
        self._on_free_handles = on_free_handles or (lambda actor_ids: None)
        self._on_unread_error = on_unread_error or (lambda data, owner: None)
        self._on_adopt_handles = on_adopt_handles or (lambda actor_ids: None)
        self._run_elsewhere = run_elsewhere or self.run_callbacks

    # -- creation ----------------------------------------------------------------------------
    def create(self, object_ids, refs, producer):
        """Pending entries for a task's returns, each with ``refs`` references."""
        with self._lock:
            for oid in object_ids:
                self._objects[oid] = Entry(producer, refs)

    def put(self, object_id, data, refs=1):
        """A sealed entry holding ``data`` (a Serialized value; the refs and actor handles
        pickled inside it are held while the entry lives)."""
        entry = Entry(None, refs)
        entry.state, entry.data = ObjectState.READY, data
        with self._lock:
            self._adopt_locked(entry, data)
            self._objects[object_id] = entry

    def seal(self, object_id, data, is_error):
        """Seal a pending object; runs the callbacks it completes (outside the lock)."""
        self.seal_many(((object_id, data, is_error),))

    def adopt_contained(self, datas):
        """Values about to be stored (Serialized, one per object): the actor handles pickled
        inside each are held from now on (the table lets them go, ``on_free_handles``, when it
        frees or refuses the value). The refs inside are held by the table itself when it
        stores the value."""
        for data in datas:
            if data.handles:
                self._on_adopt_handles(data.handles)

    def seal_results(self, return_ids, datas, is_error):
        """Store a finished task's or call's results: ``datas`` has one value per return id
        (one error, or too few values, fills the rest with its last); the handles inside are
        adopted first. ``is_error``: the last of ``datas`` is an error (the others, the first
        values a generator gave, are values)."""
        n = len(return_ids)
        values = len(datas) - 1 if is_error else n
        if len(datas) < n:
            datas = list(datas) + [datas[-1]] * (n - len(datas))
        self.adopt_contained(datas)
        self.seal_many([(oid, data, i >= values)
                        for i, (oid, data) in enumerate(zip(return_ids, datas))])

    def seal_many(self, items):
        fired, direct, user = [], [], None
        with self._lock:
            for object_id, data, is_error in items:
                entry = self._objects.get(object_id)
                if entry is None or entry.state is ObjectState.READY:
                    if getattr(data, "handles", None):
                        self._on_free_handles(list(data.handles))  # not kept: let them go
                    continue
                entry.state, entry.data, entry.is_error = ObjectState.READY, data, is_error
                self._adopt_locked(entry, data)
                entry.producer = None
                waiters, entry.waiters = entry.waiters, None
                for waiter in waiters or ():
                    waiter.remaining -= 1
                    if (waiter.remaining <= 0 or is_error and waiter.on_error) and not waiter.fired:
                        waiter.fired = True
                        if waiter.direct:
                            direct.append(waiter.callback)
                        elif waiter.user and self._drain.held:
                            if user is None:
                                user = []
                            user.append(waiter.callback)
                        else:
                            fired.append(waiter.callback)
                        if self._unfulfillable:
                            self._unfulfillable.discard(waiter)
                self._free_if_unused(object_id, entry)
        for callback in direct:
            callback(True)
        if user:
            self._run_elsewhere(user)
        if fired:
            self._run(fired)

    def run_callbacks(self, callbacks):
        """Call each of ``callbacks`` with True, on this thread (see ``run_elsewhere``)."""
        self._run(callbacks)

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

    def hold(self, object_ids, nested=()):
        """One more reference on each of ``object_ids`` (a pending task's top-level
        arguments; raises ObjectFreed for the first that does not exist) and on each of
        ``nested`` that exists (refs pickled inside its arguments; :meth:`release` them with
        the same two lists)."""
        with self._lock:
            for oid in object_ids:
                if oid not in self._objects:
                    raise errors.ObjectFreed(oid)
            for oid in object_ids:
                self._objects[oid].refs += 1
            for oid in nested:
                entry = self._objects.get(oid)
                if entry is not None:
                    entry.refs += 1

    def drop_ref(self, object_id, count=1):
        with self._lock:
            entry = self._objects.get(object_id)
            if entry is not None:
                entry.refs -= count
                self._free_if_unused(object_id, entry)

    def try_drop_ref(self, object_id):
        """:meth:`drop_ref` if the lock is free now; False (nothing done) if it is held, by
        another thread or by this one (a finalizer run inside the table's own code).

        (Not ``acquire(False)`` then ``try``: a signal handler that raises as the acquire
        returns, as Ctrl-C's does, would leave the lock held for good. ``with`` takes it with
        no such gap; between the check and the ``with`` another thread may take it, and this
        one then waits for that leaf lock's short hold.)"""
        if self._lock.locked():
            return False
        with self._lock:
            entry = self._objects.get(object_id)
            if entry is not None:
                entry.refs -= 1
                self._free_if_unused(object_id, entry)
        return True

    def release(self, object_ids, nested=()):
        """Undo :meth:`hold`."""
        with self._lock:
            for group in (object_ids, nested):
                for oid in group:
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

    @staticmethod
    def _unused(entry):
        return entry.refs <= 0 and entry.state is ObjectState.READY and not entry.pinned

    def _free_if_unused(self, object_id, entry):
        if self._unused(entry):
            del self._objects[object_id]
            if entry.is_error and not entry.read:
                self._on_unread_error(entry.data, entry.owner)
            if entry.contained or entry.handles:
                self._release_contents_locked(entry)

    # -- reading -----------------------------------------------------------------------------
    def __len__(self):
        return len(self._objects)

    def stats(self):
        """``(number of objects, bytes of the sealed values)``."""
        with self._lock:
            entries = list(self._objects.values())
        return len(entries), sum(e.data.nbytes for e in entries
                                 if e.state is ObjectState.READY and hasattr(e.data, "nbytes"))

    def exists(self, object_id):
        return object_id in self._objects

    def snapshot(self):
        """``[(object_id, ready, is_error, nbytes or -1, pinned, producer, owner)]`` of every
        object someone references (the State API's ``list_objects``: a pending result whose
        every ref was dropped is kept only until it is sealed, and Ray does not list it;
        ``owner``: the attached driver it was lent to at creation, None: this process's); one
        pass under the lock."""
        with self._lock:
            return [(oid, e.state is ObjectState.READY, e.is_error,
                     getattr(e.data, "nbytes", -1) if e.state is ObjectState.READY else -1,
                     e.pinned, e.producer, e.owner)
                    for oid, e in self._objects.items() if e.refs > 0 or e.pinned]

    def producer(self, object_id):
        """The id of the task producing ``object_id`` while it is pending, else None."""
        entry = self._objects.get(object_id)
        return entry.producer if entry is not None else None

    def collect(self, object_ids):
        """What ``ray.get`` returns or raises: ``[(data, False)]`` of sealed objects or, once one
        is sealed with an error, ``[(data, True)]`` of the first such in ``object_ids`` (Ray
        raises it without waiting for the others). Raises ObjectFreed for a missing one."""
        out = []
        missing = first_error = None
        with self._lock:
            for oid in object_ids:
                entry = self._objects.get(oid)
                if entry is None:
                    missing = missing or oid  # an error later in the list is raised first
                elif entry.is_error:
                    entry.read = True  # every error it saw (as Ray's get), the first raised
                    if first_error is None:
                        first_error = entry.data
                elif first_error is None:
                    out.append((entry.data, False))
        if first_error is not None:
            return [(first_error, True)]
        if missing is not None:
            raise errors.ObjectFreed(missing)
        return out

    def values(self, object_ids):
        """``[(data, is_error)]`` of sealed objects; raises ObjectFreed for a missing one."""
        out = []
        with self._lock:
            for oid in object_ids:
                entry = self._objects.get(oid)
                if entry is None or entry.state is not ObjectState.READY:
                    raise errors.ObjectFreed(oid)
                if entry.is_error:
                    entry.read = True
                out.append((entry.data, entry.is_error))
        return out

    def first_error(self, object_ids):
        """The data of the first of ``object_ids`` sealed with an error, or None."""
        first = None
        with self._lock:
            for oid in object_ids:
                entry = self._objects.get(oid)
                if entry is not None and entry.is_error:
                    entry.read = True  # taken by a dependent task: its own error reports it
                    if first is None:
                        first = entry.data
        return first

    def ready_flags(self, object_ids, unknown_ready=True):
        """True per id that is sealed; an id the table does not hold (freed, or never
        created) counts as ready, or, with ``unknown_ready=False``, never (Ray's rule for a
        user's ref: see :meth:`when_ready`). An error found sealed counts as read (as Ray's
        ``wait`` does)."""
        flags = []
        with self._lock:
            objs = self._objects
            for oid in object_ids:
                entry = objs.get(oid)
                if entry is None:
                    flags.append(unknown_ready)
                else:
                    if entry.is_error:
                        entry.read = True
                    flags.append(entry.state is ObjectState.READY)
        return flags

    # -- waiting -----------------------------------------------------------------------------
    def when_ready(self, object_ids, callback, needed=None, on_error=False, unknown_ready=True,
                   direct=False, user=False):
        """Call ``callback(True)`` once ``needed`` (default: all) of ``object_ids`` are sealed
        (at once, in this thread, if they are), or, ``on_error``, once one is sealed with an
        error. Ids the table does not hold count as ready, or, with ``unknown_ready=False``
        (the ids of a user's refs: Ray's rule), are never ready: a ref rebuilt from the hex of
        a freed object, or of an id never created, waits for ever as in Ray 2.60. Returns a
        token for :meth:`cancel_wait`; on shutdown the callback gets ``False``. ``direct``: a
        callback that seals nothing (a waiter's) is called at once when it fires here, even
        inside another callback run by this thread (which queues the others: see the module
        notes), so that a ``get`` in a future's done-callback does not wait for itself.
        ``user``: a callback that may run user code (a future's done-callbacks): when a
        ``get``'s own reading of a worker's frames completes it, it runs on the
        ``run_elsewhere`` thread, never on that caller (which may hold the user's locks); other
        callbacks run where the object was sealed, as a worker's reader thread runs them."""
        with self._lock:
            closed = self._closed
            if closed:
                fire, waiter = True, None
            else:
                objs = self._objects
                pending = [objs[oid] for oid in object_ids
                           if oid in objs and objs[oid].state is ObjectState.PENDING]
                unknown = 0 if unknown_ready else sum(1 for oid in object_ids if oid not in objs)
                sealed = len(object_ids) - len(pending) - unknown
                short = (len(object_ids) if needed is None else needed) - sealed
                fire = short <= 0 or on_error and sealed > 0 and any(
                    objs[oid].is_error for oid in object_ids if oid in objs)
                waiter = None
                if not fire:
                    waiter = _Waiter(short, callback, on_error, direct, user)
                    waiter.entries = pending
                    for entry in pending:
                        if entry.waiters is None:
                            entry.waiters = [waiter]
                        else:
                            entry.waiters.append(waiter)
                    if short > len(pending):  # only close() (or an error) can end it
                        self._unfulfillable.add(waiter)
        if closed:
            callback(False)
        elif fire:
            if direct:
                callback(True)
            else:
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
            self._unfulfillable.discard(waiter)
            for entry in waiter.entries:
                if entry.waiters:
                    try:
                        entry.waiters.remove(waiter)
                    except ValueError:
                        pass
            waiter.entries = ()
        return True

    def wait(self, object_ids, needed, timeout, on_error=False, unknown_ready=True, reader=None):
        """Block the calling thread until ``needed`` of ``object_ids`` are sealed (``on_error``:
        or one is sealed with an error); True if so within ``timeout`` seconds (None: forever).
        ``unknown_ready`` as in :meth:`when_ready`. Raises NotInitialized on shutdown.

        ``reader``: for one object, the read role of the worker whose reply seals it
        (:class:`~.driver_reading.ReadRole`): this thread reads that worker's frames itself
        while it waits, if the role is free. Callbacks that its reading completes and that may
        run user code go to ``run_elsewhere``: the caller of ``get`` may hold the user's locks,
        a future's done-callback must not run on it."""
        if reader is None:  # (a reader flushes before it blocks, its signals deferred)
            flush_posted()  # about to block: the work this waits for may still be queued here
        signal = _allocate_lock()  # held: released by the callback (cheaper than an Event)
        signal.acquire()
        outcome = []

        def done(ok):
            outcome.append(ok)
            signal.release()
            if reader is not None:
                reader.wake()

        waiter = self.when_ready(object_ids, done, needed, on_error, unknown_ready, direct=True)
        drain = self._drain
        if (not outcome and reader is not None and waiter is not None and not (drain.held or drain.active)
                and (timeout is None or timeout > 0)):
            # (Not inside a callback this thread runs: the callbacks its reading completes
            # would wait in this thread's queue until that callback returns. Not for a get
            # that does not wait: timeout 0 answers at once.)
            entry = waiter.entries[0] if waiter.entries else None
            if entry is not None:
                deadline = None if timeout is None else _monotonic() + max(timeout, 0)
                self._read_for(reader, outcome, entry, deadline)
                if deadline is not None:
                    timeout = deadline - _monotonic()
        if not outcome and reader is not None:
            flush_posted()  # (not read here after all: it blocks below)
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

    def _read_for(self, reader, outcome, entry, deadline):
        """Read ``reader``'s channel on this thread until ``entry`` is sealed (or ``outcome``
        says the wait ended otherwise); user callbacks go elsewhere meanwhile (see
        :meth:`wait`)."""
        drain = self._drain
        drain.held = True
        try:
            reader.read_until(lambda: outcome or entry.state is _READY, deadline)
        finally:
            drain.held = False

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
            for waiter in self._unfulfillable:
                if not waiter.fired:
                    waiter.fired = True
                    callbacks.append(waiter.callback)
            self._unfulfillable.clear()
            self._objects.clear()
            self._borrows.clear()
        for callback in callbacks:
            callback(False)

    # -- containers ----------------------------------------------------------------------------
    def _adopt_locked(self, entry, data):
        """``entry``'s value holds the refs and handles pickled inside ``data``."""
        inner = getattr(data, "refs", None)
        if inner:
            objs = self._objects
            held = [oid for oid in inner if oid in objs]
            for oid in held:
                objs[oid].refs += 1
            entry.contained = held or None
        handles = getattr(data, "handles", None)
        if handles:
            entry.handles = list(handles)

    def _release_contents_locked(self, entry):
        """A freed entry lets go of what its value held; frees cascade without recursion."""
        objs = self._objects
        stack = [entry]
        while stack:
            freed = stack.pop()
            if freed.handles:
                self._on_free_handles(freed.handles)
            for oid in freed.contained or ():
                inner = objs.get(oid)
                if inner is None:
                    continue
                inner.refs -= 1
                if self._unused(inner):
                    del objs[oid]
                    if inner.is_error and not inner.read:
                        self._on_unread_error(inner.data, inner.owner)
                    if inner.contained or inner.handles:
                        stack.append(inner)

    # -- borrowers -----------------------------------------------------------------------------
    def lend(self, borrower, object_ids, owner=False):
        """``borrower`` holds the one reference each of ``object_ids`` was created with (a
        worker's put or submission): it is released by :meth:`unborrow` or
        :meth:`worker_gone`. ``owner``: the borrower reports these objects' errors freed
        unread (an attached driver; see ``on_unread_error``)."""
        with self._lock:
            held = self._borrows.setdefault(borrower, set())
            for oid in object_ids:
                entry = self._objects.get(oid)
                if entry is not None:
                    held.add(oid)
                    if owner:
                        entry.owner = borrower

    def borrow(self, borrower, object_ids):
        """``borrower`` took its first ObjectRef to each of ``object_ids``: one more holder."""
        with self._lock:
            held = self._borrows.setdefault(borrower, set())
            for oid in object_ids:
                entry = self._objects.get(oid)
                if entry is not None and oid not in held:
                    held.add(oid)
                    entry.refs += 1

    def unborrow(self, borrower, object_ids):
        """``borrower`` dropped its last ObjectRef to each of ``object_ids``."""
        with self._lock:
            held = self._borrows.get(borrower)
            if not held:
                return
            for oid in object_ids:
                if oid in held:
                    held.discard(oid)
                    entry = self._objects.get(oid)
                    if entry is not None:
                        entry.refs -= 1
                        self._free_if_unused(oid, entry)

    def worker_gone(self, borrower):
        """A dead borrower's refs died with it."""
        with self._lock:
            held = self._borrows.pop(borrower, None)
            for oid in held or ():
                entry = self._objects.get(oid)
                if entry is not None:
                    if entry.owner is borrower:  # gone: its reports have nowhere to go
                        entry.owner = None
                    entry.refs -= 1
                    self._free_if_unused(oid, entry)

    def borrowed_by(self, borrower):
        """How many objects ``borrower`` holds (tests and diagnostics)."""
        with self._lock:
            return len(self._borrows.get(borrower, ()))
