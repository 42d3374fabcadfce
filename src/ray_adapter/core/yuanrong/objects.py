"""The yuanrong backend's object table: ids of yr ObjectRefs, their futures, get / wait / put,
reference counts, and the refs held inside values.

Results travel in :class:`~ray_adapter.core.yuanrong.shell.Box` so a real ``None`` result, a
cancellation and a failure are told apart; float timeouts are kept (waits use the futures of
yr's ObjectRefs, never yr's whole-second ``get`` timeouts).

Refs inside values (yr's local mode, where every value is packed and unpacked in this process;
see :mod:`.holders`): packing a value holds the refs pickled inside it (:meth:`ObjectTable.hold`);
a put's or a result's object keeps those holds until it is freed; a call's packed arguments
keep theirs until the call has ended. Freeing cascades down nested values, iteratively; the
actor handles a freed value held are handed to ``on_free_handles`` (the actor table's).

Unread errors (``on_unhandled_error``): an object is *read* by ``get``, a future, a ``wait``
that finds it done, or a call that takes it as an argument. One dropped unread whose call
failed -- at once if it had, else when it does -- is queued, with its error, to the report
thread (``reports``: the report formats the user's exception, on a thread of its own).

Thread-safety: ``_lock`` (an :class:`~ray_adapter.core.locks.OwnedRLock`, so a finalizer can
tell it runs inside the table's own code) guards ``_objects`` and ``_dropped_running``; it is
a leaf: nothing of another component is called and no future is settled while it is held
(done-callbacks take other components' locks; an object's future is registered with its yr
call after the lock is let go, see :meth:`_future`). Drops that need more than a
count (a yr call still running, contents to release, an error to report) run on the release
thread (``releases``), outside the lock.
"""
import concurrent.futures
import os
import time

from ray_adapter.core import errors, ids
from ray_adapter.core.execution import wait_seconds
from ray_adapter.core.interface import ArgRef
from ray_adapter.core.locks import OwnedRLock
from ray_adapter.core.yuanrong import shell
from ray_adapter.core.yuanrong.completions import completion_of
from ray_adapter.core.yuanrong.holders import contents, holds_anything


def from_yr_error(exc, actor_id=None):
    """The core error for an exception yr raised (not the user's: those travel in a Box)."""
    name = type(exc).__name__
    if name in ("YRTimeoutError", "GetTimeoutError"):
        return errors.GetTimeout(str(exc))
    if name == "CancelError":
        return errors.TaskCancelled(None)
    if actor_id is not None and "terminated" in str(exc):
        return errors.ActorDied(actor_id, errors.ActorDeath.TERMINATED, detail=str(exc))
    cause = getattr(exc, "cause", None) or exc
    return errors.TaskFailed(cause, str(exc), "yr", os.getpid(), "127.0.0.1", cause_repr=repr(cause))


class _Obj:
    """An object id's yr ObjectRef (``index``: element of a multi-return) and its future;
    ``name``: the producing task's name (for the error of a cancel)."""

    __slots__ = ("ref", "index", "future", "refs", "actor_id", "name", "contained", "read", "nbytes")

    def __init__(self, ref, index=None, actor_id=None, name=""):
        self.ref = ref
        self.index = index
        self.future = None
        self.refs = 1
        self.actor_id = actor_id
        self.name = name
        self.contained = None  # (refs, handles) its value holds (see .holders)
        self.read = False      # seen by a get, wait, future or dependent call
        self.nbytes = -1       # bytes of a put's value as stored (-1: a call's result, in yr)


def _repr(value):
    try:
        return repr(value)
    except Exception:  # noqa: BLE001
        return f"<{type(value).__name__} object>"


def settle(future, value, exc=None):
    """Settle ``future`` with ``exc`` if given, else with ``value``, unless it was settled
    meanwhile (a cancel, a kill or shutdown failed it first): the one way the yuanrong
    components settle a future another thread may also settle."""
    try:
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(value)
    except concurrent.futures.InvalidStateError:
        pass


def _outcome_error(value, exc):
    """The error of a call's outcome (a Box, or yr's exception), or None: a value, or a
    cancellation (yr's None), which is not reported unread."""
    if exc is not None:
        return exc
    if isinstance(value, shell.Box) and not value.ok:
        return value.value
    return None


def fresh_error(error):
    """A copy of a stored error to raise (its class, args and fields; no traceback). One error
    object is shared by every reader of an object, and by an actor's every later call once it
    died: raised itself, it would keep each raise's frames, and the refs in them, alive."""
    if not isinstance(error, BaseException):
        return error
    clone = type(error).__new__(type(error))
    clone.__dict__.update(error.__dict__)
    clone.args = error.args
    return clone


def failed_future(future):
    """True for a done future of ours whose object is an error (see ``_value``)."""
    if future.cancelled() or future.exception() is not None:
        return True
    box = future.result()
    return box is None or isinstance(box, shell.Box) and not box.ok


def _outcome_box(future):
    """The Box of an object the adapter holds (its future: a stream item, a placement group's
    ready object), waiting for it if it is not there yet (such an argument is rare: a
    pending ``pg.ready()`` makes ``.remote()`` wait for the group)."""
    failure = future.exception()  # read, not raised: the error object is shared (see fresh_error)
    if isinstance(failure, errors.CoreError):
        return shell.Box(False, failure)
    return future.result()


def fail_futures(futures, error):
    """Fail each of ``futures`` with ``error`` (one settled meanwhile is left as it is)."""
    for future in futures:
        settle(future, None, error)


class ObjectTable:
    """The objects this driver holds: put / get / wait / futures, counts and drops.

    Collaborators: ``yr`` (the SDK), ``id_factory`` (:class:`~ray_adapter.core.ids.IdFactory`),
    ``local`` (local mode's :class:`~.local_resources.LocalResources`, or None: a task blocked
    in get / wait lends its CPUs back), ``releases`` (the release thread), ``reports`` (the
    unread-error report thread, or None), ``on_unhandled_error(error)`` (the proxy's report),
    ``on_free_handles(actor_ids)`` (a freed value's actor handles; called outside the lock)."""

    def __init__(self, yr, id_factory, *, local_mode, local, releases, reports,
                 on_unhandled_error, on_free_handles):
        self.yr = yr
        self._ids = id_factory
        self.local_mode = local_mode
        self._local = local
        self._releases = releases
        self._reports = reports
        self._on_unhandled_error = on_unhandled_error
        self._on_free_handles = on_free_handles
        self._lock = OwnedRLock()
        self._objects = {}           # object id -> _Obj
        self._dropped_running = {}   # object id -> Future set when its dropped call ends
        self._closed = None          # the error of close(): futures made later fail with it
        # What a wait on an id the table does not hold waits on: failed at close only.
        self.never = concurrent.futures.Future()

    # -- entries ---------------------------------------------------------------------------
    def new_id(self, ref, index=None, actor_id=None, object_id=None, name=""):
        """Enter ``ref`` (a yr ObjectRef, or None for an object the adapter resolves itself)
        under ``object_id`` (a new put id when None); returns the id."""
        oid = object_id or self._ids.put()
        with self._lock:
            self._objects[oid] = _Obj(ref, index, actor_id, name)
        return oid

    def new_pending(self, object_id, actor_id=None, name=""):
        """Enter an object the adapter resolves itself; returns its (unresolved) future, which
        the caller settles with a Box."""
        obj = _Obj(None, None, actor_id, name)
        future = obj.future = concurrent.futures.Future()
        with self._lock:
            closed = self._closed
            if closed is None:
                self._objects[object_id] = obj
        if closed is not None:  # after shutdown (a late stream item): failed, never entered
            future.set_exception(closed)
        return future

    def pending_future(self, object_id):
        """The future of an object entered by :meth:`new_pending`, or None once dropped."""
        obj = self._objects.get(object_id)
        return None if obj is None else obj.future

    def returns(self, ref, task_id, num_returns, actor_id=None, name=""):
        """Enter the return objects of the call ``ref`` (``num_returns``: 0 for none); returns
        their ids (ids as Ray's: derived from ``task_id``)."""
        count = num_returns or 1
        return_ids = ids.IdFactory.returns(task_id, count)
        if count == 1:
            self.new_id(ref, None, actor_id, return_ids[0], name)
        else:
            for i, oid in enumerate(return_ids):
                self.new_id(ref, i, actor_id, oid, name)
        if self.local_mode:
            self.adopt_results(ref, return_ids)
        return return_ids if num_returns else []

    def failed_returns(self, task_id, num_returns, error):
        """Return objects of a call that failed before yr had it: each raises ``error``."""
        future = concurrent.futures.Future()
        future.set_exception(error)
        return_ids = ids.IdFactory.returns(task_id, num_returns or 1)
        with self._lock:
            for oid in return_ids:
                obj = self._objects[oid] = _Obj(None)
                obj.future = future
        return return_ids if num_returns else []

    def put(self, value):
        """``ray.put``: the value packed by the adapter (the store keeps a copy; readers get
        read-only arrays); TypeError naming the value when it cannot be pickled."""
        try:
            packed = shell.pack(value)
        except errors.CoreError:
            raise
        except TypeError as exc:  # as Ray: TypeError naming the value (other errors pass)
            raise errors.Unserializable("put value", f"{type(exc).__name__}: {exc}", _repr(value)) from None
        oid = self.new_id(self.yr.put(shell.Box(True, packed)))
        held = contents(packed)
        size = getattr(packed, "nbytes", None)
        if size is None and isinstance(packed, (bytes, bytearray, str)):
            size = len(packed)
        with self._lock:
            obj = self._objects[oid]
            obj.contained = held
            obj.nbytes = -1 if size is None else size
        return oid

    def __len__(self):
        """The number of objects the table holds."""
        return len(self._objects)

    # -- arguments -------------------------------------------------------------------------
    def pack_args(self, args, kwargs):
        """``(packed_args, dep_indexes, deps)``: the arguments serialized by the adapter with
        their top-level refs left as placeholders, and those refs' yr ObjectRefs, which yr
        waits for and resolves before the call runs (as Ray resolves top-level refs). Raises
        ObjectFreed for a ref the table no longer holds, Unserializable naming a bad argument."""
        refs = [a for a in args if type(a) is ArgRef] + [v for v in kwargs.values() if type(v) is ArgRef]
        deps, dep_indexes, own = [], [], []
        with self._lock:
            for r in refs:
                obj = self._obj(r.object_id)
                obj.read = True  # the call takes its error, if it has one (and reports it)
                # held by the adapter, not yr (a stream item, pg.ready()), or failed here (a
                # cancel or kill fails our future while yr's ref may still get a value)
                if obj.ref is None or (obj.future is not None and obj.future.done()
                                       and failed_future(obj.future)):
                    own.append((len(deps), obj.future))
                deps.append(obj.ref)
                dep_indexes.append(obj.index)
        for i, future in own:  # into yr's store, so yr resolves it as any argument
            deps[i], dep_indexes[i] = self.yr.put(_outcome_box(future)), None
        try:
            packed = shell.pack_args(args, kwargs)
        except Exception:  # noqa: BLE001 - as Ray: TypeError naming the argument
            from ray_adapter.core.execution import serialize_args

            serialize_args(args, kwargs)  # raises Unserializable naming the first bad argument
            raise
        return packed, dep_indexes, deps

    # -- futures and values ----------------------------------------------------------------
    def _obj(self, object_id):
        obj = self._objects.get(object_id)
        if obj is None:
            raise errors.ObjectFreed(object_id)
        return obj

    def _future(self, obj):
        """A Future resolving to the object's Box (our own, so cancel/kill can fail it). One
        per object: made under the lock, as get, wait, object_future and cancel ask for it
        from any thread (a second one would never see the cancel or kill that fails the
        first); its completion is registered with yr after the lock is let go."""
        future = obj.future
        if future is not None:
            return future
        with self._lock:
            future = obj.future
            if future is not None:
                return future
            future = obj.future = concurrent.futures.Future()
            closed = self._closed
        if closed is not None:  # closed meanwhile: nothing would ever fail it
            future.set_exception(closed)
            return future
        completion_of(obj.ref).add(lambda value, exc: settle(future, value, exc))
        return future

    def future_of(self, object_id):
        """The future of the object ``object_id`` (ObjectFreed when it is not held)."""
        with self._lock:
            obj = self._obj(object_id)
        return self._future(obj)

    def _value(self, obj):
        obj.read = True
        failure = obj.future.exception()  # get() made it and waited for it; read, not raised:
        if failure is not None:           # the error object is shared (see fresh_error)
            if isinstance(failure, errors.CoreError):
                raise fresh_error(failure) from None
            raise from_yr_error(failure) from None  # a yr-level failure (not the user's code)
        box = obj.future.result()
        if box is None:  # yr's answer for a cancelled object
            raise errors.TaskCancelled(None)
        if not isinstance(box, shell.Box):
            return box
        if not box.ok:
            raise fresh_error(box.value)
        value = box.value if obj.index is None else box.value[obj.index]
        if type(value) is shell.Box:  # a return a failed generator did not give
            raise fresh_error(value.value)
        return shell.unpack(value)

    def _lend_while_blocked(self, futures):
        """Local mode: a task about to wait for ``futures`` lends its CPUs back meanwhile (as
        Ray does for a blocked worker), so the tasks it waits for can run. Returns the grant
        to reclaim afterwards, or None."""
        grant = shell.current_grant.get()
        if grant is None or self._local is None or all(f.done() for f in futures):
            return None
        self._local.lend(grant)
        return grant

    def get(self, object_ids, timeout):
        """Values of ``object_ids``; an id the table does not hold (freed, made up) is never
        ready, as in Ray: GetTimeout after ``timeout``, without one a wait until shutdown."""
        timeout = wait_seconds(timeout)
        with self._lock:
            objs = [self._objects.get(oid) for oid in object_ids]
        futures = [self._future(o) if o is not None else self.never for o in objs]
        lent = self._lend_while_blocked(futures) if timeout is None or timeout > 0 else None
        try:
            return self._get(objs, futures, timeout)
        finally:
            if lent is not None:
                self._local.reclaim(lent)

    def _get(self, objs, futures, timeout):
        if len(futures) == 1 and (timeout is None or timeout > 0):
            try:  # waits; a failure is not raised here (the error object is shared, see
                futures[0].exception(timeout)  # fresh_error): _value raises it, mapped, below
            except concurrent.futures.TimeoutError:
                raise errors.GetTimeout(timeout) from None
            except concurrent.futures.CancelledError:
                pass
        elif timeout is not None and timeout <= 0:
            if not all(f.done() for f in futures):
                raise errors.GetTimeout(timeout)
        else:  # all of them, or the first to fail: Ray raises it without waiting for the rest
            failed = False
            try:
                for future in concurrent.futures.as_completed(futures, timeout=timeout):
                    if failed_future(future):
                        failed = True
                        break
            except concurrent.futures.TimeoutError:
                raise errors.GetTimeout(timeout) from None
            if failed:  # raise the first failed one in list order (the rest may still be
                for obj in objs:  # running: _value would wait for them)
                    if obj is not None and obj.future.done() and failed_future(obj.future):
                        self._value(obj)
        if self.never.done():  # shut down while waiting for an unknown id
            raise self.never.exception()
        return [self._value(o) for o in objs]

    def wait(self, object_ids, num_returns, timeout):
        with self._lock:  # an unknown id (freed, made up) is never ready, as in Ray
            objs = {oid: self._objects.get(oid) for oid in object_ids}
        futures = {oid: self._future(obj) if obj is not None else self.never for oid, obj in objs.items()}
        # concurrent.futures.wait installs its waiter on each future and removes it when it
        # returns, so polling wait(timeout=0) leaves nothing behind on long-pending futures.
        pending = {f for f in futures.values() if not f.done()}  # never counted once
        done_count = sum(1 for f in futures.values() if f.done())
        lent = None
        if done_count < num_returns and pending and (timeout is None or timeout > 0):
            lent = self._lend_while_blocked(pending)
        try:
            self._wait_for(pending, done_count, num_returns, timeout)
        finally:
            if lent is not None:
                self._local.reclaim(lent)
        if self.never.done():  # shut down while waiting for an unknown id
            raise self.never.exception()
        ready, not_ready = [], []
        for oid, f in futures.items():
            if f.done() and len(ready) < num_returns:
                ready.append(oid)
                if objs[oid] is not None:
                    objs[oid].read = True  # as Ray's wait: an error it found is not reported
            else:
                not_ready.append(oid)
        return ready, not_ready

    @staticmethod
    def _wait_for(pending, done_count, num_returns, timeout):
        deadline = None if timeout is None else time.monotonic() + timeout
        while done_count < num_returns and pending:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            done, pending = concurrent.futures.wait(
                pending, timeout=wait_seconds(left), return_when=concurrent.futures.FIRST_COMPLETED)
            if not done:
                break
            done_count += len(done)

    def object_future(self, object_id):
        with self._lock:
            obj = self._objects.get(object_id)
        # An unknown id never settles (as Ray's future of such a ref); shutdown fails it.
        source = self._future(obj) if obj is not None else self.never
        future = concurrent.futures.Future()

        def deliver(_done):
            try:
                if obj is None:
                    raise source.exception()
                future.set_result(self._value(obj))
            except BaseException as exc:  # noqa: BLE001 - the failure belongs to the future
                future.set_exception(exc)

        source.add_done_callback(deliver)
        return future

    # -- references ------------------------------------------------------------------------
    def add_local_reference(self, object_id):
        with self._lock:
            obj = self._objects.get(object_id)
            if obj is not None:
                obj.refs += 1

    def remove_local_reference(self, object_id):
        # From ObjectRef.__del__, in any thread, at any point. The common drop (a result that
        # was read: its call is over, its value holds nothing) is applied at once unless this
        # thread is inside the table (its lock is reentrant: a finalizer run in our own code
        # must not change what that code is changing); anything else, and whatever needs yr,
        # goes to the release thread (no thread wake-up per dropped ref). Another thread's hold
        # of that leaf lock is short: waited for. (Not ``acquire(False)`` then ``try``: a
        # handler raising between the two, as Ctrl-C's does, would leave the lock held.)
        lock = self._lock
        report = None
        if not lock.held_by_me():
            with lock:
                obj = self._objects.get(object_id)
                if obj is None:
                    return
                if obj.refs > 1:
                    obj.refs -= 1
                    return
                if obj.contained is None and (obj.ref is None or obj.index not in (None, 0) or (
                        obj.future is not None and obj.future.done())):
                    obj.refs -= 1
                    del self._objects[object_id]
                    if not obj.read and obj.future is not None and obj.future.done():
                        report = obj.future
                    else:
                        return
            if report is not None:
                self._report_if_failed(report)
                return
        self._releases.put(self.drop, object_id)

    def drop(self, object_id):
        """(Release thread.) One reference to ``object_id`` is gone; the last frees it: what
        its value holds is released, a call still running is remembered until it ends (exit
        grace: in the same step as the entry goes, so :meth:`unfinished` sees one or the
        other), an error nobody read is reported."""
        ended = None
        with self._lock:
            obj = self._objects.get(object_id)
            if obj is None:
                return
            obj.refs -= 1
            if obj.refs > 0:
                return
            del self._objects[object_id]
            if obj.ref is not None and obj.index in (None, 0):
                ended = self._dropped_running[object_id] = concurrent.futures.Future()
        if ended is not None:
            self._forget_when_ended(object_id, obj.ref, ended)
        if obj.contained is not None:
            self.release_contained(obj.contained)
        if not obj.read:
            self._report_unread(obj)

    def escaped(self, object_id):
        """A holder the table cannot see (a value unpacked in another process): kept until
        shutdown."""
        with self._lock:
            obj = self._objects.get(object_id)
            if obj is not None:
                obj.refs += 1

    def _forget_when_ended(self, object_id, ref, ended):
        """A dropped call (``ref``) is remembered in ``_dropped_running`` until it ends, so
        interpreter exit can give it its grace (:meth:`unfinished`)."""
        def forget(_value, _exc):
            with self._lock:
                self._dropped_running.pop(object_id, None)
            ended.set_result(None)

        completion_of(ref).add(forget)

    # -- unread errors ---------------------------------------------------------------------
    def _report_unread(self, obj):
        """``obj`` was dropped unread: its error, if its call failed (now or later), is queued
        for the report thread."""
        if obj.future is not None and obj.future.done():
            self._report_if_failed(obj.future)
        elif obj.ref is not None and obj.index in (None, 0):
            completion_of(obj.ref).add(lambda value, exc: self._queue_report(_outcome_error(value, exc)))
        elif obj.future is not None:
            obj.future.add_done_callback(self._report_if_failed)

    def _report_if_failed(self, future):
        if not future.cancelled():
            exc = future.exception()
            self._queue_report(exc if exc is not None else _outcome_error(future.result(), None))

    def _queue_report(self, error):
        if error is not None and self._reports is not None:
            self._reports.put(self._report_unhandled, error)

    def _report_unhandled(self, error):
        """On the report thread: the proxy's report of an error freed unread."""
        if not isinstance(error, errors.CoreError):
            error = from_yr_error(error)
        if errors.reported_when_unread(error):
            self._on_unhandled_error(error)

    # -- refs held inside values (local mode) ----------------------------------------------
    def hold(self, refs):
        """A value being packed holds ``refs`` (object ids)."""
        with self._lock:
            for oid in refs:
                obj = self._objects.get(oid)
                if obj is not None:
                    obj.refs += 1

    def release_contained(self, held):
        """Undo the holds of ``held`` (``(refs, handles)``): frees cascade down nested values;
        the actor handles of every value freed go to ``on_free_handles`` at the end."""
        stack, handles = [held], []
        with self._lock:
            while stack:
                refs, value_handles = stack.pop()
                for oid in refs:
                    obj = self._objects.get(oid)
                    if obj is None:
                        continue
                    obj.refs -= 1
                    if obj.refs <= 0:
                        self._objects.pop(oid, None)
                        if obj.contained is not None:
                            stack.append(obj.contained)
                handles.extend(value_handles)
        if handles:
            self._on_free_handles(handles)

    def release_now(self, packed):
        """Release (on the release thread) what the packed value ``packed`` holds."""
        held = contents(packed)
        if held is not None:
            self._releases.put(self.release_contained, held)

    def release_after(self, ref, packed):
        """Release what the packed arguments of the call ``ref`` hold once it has ended."""
        held = contents(packed)
        if held is not None:
            completion_of(ref).add(lambda _v, _e: self._releases.put(self.release_contained, held))

    def adopt_results(self, ref, return_ids):
        """Once the call ``ref`` has a result, its objects keep what the packed values hold
        (released at once if the object is gone already)."""
        def done(box, exc):
            if exc is None and holds_anything(box, len(return_ids)):  # most hold nothing: no hop
                self._releases.put(self._adopt, (return_ids, box))

        completion_of(ref).add(done)

    def _adopt(self, item):
        return_ids, box = item
        if not getattr(box, "ok", False):
            return
        values = [box.value] if len(return_ids) == 1 else list(box.value)
        orphans = []
        with self._lock:
            for oid, packed in zip(return_ids, values):
                held = contents(packed)
                if held is None:
                    continue
                obj = self._objects.get(oid)
                if obj is not None:
                    obj.contained = held
                else:
                    orphans.append(held)
        for held in orphans:
            self.release_contained(held)

    # -- an actor's calls ------------------------------------------------------------------
    def call_futures(self, actor_id, every=False):
        """The futures of ``actor_id``'s calls this table holds that have not settled (made
        where missing; ``every``: also objects the adapter resolves itself, as streams)."""
        with self._lock:
            objs = [o for o in self._objects.values()
                    if o.actor_id == actor_id and (every or o.ref is not None)]
        futures = [self._future(o) if o.ref is not None else o.future for o in objs]
        return [f for f in futures if f is not None and not f.done()]

    def fail_calls(self, actor_id, error, every=False):
        """``actor_id`` is dead: its calls' futures fail with ``error`` (``every``: also those
        no one asked for yet, as a kill fails every call in flight; else only those made)."""
        if every:
            futures = self.call_futures(actor_id, every=True)
        else:
            with self._lock:
                futures = [o.future for o in self._objects.values()
                           if o.actor_id == actor_id and o.future is not None]
        fail_futures([f for f in futures if not f.done()], error)

    def entry(self, object_id):
        """The table's entry of ``object_id`` (``actor_id``, ``name``, ``ref``), or None."""
        return self._objects.get(object_id)

    def future_for(self, entry):
        """The future of an :meth:`entry` (made at the first ask; see :meth:`_future`)."""
        return self._future(entry)

    # -- state -----------------------------------------------------------------------------
    def states(self, node_ip):
        """One State API record per object id held (sizes of puts; yr keeps the values of
        calls' results: -1)."""
        with self._lock:
            objects = [(oid, obj.future, obj.name, obj.nbytes) for oid, obj in self._objects.items()]
        out = []
        for oid, future, name, nbytes in objects:
            if future is not None and future.done():
                status = "FINISHED"  # a failed call's result too, as Ray reports it
            else:  # a put (no producing call) is stored at once
                status = "SUBMITTED_TO_WORKER" if name else "FINISHED"
            out.append({"object_id": oid.hex(), "object_size": nbytes, "task_status": status,
                        "attempt_number": 1, "reference_type": "LOCAL_REFERENCE",
                        "call_site": "disabled", "type": "DRIVER", "pid": os.getpid(),
                        "ip": node_ip})
        return out

    def unfinished(self):
        """Futures set when each yr call this table knows of (held or dropped) has ended."""
        with self._lock:
            refs = [obj.ref for obj in self._objects.values()
                    if obj.ref is not None and obj.index in (None, 0)]
            futures = list(self._dropped_running.values())
        # yr's own end of each call, not our future: a call cancelled before it started has
        # failed for the caller, but yr local mode still runs it (the runner skips it), and
        # a yr call scheduled after the thread pools shut down prints a RuntimeError.
        for ref in refs:
            completion = completion_of(ref)
            if not completion.done:
                ended = concurrent.futures.Future()
                completion.add(lambda _v, _e, f=ended: f.set_result(None))
                futures.append(ended)
        return [f for f in futures if not f.done()]

    def close(self, error):
        """Shutdown: every get / wait still blocked raises ``error``; the table is emptied."""
        with self._lock:
            self._closed = error
            pending = [obj.future for obj in self._objects.values()
                       if obj.future is not None and not obj.future.done()]
            self._objects.clear()
        fail_futures([self.never] + pending, error)
