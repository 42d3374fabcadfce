"""The yuanrong backend's objects: ids of yr ObjectRefs, their futures, get / wait / put.

Mixed into :class:`~ray_adapter.core.yuanrong.backend.YuanrongBackend`; its state
(``_objects``) is guarded by the backend's lock. Results travel in
:class:`~ray_adapter.core.yuanrong.shell.Box` so a real ``None`` result, a cancellation and a
failure are told apart; float timeouts are kept (waits use the futures of yr's ObjectRefs, never
yr's whole-second ``get`` timeouts).

Unread errors (``InitOptions.on_unhandled_error``): an object is *read* by ``get``, a future,
a ``wait`` that finds it done, or a call that takes it as an argument. One dropped unread whose
call failed -- at once if it had, else when it does -- is queued, with its error, to the report
thread (``_reports``: the report formats the user's exception, never under the lock).
"""
import concurrent.futures
import time

from ray_adapter.core import errors, ids
from ray_adapter.core.execution import wait_seconds
from ray_adapter.core.yuanrong import shell
from ray_adapter.core.yuanrong.completions import completion_of
from ray_adapter.core.yuanrong.holders import contents


class _Obj:
    """An object id's yr ObjectRef (``index``: element of a multi-return) and its future;
    ``name``: the producing task's name (for the error of a cancel)."""

    __slots__ = ("ref", "index", "future", "refs", "actor_id", "name", "contained", "read")

    def __init__(self, ref, index=None, actor_id=None, name=""):
        self.ref = ref
        self.index = index
        self.future = None
        self.refs = 1
        self.actor_id = actor_id
        self.name = name
        self.contained = None  # (refs, handles) its value holds (see .holders)
        self.read = False      # seen by a get, wait, future or dependent call


def _repr(value):
    try:
        return repr(value)
    except Exception:  # noqa: BLE001
        return f"<{type(value).__name__} object>"


def _settle(ours, value, exc):
    """Copy a call's outcome (see :mod:`.completions`) into our future."""
    try:
        if exc is not None:
            ours.set_exception(exc)
        else:
            ours.set_result(value)
    except concurrent.futures.InvalidStateError:  # cancelled or killed meanwhile
        pass


def _outcome_error(value, exc):
    """The error of a call's outcome (a Box, or yr's exception), or None: a value, or a
    cancellation (yr's None), which is not reported unread."""
    if exc is not None:
        return exc
    if isinstance(value, shell.Box) and not value.ok:
        return value.value
    return None


def failed_future(future):
    """True for a done future of ours whose object is an error (see ``_value``)."""
    if future.cancelled() or future.exception() is not None:
        return True
    box = future.result()
    return box is None or isinstance(box, shell.Box) and not box.ok


class ObjectsMixin:
    """put / get / wait / references over yr ObjectRefs."""

    def _new_id(self, ref, index=None, actor_id=None, object_id=None, name=""):
        oid = object_id or self._ids.put()
        with self._lock:
            self._objects[oid] = _Obj(ref, index, actor_id, name)
        return oid

    def put(self, value):
        self._check_started()
        # Serialized by the adapter: the store keeps a copy and readers get read-only arrays.
        try:
            packed = shell.pack(value)
        except errors.CoreError:
            raise
        except TypeError as exc:  # as Ray: TypeError naming the value (other errors pass)
            raise errors.Unserializable("put value", f"{type(exc).__name__}: {exc}", _repr(value)) from None
        oid = self._new_id(self.yr.put(shell.Box(True, packed)))
        held = contents(packed)
        if held is not None:
            with self._lock:
                self._objects[oid].contained = held
        return oid

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
        completion_of(obj.ref).add(lambda value, exc: _settle(future, value, exc))
        return future

    def _value(self, obj):
        obj.read = True
        try:
            box = obj.future.result()  # get() made it and waited for it
        except errors.CoreError:
            raise
        except Exception as exc:  # a yr-level failure (not the user's code)
            raise self._from_yr_error(exc) from None
        if box is None:  # yr's answer for a cancelled object
            raise errors.TaskCancelled(None)
        if not isinstance(box, shell.Box):
            return box
        if not box.ok:
            raise box.value
        value = box.value if obj.index is None else box.value[obj.index]
        if type(value) is shell.Box:  # a return a failed generator did not give
            raise value.value
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
        """Values of ``object_ids``; an id the backend does not hold (freed, made up) is never
        ready, as in Ray: GetTimeout after ``timeout``, without one a wait until shutdown."""
        timeout = wait_seconds(timeout)
        with self._lock:
            objs = [self._objects.get(oid) for oid in object_ids]
        futures = [self._future(o) if o is not None else self._never for o in objs]
        lent = self._lend_while_blocked(futures) if timeout is None or timeout > 0 else None
        try:
            return self._get(objs, futures, timeout)
        finally:
            if lent is not None:
                self._local.reclaim(lent)

    def _get(self, objs, futures, timeout):
        if len(futures) == 1 and (timeout is None or timeout > 0):
            try:
                futures[0].result(timeout)
            except concurrent.futures.TimeoutError:
                raise errors.GetTimeout(timeout) from None
            except Exception:  # the failure is raised, mapped, by _value below
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
        if self._never.done():  # shut down while waiting for an unknown id
            raise self._never.exception()
        return [self._value(o) for o in objs]

    def wait(self, object_ids, num_returns, timeout):
        with self._lock:
            futures, objs = {}, {}
            for oid in object_ids:  # an unknown id (freed, made up) is never ready, as in Ray
                obj = objs[oid] = self._objects.get(oid)
                futures[oid] = self._future(obj) if obj is not None else self._never
        # concurrent.futures.wait installs its waiter on each future and removes it when it
        # returns, so polling wait(timeout=0) leaves nothing behind on long-pending futures.
        pending = {f for f in futures.values() if not f.done()}  # _never counted once
        done_count = sum(1 for f in futures.values() if f.done())
        lent = None
        if done_count < num_returns and pending and (timeout is None or timeout > 0):
            lent = self._lend_while_blocked(pending)
        try:
            self._wait_for(pending, done_count, num_returns, timeout)
        finally:
            if lent is not None:
                self._local.reclaim(lent)
        if self._never.done():  # shut down while waiting for an unknown id
            raise self._never.exception()
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
        source = self._future(obj) if obj is not None else self._never
        future = concurrent.futures.Future()

        def settle(_done):
            try:
                if obj is None:
                    raise source.exception()
                future.set_result(self._value(obj))
            except BaseException as exc:  # noqa: BLE001 - the failure belongs to the future
                future.set_exception(exc)

        source.add_done_callback(settle)
        return future

    def add_local_reference(self, object_id):
        with self._lock:
            obj = self._objects.get(object_id)
            if obj is not None:
                obj.refs += 1

    def remove_local_reference(self, object_id):
        # From ObjectRef.__del__, in any thread, at any point. The common drop (a result that
        # was read: its call is over, its value holds nothing) is applied at once when the lock
        # is free and this thread is not inside the backend (its lock is reentrant: a finalizer
        # run in our own code must not change what that code is changing); anything else, and
        # whatever needs yr, goes to the release thread (no thread wake-up per dropped ref).
        lock = self._lock
        if not lock.held_by_me() and lock.acquire(False):
            try:
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
                        self._report_if_failed(obj.future)
                    return
            finally:
                lock.release()
        self._releases.put(self._drop_object_ref, object_id)

    def _drop_object_ref(self, object_id):
        obj = self._objects.get(object_id)
        if obj is not None:
            obj.refs -= 1
            if obj.refs <= 0:
                self._objects.pop(object_id, None)
                if obj.contained is not None:
                    self.release_contained(obj.contained)
                if obj.ref is not None and obj.index in (None, 0):
                    self._track_running(object_id, obj.ref)
                if not obj.read:
                    self._report_unread(obj)

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
            error = self._from_yr_error(error)
        if errors.reported_when_unread(error):
            self.options.on_unhandled_error(error)

    def _track_running(self, object_id, ref):
        """A call whose result nobody holds any more, still running: remembered until it ends,
        so interpreter exit can give it its grace (``YuanrongBackend._at_exit``)."""
        completion = completion_of(ref)
        if completion.done:
            return
        ended = self._dropped_running[object_id] = concurrent.futures.Future()

        def forget(_value, _exc):
            self._dropped_running.pop(object_id, None)
            ended.set_result(None)

        completion.add(forget)

    def object_escaped(self, object_id):
        with self._lock:
            obj = self._objects.get(object_id)
            if obj is not None:
                obj.refs += 1  # another holder we cannot see: keep it for the session

    def _returns(self, ref, task_id, num_returns, actor_id=None, name=""):
        count = num_returns or 1
        return_ids = ids.IdFactory.returns(task_id, count)
        if count == 1:
            self._new_id(ref, None, actor_id, return_ids[0], name)
        else:
            for i, oid in enumerate(return_ids):
                self._new_id(ref, i, actor_id, oid, name)
        if self.local_mode:
            self.adopt_results(ref, return_ids)
        return return_ids if num_returns else []

    def _stream_returns(self, invoke, task_id, limit, actor_id=None, name=""):
        """A streaming call: open its stream (before ``invoke()`` runs it: in local mode the
        shell looks the stream up), invoke it, and return ``[completion id]``."""
        stream = self._open_stream(task_id, limit, actor_id)
        completion_id = ids.IdFactory.returns(task_id, 1)[0]
        self._new_id(None, None, actor_id, completion_id, name)
        completion = self._objects[completion_id].future = concurrent.futures.Future()
        try:
            ref = invoke()
        except BaseException as exc:
            self._stream_completed(stream, completion, exc)
            raise
        completion_of(ref).add(lambda value, exc: self._stream_completed(
            stream, completion, exc if exc is not None else value))
        return [completion_id]

    def _failed_returns(self, task_id, num_returns, error):
        future = concurrent.futures.Future()
        future.set_exception(error)
        return_ids = ids.IdFactory.returns(task_id, num_returns or 1)
        for oid in return_ids:
            self._new_id(None, None, None, oid)
            self._objects[oid].future = future
        return return_ids if num_returns else []
