"""Normal (non-actor) tasks: from submission to their results, with retries and cancellation.

Life of a task (:class:`TaskState`)::

    WAITING --args sealed--> QUEUED --granted--> STARTING --sent--> RUNNING --done--> FINISHED
       \\__________________ cancel, failed argument, retry exhausted ______________/
    RUNNING --worker died / retryable error--> QUEUED (retry)
    QUEUED --sent behind a running task--> PREFETCHED --the lease passes to it--> RUNNING
    PREFETCHED --released / its worker died--> QUEUED (no retry spent)

Pipelined tasks: a task worker gets its next tasks while the current one runs.

Without it a worker idles between two tasks for a whole round trip (its result reaches the
driver, the driver picks the next task, the task reaches the worker). With it, when a plain
task starts on a worker and tasks of the same resource shape are queued, the oldest of them
are sent right behind it as the worker's *followers* (up to :data:`PIPELINE_DEPTH`, and at
most half of the queued line, so the other workers get their share): they run under the same
lease (the running task's grant passes to the next one when it finishes, resources never go
back and forth), one after another, as soon as the one before ends. Several in flight per
worker let the driver send them, and the worker return their results, in a few writes.

Only plain tasks pipeline: default placement (no placement group, affinity or labels), no
devices, not streaming, no ``max_calls``, the worker's runtime env; never while a placement
group waits for resources, and while other lines (another function, another resource shape,
an actor) wait only if this function's tasks are brief (:data:`QUICK_TASK_S`) and for a
quantum of them (:data:`SHARED_QUANTUM`): the lease would otherwise keep the resources from
them, while the scheduler lets lines take turns.
Followers are given back (:class:`~.protocol.Release`; the worker answers
:class:`~.protocol.Released` for each that had not started) when the running task blocks in
a nested ``get``/``wait`` (it could be waiting for one of them), and whenever resources they
fit are left free after resources moved (a task ended, a CPU was lent, an actor died: they
then run there instead of behind a long task); they go back first in their line, in order. A follower that is cancelled is answered by the worker at once;
those of a worker that dies are queued again, in order, without spending a retry (they never
started).
Records and ``worker.followers`` are guarded by the manager's lock; messages are queued under
it and written after.

A streaming task (``TaskOptions.generator="streaming"``) has one return, its completion; its
items go to the stream table (:mod:`.streams`) as they arrive, and it ends there when the task
finishes for good (a cancel drops the items not taken yet, as in Ray).

Thread-safety: ``TaskManager._lock`` guards every record's state and the worker handles'
``task`` field. It is held only for state changes and for queueing messages on a worker's
channel (no I/O); object-table and scheduler calls, worker spawning and writes happen after it
is released. Called from user threads (submit, cancel), worker reader threads (results, nested
submissions) and the object table's callbacks.
"""
import os
import signal
import threading
from time import monotonic as _monotonic

from ray_adapter.core import errors, ids
from ray_adapter.core.embedded import protocol
from ray_adapter.core.embedded.pool import WorkerState
from ray_adapter.core.embedded.results import argument_failure_data, error_data
from ray_adapter.core.embedded.demands import Demand
from ray_adapter.core.embedded.protocol import Dep, to_payload
from ray_adapter.core.embedded.task_records import TaskRecord, TaskState
from ray_adapter.core.embedded.task_support import (assignment, device_env, notice_retry, seen_devices,
                                                    notice_worker_died, unschedulable_error)


#: Followers one worker holds at most (tasks sent behind its running one).
PIPELINE_DEPTH = 8
#: As its followers start, a worker's line is filled up again once this few are left: several
#: are taken and sent at once (one scheduler pass, one write) instead of one per task done.
REFILL_AT = PIPELINE_DEPTH // 2
#: While other lines wait, a lease keeps taking followers only if the last task of that
#: function took less than this (seconds, from its start to its result here)...
QUICK_TASK_S = 0.002
#: ...and only for this many tasks; then it goes back to the scheduler (lines take turns).
SHARED_QUANTUM = 16

#: Seconds a force-cancelled task's worker has to end itself before the driver kills it.
FORCE_CANCEL_GRACE_S = 0.5


class TaskManager:
    """Normal tasks, from ``submit`` to their sealed results (see the module notes)."""

    def __init__(self, *, ids, objects, scheduler, pool, envs, functions, events, streams,
                 scope, timers, infeasible):
        """Collaborators: ``ids`` (IdFactory), the ``objects`` table, the ``scheduler``, the
        worker ``pool``, runtime ``envs``, the ``functions`` registry (key -> pickled function),
        task ``events``, the ``streams`` table, the actor ``scope`` (handles carried in
        arguments), ``timers`` and the ``infeasible`` warnings."""
        self._ids, self._objects, self._scheduler, self._pool = ids, objects, scheduler, pool
        self._envs, self._functions, self._events, self._streams = envs, functions, events, streams
        self._scope, self._timers, self._infeasible = scope, timers, infeasible
        self._lock = threading.Lock()
        self._tasks = {}
        self._owned = {}            # owner worker -> ids of its unfinished tasks
        self._followed = set()      # workers with followers (worker.followers)
        self._releasing = set()     # ids of followers asked back (Release sent)
        self._brief = {}            # function key -> its last task ran briefly (pipelining)

    # -- submission --------------------------------------------------------------------------
    def submit(self, key, args, deps, options, carried=(), owner=None, parent=None, task_id=None):
        """Submit a task; returns its return ids (``[]`` for ``num_returns=0``). ``owner``: the
        worker that submits it (None: the driver); ``parent``: the id of the task that submits
        it, if known; ``task_id``: minted by the submitter (None: here). Raises ObjectFreed for
        an argument ref whose object is gone."""
        task_id = task_id or self._ids.task()
        streaming = options.generator == "streaming"
        num_returns = 1 if streaming else options.num_returns
        return_ids = ids.IdFactory.returns(task_id, num_returns or 1)
        record = TaskRecord(task_id, key, args, deps, carried, options, return_ids)
        record.owner, record.parent = owner, parent
        if deps or args.refs:  # top-level and nested argument refs, until it finishes
            self._objects.hold(deps, args.refs)
        self._objects.create(return_ids, 1 if num_returns else 0, task_id)
        self._events.submitted(task_id, options.name, "NORMAL_TASK", None, options.resources,
                               getattr(options.scheduling, "group_id", None),
                               job=getattr(owner, "job_id", None), parent=parent)
        if streaming:
            self._streams.open(task_id, options.generator_backpressure > 0)
        self._scope.carry(carried)
        with self._lock:
            self._tasks[task_id] = record
            if owner is not None:
                self._owned.setdefault(owner, set()).add(task_id)
            if parent is not None and getattr(self._tasks.get(parent), "cancel_children", False):
                record.cancelled = record.cancel_children = True  # its parent was cancelled
                # recursively as it submitted it: it never runs (dropped when its args are in)
        if deps:
            record.waiter = self._objects.when_ready(deps, lambda ok, r=record: self._deps_ready(r, ok))
        else:
            self._deps_ready(record, True)
        return return_ids if num_returns else []

    def _deps_ready(self, record, ok):
        if not ok:
            return  # shutting down
        failed = self._objects.first_error(record.deps) if record.deps else None
        with self._lock:
            if record.state is not TaskState.WAITING:
                return
            if record.cancelled or failed is not None:
                go = False
            else:
                go = True
                record.state = TaskState.QUEUED
        if not go:
            if record.cancelled:
                self._finish_cancelled(record)
            else:
                self._finish_claimed(record, [argument_failure_data(failed, record.options.name)], True)
            return
        self._queue(record)

    def _queue(self, record):
        placement = record.options.scheduling
        if record.units and not self._scheduler.feasible(record.units, placement, record.shape.shape):
            self._infeasible.warn(record.options.name, record.options.resources)
        # One line per function and resource shape (Ray's scheduling classes): a task of
        # another function does not wait behind a backlog of this one.
        record.demand = Demand(self, record, record.units, placement, (record.shape.shape, record.key))
        grant = self._scheduler.submit(record.demand)
        if grant is not None:
            self.on_grant(record, grant)
        elif record.demand.failure is not None:
            self.on_unschedulable(record, record.demand.failure)
        elif record.cancelled and self._scheduler.withdraw(record.demand):
            self._finish_cancelled(record)  # cancelled while it was being queued

    def on_unschedulable(self, record, reason):
        """The scheduler can never run it: hard affinity to a gone node, or its group removed."""
        group_id = getattr(record.options.scheduling, "group_id", None)
        error = unschedulable_error(record.options.name, reason, group_id)
        self._finish_claimed(record, [error_data(error)], True)

    def on_evict(self, record):
        """Its placement group was removed while it ran: its worker is killed and the task fails
        with TaskPlacementGroupRemoved, not retried (Ray 2.60 here never answers such a task: its
        ``get`` times out)."""
        with self._lock:
            worker = record.worker if record.state is TaskState.RUNNING else None
            record.evicted = True
        if worker is not None:
            try:
                os.kill(worker.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    # -- starting ----------------------------------------------------------------------------
    def on_grant(self, record, grant):
        with self._lock:
            ok = record.state is TaskState.QUEUED and not record.cancelled
            if ok:
                record.state = TaskState.STARTING
        if not ok:
            self._scheduler.release_and_start(grant)
            if record.cancelled:
                self._finish_cancelled(record)
            return
        try:
            worker = self._pool.take(grant.node, self._envs.spec_of(record.options.runtime_env),
                                     _job_of(record))
        except Exception as exc:  # no process could be started (EMFILE, bad environment...)
            self._scheduler.release_and_start(grant)
            self._finish_claimed(record, [error_data(errors.WorkerDied(
                record.options.name, errors.WorkerDeath.SPAWN_FAILED, detail=repr(exc)))], True)
            return
        worker.ran_tasks = True  # never an actor's process from now on (see WorkerPool.take)
        message, buffers = self._run_message(record, grant)
        with self._lock:
            cancelled = record.cancelled
            # A new worker that already ended (its exit handler found no task): failed here.
            gone = not cancelled and worker.state is WorkerState.DEAD
            if not cancelled and not gone:
                record.state = TaskState.RUNNING
                record.started = _monotonic()
                record.grant, record.worker = grant, worker
                worker.task = record
                worker.register(record.key, self._functions[record.key])
                worker.enqueue(message, buffers)
        if cancelled:
            self._pool.put_back(worker)
            self._scheduler.release_and_start(grant)
            self._finish_cancelled(record)
            return
        if gone:
            self._scheduler.release_and_start(grant)
            error = (errors.EnvSetupFailed(worker.boot_failure) if worker.boot_failure is not None
                     else errors.WorkerDied(record.options.name, errors.WorkerDeath.SPAWN_FAILED,
                                            detail="its new worker process ended at start"))
            self._finish_claimed(record, [error_data(error)], True)
            return
        self._events.running(record.task_id, worker)
        if record.streaming:
            self._streams.attach(record.task_id, worker)
        self._prefetch(worker, record, grant)
        worker.flush()

    # -- results -----------------------------------------------------------------------------
    def on_done(self, worker, message, buffers):
        """A task's result arrived from ``worker`` (its reader thread)."""
        grant = follower = None
        with self._lock:
            record = worker.task
            if record is None or record.task_id != message.task_id:
                # a follower, cancelled while queued, answered first
                record = self._take_follower_locked(worker, message.task_id)
                if record is None:
                    return
            else:
                worker.task = None
                worker.blocked = 0  # a call cancelled while blocked never unblocked
                grant, record.grant = record.grant, None
                follower = self._pass_lease(worker, grant)
            self._releasing.discard(record.task_id)
            record.worker = None
            retry = (not message.ok and message.retryable and record.retries_left != 0
                     and not record.cancelled)
            left = record.retries_left  # Ray's notice counts the retries before this one
            if retry:
                if record.retries_left > 0:
                    record.retries_left -= 1
                record.state = TaskState.QUEUED
            else:
                record.state = TaskState.FINISHED
                self._tasks.pop(record.task_id, None)
        worker.calls[record.key] = worker.calls.get(record.key, 0) + 1
        if grant is not None:  # it ran: is this function brief? (see pipelining)
            self._brief[record.key] = _monotonic() - record.started < QUICK_TASK_S
        if follower is not None:
            self._lease_passed(worker, follower, grant)
        elif grant is not None:
            limit = record.options.max_calls
            if limit and worker.calls[record.key] >= limit:
                self._pool.retire(worker, "max_calls")  # a fresh worker replaces it
            else:
                self._pool.put_back(worker)
            self._scheduler.release_and_start(grant)
        datas = [protocol.from_payload(p, buffers) for p in message.results]
        if retry:
            notice_retry(record.options.name, left, datas[0])
            self._queue(record)
        else:
            self._finish(record, datas, not message.ok)

    def on_worker_exit(self, worker):
        """``worker``'s process is gone: retry its task or fail it, and cancel the tasks it
        submitted that have not finished (their owner is gone: Ray's fate sharing). Not when
        the pool retired it for idleness or its function's ``max_calls`` (a GPU function's by
        default): Ray keeps such a worker until what it owns is done, so they run on."""
        with self._lock:
            orphans = self._owned.pop(worker, ())
        if not worker.keeps_what_it_owns:
            for task_id in orphans:
                self.cancel(task_id, True)
        self._drop_followers(worker)
        with self._lock:
            record = worker.task
            worker.task = None
            if record is None or record.state is not TaskState.RUNNING:
                return
            grant, record.grant, record.worker = record.grant, None, None
            if record.cancelled or record.evicted:
                outcome = "cancelled" if record.cancelled else "evicted"
            elif worker.boot_failure is not None:
                outcome = "setup"  # its py_executable cannot start a worker: no retry helps
            elif record.retries_left != 0:
                left = record.retries_left  # Ray's notice counts the retries before this one
                if record.retries_left > 0:
                    record.retries_left -= 1
                record.state = TaskState.QUEUED
                outcome = "retry"
            else:
                outcome = "died"
        self._scheduler.release_and_start(grant)
        code = worker.proc.returncode
        if outcome not in ("cancelled", "evicted", "setup"):
            notice_worker_died(worker.pid, code)
        if outcome == "cancelled":
            self._finish_cancelled(record)
        elif outcome == "setup":
            self._finish_claimed(record, [error_data(errors.EnvSetupFailed(worker.boot_failure))], True)
        elif outcome == "evicted":
            self.on_unschedulable(record, "group_removed")
        elif outcome == "retry":
            notice_retry(record.options.name, left, None, worker.pid, code)
            self._queue(record)
        elif not worker.node.alive:
            self._finish_claimed(record, [error_data(errors.NodeDied(
                record.options.name, worker.node.hex, worker.node.ip))], True)
        else:
            self._finish_claimed(record, [error_data(errors.WorkerDied(
                record.options.name, errors.WorkerDeath.CRASHED, worker.pid, code,
                record.options.max_retries))], True)

    # -- finishing ---------------------------------------------------------------------------
    def _claim(self, record):
        """Mark ``record`` finished; False if someone else finished it first."""
        with self._lock:
            if record.state is TaskState.FINISHED:
                return False
            record.state = TaskState.FINISHED
            self._tasks.pop(record.task_id, None)
            return True

    def _finish_claimed(self, record, datas, is_error):
        if self._claim(record):
            self._finish(record, datas, is_error)

    def _finish_cancelled(self, record):
        self._finish_claimed(record, [error_data(errors.TaskCancelled(record.task_id))], True)

    def _finish(self, record, datas, is_error):
        if record.owner is not None:
            with self._lock:
                owned = self._owned.get(record.owner)
                if owned is not None:
                    owned.discard(record.task_id)
                    if not owned:
                        del self._owned[record.owner]
        self._events.finished(record.task_id, not is_error)
        nested = record.args.refs if record.args is not None else ()
        # Drop what the record holds now: its arguments (shared buffers among them) must not
        # wait for the cyclic GC (record -> demand -> its start closure -> record).
        record.args = record.demand = record.waiter = None
        if record.deps or nested:
            self._objects.release(record.deps, nested)
        self._scope.uncarry(record.carried)
        self._objects.seal_results(record.return_ids, datas, is_error)
        if record.streaming:
            self._streams.end(record.task_id, drop_untaken=record.cancelled and is_error)

    # -- cancellation ------------------------------------------------------------------------
    def cancel(self, task_id, force, recursive=False):
        """Cancel a pending task (dropped) or a running one (interrupted; its worker killed
        when ``force``); ``recursive``: the unfinished tasks it submitted too, and theirs (as
        Ray; not actor calls). The whole tree is marked cancelled under one lock hold, so a
        CPU a cancelled child frees never starts a sibling; the unstarted ones are dropped
        before the running ones are interrupted. Unknown or finished tasks are ignored."""
        with self._lock:
            records, stack = [], [task_id]
            while stack:  # the tree, without recursion (any depth)
                record = self._tasks.get(stack.pop())
                if record is None or record.state is TaskState.FINISHED or record.cancelled and records:
                    continue
                record.cancelled = True
                record.cancel_children = record.cancel_children or recursive
                records.append(record)
                if recursive and record.worker is not None:
                    stack.extend(tid for tid in self._owned.get(record.worker, ())
                                 if getattr(self._tasks.get(tid), "parent", None) == record.task_id)
            sends = []
            for record in records:
                if record.state is TaskState.RUNNING or record.state is TaskState.PREFETCHED:
                    # (a follower still queued at its worker is answered by it at once)
                    record.worker.enqueue(protocol.Cancel(record.task_id, bool(force)))
                    sends.append((record, record.worker))
                else:
                    sends.append((record, None))
        for record, worker in sorted(sends, key=lambda item: item[1] is not None):
            if worker is not None:
                worker.flush()
                if force:  # the worker ends itself; one that cannot (holding the GIL in C
                    # code, stopped) is killed by the driver after a grace period, as Ray does
                    self._timers.call_later(
                        FORCE_CANCEL_GRACE_S, lambda w=worker, r=record: self._kill_if_running(w, r))
            elif record.state is TaskState.WAITING:
                if self._objects.cancel_wait(record.waiter):
                    self._finish_cancelled(record)
            elif record.state is TaskState.QUEUED:
                if self._scheduler.withdraw(record.demand):
                    self._finish_cancelled(record)

    def _kill_if_running(self, worker, record):
        with self._lock:
            still = worker.task is record and record.state is TaskState.RUNNING
        if still:
            worker.kill_group()  # its exit path finishes the task as cancelled

    # -- blocked workers ---------------------------------------------------------------------
    def block(self, worker):
        """The task on ``worker`` waits in a nested ``get``/``wait``: lend its CPUs back, so
        the tasks it waits for can run (no deadlock). Returns a token for :meth:`unblock`."""
        with self._lock:
            record = worker.task
            if record is None or record.grant is None:
                return None
            worker.blocked += 1
            first = worker.blocked == 1
            grant = record.grant
            # it may wait for its own followers: they run elsewhere
            released = self._release_followers_locked(worker) if first else False
        if released:
            worker.flush()
        if first:
            self._scheduler.run(self._scheduler.lend(grant))
        return record, grant

    def unblock(self, worker, token):
        if token is None:
            return
        record, grant = token
        with self._lock:
            worker.blocked = max(0, worker.blocked - 1)
            still_running = worker.task is record and record.grant is grant
            last = worker.blocked == 0
        if last and still_running:
            self._scheduler.reclaim(grant)

    def worker_of(self, task_id):
        """The worker handle task ``task_id`` was sent to, or None (not sent, finished, not a
        task). Read without the lock: a hint for a reader of the reply (it may be stale by
        the time it is used; the reply then comes another way)."""
        record = self._tasks.get(task_id)
        return record.worker if record is not None else None

    def unfinished_returns(self):
        """The return ids of every task not finished yet (a snapshot; exit grace)."""
        with self._lock:
            return [oid for record in self._tasks.values() for oid in record.return_ids]

    def clear(self):
        with self._lock:
            self._tasks.clear()
            self._owned.clear()

    def _run_message(self, record, grant):
        """The RunTask of ``record`` under ``grant``, and its buffers."""
        buffers = []
        args = to_payload(record.args, buffers)
        deps = [Dep(oid, to_payload(data, buffers))
                for oid, (data, _) in zip(record.deps, self._objects.values(record.deps))] if record.deps else []
        env, devices = record.shape.env, grant.devices
        if devices:
            devices = seen_devices(devices, env, grant.node)
            env = dict(env, **device_env(devices, env))
        message = protocol.RunTask(
            task_id=record.task_id, key=record.key, args=args, deps=deps,
            num_returns=1 if record.streaming else (record.options.num_returns or 1),
            name=record.options.name, env=env, resources=record.shape.amounts,
            gpu_ids=list(devices.get("GPU", ())), retry_exceptions=record.retry_blob,
            assignment=assignment(grant, record.options.scheduling, devices),
            streaming=record.streaming,
            backpressure=record.options.generator_backpressure)
        return message, buffers

    @staticmethod
    def _pipelines(record):
        o = record.options
        return o.scheduling is None and not record.streaming and not o.max_calls

    def _prefetch(self, worker, running, grant):
        """Send ``worker`` the oldest queued tasks of ``running``'s shape as its followers (up
        to :data:`PIPELINE_DEPTH` behind it), if pipelining applies (queued only: the caller
        flushes)."""
        if grant.devices or grant.bundle is not None or not self._pipelines(running):
            return
        room = PIPELINE_DEPTH - len(worker.followers)
        # Beside other waiting lines only while this function's tasks are brief, and for a
        # quantum of them: then the lease goes back and the lines take turns.
        beside = self._brief.get(running.key, False) and grant.passes < SHARED_QUANTUM
        demands = self._scheduler.take_followers(running.demand.shape, room, beside) if room > 0 else ()
        if not demands:
            return
        spec = _spec_key(self._envs.spec_of(running.options.runtime_env))
        job = _job_of(running)
        messages = []
        for demand in demands:
            record = demand.holder
            fits = (demand.handler is self and self._pipelines(record)  # a task, not an actor
                    and _spec_key(self._envs.spec_of(record.options.runtime_env)) == spec
                    and _job_of(record) == job)
            messages.append(self._run_message(record, grant) if fits else None)
        back = []
        with self._lock:
            for demand, built in zip(demands, messages):
                record = demand.holder
                ok = (built is not None and not back and record.state is TaskState.QUEUED
                      and not record.cancelled and worker.task is running and worker.alive)
                if not ok:
                    back.append(demand)  # it and every later one keep their place in line
                    continue
                record.state = TaskState.PREFETCHED
                record.worker = worker
                worker.followers.append(record)
                self._followed.add(worker)
                worker.register(record.key, self._functions[record.key])
                worker.enqueue(*built)
        for demand in reversed(back):
            self._scheduler.run(self._scheduler.resubmit_front(demand))

    def _pass_lease(self, worker, grant):
        """The running task on ``worker`` is done (or given back): its first follower, if any,
        runs under ``grant`` now. Returns it (None: no follower, the lease ends). Lock held."""
        followers = worker.followers
        if not followers:
            return None
        follower = followers.popleft()
        if not followers:
            self._followed.discard(worker)
        grant.passes += 1
        follower.started = _monotonic()
        self._releasing.discard(follower.task_id)  # started (or starting): a Release is moot
        follower.state = TaskState.RUNNING
        follower.grant = grant
        worker.task = follower
        return follower

    def _take_follower_locked(self, worker, task_id):
        """Remove follower ``task_id`` from ``worker``'s line; returns its record or None."""
        for record in worker.followers:
            if record.task_id == task_id:
                worker.followers.remove(record)
                if not worker.followers:
                    self._followed.discard(worker)
                return record
        return None

    def _lease_passed(self, worker, follower, grant):
        """After :meth:`_pass_lease` (lock released): the follower is running; fill the line
        behind it up again once it is down to :data:`REFILL_AT`."""
        self._events.running(follower.task_id, worker)
        if len(worker.followers) <= REFILL_AT:
            self._prefetch(worker, follower, grant)
        worker.flush()

    def _release_followers_locked(self, worker):
        """Ask ``worker`` to give its followers back (queues the messages); True if any was
        asked now. Lock held."""
        asked = False
        for follower in worker.followers:
            if follower.task_id not in self._releasing:
                self._releasing.add(follower.task_id)
                worker.enqueue(protocol.Release(follower.task_id))
                asked = True
        return asked

    def on_spare_resources(self):
        """Resources moved (a task ended, a CPU was lent, an actor died, a node came...) and
        what no queued demand could take is free: followers waiting behind running tasks that
        would fit there now are given back, so they run there instead of waiting (even while
        other lines wait for something else, an infeasible GPU task, a busy custom resource)."""
        if not self._followed:
            return
        fits_now = self._scheduler.fits_now
        with self._lock:
            asked = [w for w in list(self._followed)
                     if w.followers and fits_now(w.followers[0].units) and self._release_followers_locked(w)]
        for worker in asked:
            worker.flush()

    def _requeue(self, record):
        """A follower given back unstarted: first in its line again."""
        self._scheduler.run(self._scheduler.resubmit_front(record.demand))

    def on_released(self, worker, message, buffers):
        """The worker dropped an unstarted task as asked: queue it again. If the driver had
        already made it the running one (its predecessor's result came first), the lease goes
        to the next follower or ends."""
        grant = follower = None
        with self._lock:
            self._releasing.discard(message.task_id)
            record = self._take_follower_locked(worker, message.task_id)
            if record is None:
                if worker.task is None or worker.task.task_id != message.task_id:
                    return
                record = worker.task
                worker.task = None
                grant, record.grant = record.grant, None
                follower = self._pass_lease(worker, grant)
            record.worker = None
            cancelled = record.cancelled
            if not cancelled:
                record.state = TaskState.QUEUED
        if follower is not None:
            self._lease_passed(worker, follower, grant)
        elif grant is not None:
            self._pool.put_back(worker)
            self._scheduler.release_and_start(grant)
        if cancelled:
            self._finish_cancelled(record)
        else:
            self._requeue(record)

    def _drop_followers(self, worker):
        """``worker`` is gone: its followers never started; queue them again, in their order
        (no retry spent)."""
        with self._lock:
            records = list(worker.followers)
            worker.followers.clear()
            self._followed.discard(worker)
            for record in records:
                self._releasing.discard(record.task_id)
                record.worker = None
                if not record.cancelled:
                    record.state = TaskState.QUEUED
        for record in reversed(records):
            if record.cancelled:
                self._finish_cancelled(record)
            else:
                self._requeue(record)


def _job_of(record):
    """The attached job a task belongs to: its submitter's (a driver peer, or a worker serving
    that job); None: the runtime's own job."""
    return record.owner.job_id if record.owner is not None else None


def _spec_key(spec):
    return None if spec is None else spec.key
