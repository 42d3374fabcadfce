"""Pipelined tasks: a task worker gets its next tasks while the current one runs.

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

Mixed into :class:`~ray_adapter.core.embedded.tasks.TaskManager`: records and ``worker.followers``
are guarded by its lock; messages are queued under it and written after.
"""
from time import monotonic as _monotonic

from ray_adapter.core.embedded import protocol
from ray_adapter.core.embedded.protocol import Dep, to_payload
from ray_adapter.core.embedded.task_records import TaskState
from ray_adapter.core.embedded.task_support import assignment, device_env

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


class TaskPipelineMixin:
    """Followers of the task manager's workers (see the module notes)."""

    def _run_message(self, record, grant):
        """The RunTask of ``record`` under ``grant``, and its buffers."""
        rt = self.rt
        buffers = []
        args = to_payload(record.args, buffers)
        deps = [Dep(oid, to_payload(data, buffers))
                for oid, (data, _) in zip(record.deps, rt.objects.values(record.deps))] if record.deps else []
        env = record.shape.env
        if grant.devices:
            env = dict(env, **device_env(grant.devices))
        message = protocol.RunTask(
            task_id=record.task_id, key=record.key, args=args, deps=deps,
            num_returns=1 if record.streaming else (record.options.num_returns or 1),
            name=record.options.name, env=env, resources=record.shape.amounts,
            gpu_ids=list(grant.devices.get("GPU", ())), retry_exceptions=record.retry_blob,
            assignment=assignment(grant, record.options.scheduling), streaming=record.streaming,
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
        rt = self.rt
        if grant.devices or grant.bundle is not None or not self._pipelines(running):
            return
        room = PIPELINE_DEPTH - len(worker.followers)
        # Beside other waiting lines only while this function's tasks are brief, and for a
        # quantum of them: then the lease goes back and the lines take turns.
        beside = self._brief.get(running.key, False) and grant.passes < SHARED_QUANTUM
        demands = rt.scheduler.take_followers(running.demand.shape, room, beside) if room > 0 else ()
        if not demands:
            return
        spec = _spec_key(rt.envs.spec_of(running.options.runtime_env))
        messages = []
        for demand in demands:
            record = demand.holder
            fits = (demand.handler is self and self._pipelines(record)  # a task, not an actor
                    and _spec_key(rt.envs.spec_of(record.options.runtime_env)) == spec)
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
                worker.register(record.key, rt.functions[record.key])
                worker.enqueue(*built)
        for demand in reversed(back):
            rt.scheduler.run(rt.scheduler.resubmit_front(demand))

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
        self.rt.events.running(follower.task_id, worker)
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
        fits_now = self.rt.scheduler.fits_now
        with self._lock:
            asked = [w for w in list(self._followed)
                     if w.followers and fits_now(w.followers[0].units) and self._release_followers_locked(w)]
        for worker in asked:
            worker.flush()

    def _requeue(self, record):
        """A follower given back unstarted: first in its line again."""
        rt = self.rt
        rt.scheduler.run(rt.scheduler.resubmit_front(record.demand))

    def on_released(self, worker, message, buffers):
        """The worker dropped an unstarted task as asked: queue it again. If the driver had
        already made it the running one (its predecessor's result came first), the lease goes
        to the next follower or ends."""
        rt = self.rt
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
            rt.pool.put_back(worker)
            rt.scheduler.release_and_start(grant)
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


def _spec_key(spec):
    return None if spec is None else spec.key
