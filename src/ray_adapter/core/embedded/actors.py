"""Actors: creation, placement, method calls in order, restarts, death and names.

Life of an actor (:class:`ActorState`)::

    DEPENDENCIES_UNREADY --args sealed--> PENDING_CREATION --constructor ran--> ALIVE
    ALIVE/PENDING_CREATION --process died, restarts left--> RESTARTING --placed--> ...
    any --kill / crash without restarts / exit_actor / out of scope--> DEAD

Records are in :mod:`.actor_records`, handle scope (when a non-detached actor ends) in
:mod:`.actor_scope`; names here. A call in flight when the
process dies is retried after the restart if ``max_task_retries`` allows, else it fails with
ActorUnavailable (restarting) or ActorDied (dead), as in Ray; calls sent behind a constructor
that did not finish had not started and always wait for the restart.

Thread-safety: ``ActorManager._lock`` guards every actor and call record, the name table and
the ``actor`` field of worker handles. It is held for state changes and for queueing messages
on a worker's channel (the object table's lock may be taken under it, never the reverse);
registrations with the object table, scheduler calls, spawning, writes and kills happen after
it is released.

Method calls are queued per actor in arrival order (which keeps each caller's submission order) and
sent in that order once their arguments are ready; they are pipelined behind the constructor,
at most a window of them ahead of the worker (``actor_records.call_window``; refilled when half
are done): a burst of calls waits in the driver's queue, not in the worker's socket.
As in Ray, order holds per caller (the driver, or one worker process): a call whose arguments
are pending holds back the later calls of its own caller only, and another caller's ready call
goes ahead of it.
A call made while the actor restarts waits for the restart if it may be retried; if not, it
waits at most :data:`UNAVAILABLE_AFTER_S` and then fails with ActorUnavailable, as in Ray,
where such a call fails once the caller finds the actor gone, about that long later (a quick
restart is over by then and the call runs). ``max_pending_calls`` caps each caller's
unfinished calls (PendingCallsLimit). A call whose method raised an exception its
``retry_exceptions`` names is run again while its retries last.
"""
import collections
import os
import signal
import threading
import time

from ray_adapter.core import errors, ids, serialization
from ray_adapter.core.embedded import protocol
from ray_adapter.core.embedded.actor_records import ActorRecord, ActorState, CallRecord
from ray_adapter.core.embedded.actor_scope import ActorScope
from ray_adapter.core.embedded.pool import WorkerState
from ray_adapter.core.embedded.protocol import Dep, to_payload
from ray_adapter.core.embedded.demands import Demand
from ray_adapter.core.embedded.results import error_data
from ray_adapter.core.embedded.task_support import (assignment, device_env, notice_retry, notice_worker_died,
                                                    seen_devices)
from ray_adapter.core.execution import ActorLabel, argument_failure


#: How long a call made while its actor restarts, and that may not be retried, waits for the
#: restart before it fails with ActorUnavailable (seconds; Ray 2.60 takes 1.7-2 s here).
UNAVAILABLE_AFTER_S = 2.0


def _sigkill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def creation_task_id(actor_id):
    """The id of an actor's creation task, laid out as Ray's (``ffffffffffffffff`` + actor id)."""
    return b"\xff" * 8 + actor_id


#: Dead actors dropped from the table that the State API still lists (Ray's GCS keeps its
#: destroyed actors up to ``RAY_maximum_gcs_destroyed_actor_cached_count``).
DEPARTED_KEPT = 10_000

#: The task event's ``error_type`` of a call the runtime ended (Ray's names).
_ERROR_TYPES = {errors.ActorDied: "ACTOR_DIED", errors.ActorUnavailable: "ACTOR_UNAVAILABLE",
                errors.TaskCancelled: "TASK_CANCELLED"}

class _PastProcess:
    """What a dead actor's record keeps of the process it had: its pid and node, which the
    State API lists (not the worker handle, with its channel and process objects)."""

    __slots__ = ("pid", "node")

    def __init__(self, pid, node):
        self.pid, self.node = pid, node


def _keeps_name(actor, death):
    """A dead actor's name stays taken while it has handles (see ``ActorDied.keeps_name``)."""
    return not actor.options.detached and isinstance(death, errors.ActorDied) and death.keeps_name


class ActorManager:
    """Actors and their calls, from ``create`` to death (see the module notes)."""

    def __init__(self, *, ids, namespace, objects, scheduler, pool, envs, functions, events,
                 streams, groups, timers, infeasible):
        """Collaborators: ``ids`` (IdFactory), the job's default ``namespace``, the
        ``objects`` table, the ``scheduler``, the worker ``pool``, runtime ``envs``, the
        ``functions`` registry, task ``events``, the ``streams`` table, placement ``groups``
        (told when an actor dies), ``timers`` and the ``infeasible`` warnings. Owns the actor
        handle ``scope`` (which shares its lock)."""
        self._ids, self._namespace, self._objects, self._scheduler = ids, namespace, objects, scheduler
        self._pool, self._envs, self._functions, self._events = pool, envs, functions, events
        self._streams, self._groups, self._timers, self._infeasible = streams, groups, timers, infeasible
        self._lock = threading.Lock()
        self._actors = {}
        self._calls = {}   # task id -> CallRecord, while not finished
        self._names = {}   # (namespace, name) -> actor id
        # Dead actors no longer in the table (out of scope, their job ended), newest last:
        # still listed by the State API, as Ray's GCS keeps destroyed actors (bounded).
        self._departed = collections.deque(maxlen=DEPARTED_KEPT)
        self.scope = ActorScope(self, self._lock)

    # -- creation ----------------------------------------------------------------------------
    def create(self, key, args, deps, options, carried=()):
        """Create an actor; returns its ActorInfo. Raises ActorNameTaken (unless
        ``get_if_exists``: the existing actor's info) and ObjectFreed for a gone argument."""
        namespace = options.namespace if options.namespace is not None else self._namespace
        options.namespace = namespace
        name_key = (namespace, options.name) if options.name else None
        with self._lock:
            existing = self._names.get(name_key) if name_key else None
            if existing is None:
                actor = ActorRecord(self._ids.actor(options.owner_job), key, args, deps, carried, options)
                actor.scope = self.scope.new_state(options.detached)
                self._actors[actor.actor_id] = actor
                if name_key:
                    self._names[name_key] = actor.actor_id
            else:
                existing_info = self._actors[existing].info()
        if existing is not None:
            if options.get_if_exists:
                return existing_info
            raise errors.ActorNameTaken(options.name, namespace)
        if deps or args.refs:  # argument refs (nested too) are held for restarts until it dies
            try:
                self._objects.hold(deps, args.refs)
            except errors.ObjectFreed:
                with self._lock:
                    self._actors.pop(actor.actor_id, None)
                    if name_key and self._names.get(name_key) == actor.actor_id:
                        del self._names[name_key]
                raise
        self.scope.carry(carried)  # until its constructor ran (then the actor borrows them)
        constructor = f"{options.class_name}.__init__"  # a named actor's is "name:Class.__init__"
        self._events.submitted(creation_task_id(actor.actor_id),
                               f"{options.name}:{constructor}" if options.name else constructor,
                               "ACTOR_CREATION_TASK", actor.actor_id, options.resources,
                               getattr(options.scheduling, "group_id", None), constructor,
                               job=options.owner_job)
        if deps:
            self._objects.when_ready(deps, lambda ok, a=actor: self._deps_ready(a, ok))
        else:
            self._deps_ready(actor, True)
        return actor.info()

    def _deps_ready(self, actor, ok):
        if not ok:
            return
        failed = self._objects.first_error(actor.deps) if actor.deps else None
        if failed is not None:  # as Ray: its constructor fails, quoting the argument's error
            name = actor.options.class_name
            self.die(actor, errors.ActorDied(
                actor.actor_id, errors.ActorDeath.ARGS_FAILED, name,
                creation_error=argument_failure(serialization.loads(failed), f"{name}.__init__",
                                                ActorLabel(actor.actor_id, name))))
            return
        with self._lock:
            if actor.state is not ActorState.DEPENDENCIES_UNREADY:
                return
            actor.state = ActorState.PENDING_CREATION
        self._place(actor)

    def _place(self, actor):
        placement = actor.options.scheduling
        if actor.units and not self._scheduler.feasible(actor.units, placement):
            self._infeasible.warn(actor.options.class_name, actor.options.resources)
        # Its own line (Ray's actor creations are a scheduling class apart from tasks).
        demand = Demand(self, actor, actor.units, placement, ("actor",) + tuple(sorted(actor.units.items())))
        grant = self._scheduler.submit(demand)
        if grant is not None:
            self.on_grant(actor, grant)
        elif demand.failure is not None:
            self.on_unschedulable(actor, demand.failure)

    def on_unschedulable(self, actor, reason):
        """It can never be placed: hard affinity to a gone node, or its group was removed."""
        o = actor.options
        if reason == "group_removed":
            death = errors.ActorDied(actor.actor_id, errors.ActorDeath.PLACEMENT_GROUP_REMOVED,
                                     o.class_name, group_id=o.scheduling.group_id, started=False)
        else:
            death = errors.ActorDied(actor.actor_id, errors.ActorDeath.UNSCHEDULABLE, o.class_name)
        self.die(actor, death)

    def on_evict(self, actor):
        """Its placement group was removed: the actor dies now (no restart, as in Ray)."""
        self.kill(actor.actor_id, True, errors.ActorDied(
            actor.actor_id, errors.ActorDeath.PLACEMENT_GROUP_REMOVED, actor.options.class_name,
            group_id=actor.options.scheduling.group_id))

    def on_grant(self, actor, grant):
        if actor.state is ActorState.DEAD:
            self._scheduler.release_and_start(grant)
            return
        try:
            worker = self._pool.take(grant.node, self._envs.spec_of(actor.options.runtime_env),
                                     actor.options.owner_job, fresh=True)
        except Exception as exc:  # no process could be started
            self._scheduler.release_and_start(grant)
            self.die(actor, errors.ActorDied(actor.actor_id, errors.ActorDeath.SPAWN_FAILED,
                                             actor.options.class_name, detail=repr(exc)))
            return
        buffers = []
        args = to_payload(actor.args, buffers)
        deps = [Dep(oid, to_payload(data, buffers))
                for oid, (data, _) in zip(actor.deps, self._objects.values(actor.deps))]
        env = dict((actor.options.runtime_env or {}).get("env_vars") or {})
        devices = seen_devices(grant.devices, env, grant.node)
        env.update(device_env(devices, env))
        o = actor.options
        message = protocol.CreateActor(
            actor_id=actor.actor_id, key=actor.key, args=args, deps=deps, name=o.name,
            class_name=o.class_name, is_async=o.is_async, max_concurrency=o.max_concurrency,
            restart_count=actor.num_restarts, env=env, resources=grant.amounts(),
            gpu_ids=list(devices.get("GPU", ())), handle_meta=actor.meta_blob,
            runtime_env=actor.env_blob, assignment=assignment(grant, o.scheduling, devices),
            concurrency_groups=dict(o.concurrency_groups or {}),
            backpressure=o.generator_backpressure)
        with self._lock:
            dead = actor.state is ActorState.DEAD
            # A new worker that already ended (its exit handler found no actor): failed here.
            gone = not dead and worker.state is WorkerState.DEAD
            if not dead and not gone:
                actor.worker, actor.grant = worker, grant
                worker.actor = actor
                worker.state = WorkerState.ACTOR
                worker.register(actor.key, self._functions[actor.key])
                worker.enqueue(message, buffers)
        if dead:
            self._pool.put_back(worker)
            self._scheduler.release_and_start(grant)
            return
        if gone:
            self._scheduler.release_and_start(grant)
            self.die(actor, self._boot_death(actor, worker))
            return
        self._events.running(creation_task_id(actor.actor_id), worker)
        self._flush(actor)  # calls are pipelined behind the constructor

    def on_ready(self, worker, message):
        with self._lock:
            actor = worker.actor
            if actor is None or actor.actor_id != message.actor_id:
                return
            if actor.state is not ActorState.DEAD:
                actor.state = ActorState.ALIVE
                now = time.time()
                actor.times[1] = actor.times[1] or now
                actor.times[3] = now
            carried, actor.carried = actor.carried, ()
        self._events.finished(creation_task_id(actor.actor_id), True)
        self.scope.uncarry(carried)

    def on_failed(self, worker, message, buffers):
        actor = worker.actor
        if actor is None or actor.actor_id != message.actor_id:
            return
        cause = serialization.loads(protocol.from_payload(message.error, buffers))
        self.die(actor, errors.ActorDied(actor.actor_id, errors.ActorDeath.CREATION_FAILED,
                                         actor.options.class_name, creation_error=cause))

    # -- process exit, death -----------------------------------------------------------------
    def on_worker_exit(self, worker):
        with self._lock:
            doomed, worker.doomed = worker.doomed, None
        if doomed is not None:  # its dead actor's calls it did not answer (see die)
            calls, death = doomed
            data = error_data(death)
            for call in calls.values():
                self._fail_call(call, death, data)
        actor = worker.actor
        if actor is None:
            return
        fail, death, restart, crashed = [], None, False, False
        with self._lock:
            if actor.worker is not worker:
                return
            actor.worker = None
            actor.last_process = _PastProcess(worker.pid, worker.node)  # listed with its death
            grant, actor.grant = actor.grant, None
            if actor.state is ActorState.DEAD:  # it drained (die_draining): what it left unanswered
                if not _keeps_name(actor, actor.death):
                    self._free_name_locked(actor)
                fail = [(call, actor.death) for call in actor.inflight.values()]
                actor.inflight.clear()
                for call, _ in fail:
                    self._calls.pop(call.task_id, None)
            else:
                inflight = list(actor.inflight.values())
                actor.inflight.clear()
                code = worker.proc.returncode
                killed = False
                if worker.boot_failure is not None:  # no restart can start it either
                    death = self._boot_death(actor, worker)
                elif worker.exit_intended:
                    how = errors.EXITED_BY_EXIT_ACTOR if worker.exit_by_exit_actor else ""
                    death = errors.ActorDied(actor.actor_id, errors.ActorDeath.EXITED,
                                             actor.options.class_name, detail=how)
                elif actor.restarts_left != 0:
                    # Calls sent behind a constructor that never finished never started
                    # (Ray sends none before it has): all wait for the next incarnation.
                    started = actor.state is ActorState.ALIVE
                    killed = actor.kill_restart
                    if actor.restarts_left > 0:
                        actor.restarts_left -= 1
                    actor.num_restarts += 1
                    actor.state = ActorState.RESTARTING
                    restart = True
                    # (Ray words a process that left by sys.exit(N) "UnexpectedSystemExit")
                    unavailable = errors.ActorUnavailable(
                        actor.actor_id, worker.pid, code, actor.kill_restart,
                        by_sys_exit=worker.left_by_python and not actor.kill_restart)
                    actor.kill_restart = False
                    # Calls the window held back in the driver count as sent: Ray had sent
                    # them, so they fail (or spend a retry) as the ones in flight do.
                    held = self._sendable_locked(actor) if started else []
                    if held:
                        held_ids = {id(call) for call in held}
                        kept = [call for call in actor.pending if id(call) not in held_ids]
                        actor.pending.clear()
                        for call in kept:
                            actor.pending.append(call)
                    for call in reversed(inflight + held):
                        if not started:
                            actor.pending.appendleft(call)
                        elif call.retries_left != 0:
                            if call.retries_left > 0:
                                call.retries_left -= 1
                            actor.pending.appendleft(call)
                        else:
                            self._calls.pop(call.task_id, None)
                            fail.append((call, unavailable))
                    fail.reverse()  # in submission order
                elif actor.kill_restart:  # ray.kill(no_restart=False), no restart left: killed,
                    killed = True         # as in Ray (not a crash: no notice)
                    death = errors.ActorDied(actor.actor_id, errors.ActorDeath.KILLED,
                                             actor.options.class_name, pid=worker.pid,
                                             detail=errors.KILLED_PROCESS)
                elif not worker.node.alive:
                    death = errors.ActorDied(actor.actor_id, errors.ActorDeath.NODE_DIED,
                                             actor.options.class_name, pid=worker.pid,
                                             node_id=worker.node.hex)
                else:
                    death = errors.ActorDied(actor.actor_id, errors.ActorDeath.CRASHED,
                                             actor.options.class_name, pid=worker.pid, exit_code=code,
                                             detail=errors.LEFT_BY_SYS_EXIT if worker.left_by_python else "")
                crashed = not worker.exit_intended and not killed and worker.boot_failure is None
        if crashed:
            notice_worker_died(worker.pid, code)
        if grant is not None:
            self._scheduler.release_and_start(grant)
        for call, err in fail:
            self._fail_call(call, err)
        if death is not None:
            self.die(actor, death.located(None, None, worker.node.ip), inflight)
        elif restart:
            self._place(actor)

    @staticmethod
    def _boot_death(actor, worker):
        """The death of ``actor`` whose new ``worker`` ended at start: its runtime env's
        py_executable could not start it (ENV_SETUP_FAILED, Ray's RuntimeEnvSetupError), or it
        died for another reason (SPAWN_FAILED)."""
        if worker.boot_failure is not None:
            return errors.ActorDied(actor.actor_id, errors.ActorDeath.ENV_SETUP_FAILED,
                                    actor.options.class_name, detail=worker.boot_failure)
        return errors.ActorDied(actor.actor_id, errors.ActorDeath.SPAWN_FAILED, actor.options.class_name,
                                detail="its new worker process ended at start")

    def die(self, actor, death, extra_calls=(), retire=True, draining=False):
        """Mark ``actor`` dead with ``death``: its queued and in-flight calls fail with it, its
        name is freed, its resources return and its process (if any) is told to exit (unless
        not ``retire``: it is exiting by itself). The in-flight calls of a live actor whose
        process is told to exit (or killed) wait on it instead (``WorkerHandle.doomed``): an
        answer it wrote before it ended stands, the rest fail with ``death`` when its stream
        ends (:meth:`on_worker_exit`). ``draining``: its process is exiting by itself
        after the calls it runs (:meth:`die_draining`): those stay in flight, answered by it or
        failed when it exits, and its process and resources stay with it until then."""
        with self._lock:
            if actor.state is ActorState.DEAD:
                return
            was_alive = actor.state is ActorState.ALIVE
            if isinstance(death, errors.ActorDied):
                # (not when its own code ended the process: Ray's worker reports that exit)
                death.never_ran = actor.state in (ActorState.DEPENDENCIES_UNREADY,
                                                  ActorState.PENDING_CREATION) \
                    and death.cause is not errors.ActorDeath.EXITED \
                    and death.detail != errors.LEFT_BY_SYS_EXIT
            actor.state = ActorState.DEAD
            actor.times[2] = actor.times[3] = time.time()
            o = actor.options
            if isinstance(death, errors.ActorDied):  # Ray's text says where it lived
                alive_in = actor.worker
                death.located(o.name, o.namespace, alive_in.node.ip if alive_in is not None else None)
                if death.pid is None and alive_in is not None:
                    death.pid = alive_in.pid
            actor.death = death
            if not draining and not _keeps_name(actor, death):  # (a draining actor keeps it
                self._free_name_locked(actor)                    # until its process exits)
            inflight = [] if draining else list(actor.inflight.values())
            worker = grant = None
            if not draining:
                actor.inflight.clear()
                worker, actor.worker = actor.worker, None
                grant, actor.grant = actor.grant, None
            if worker is not None and retire and inflight and was_alive \
                    and worker.state is not WorkerState.DEAD:
                # A live actor killed or told to exit: what it answered before its stream ends
                # stands (as in Ray, where a reply already sent reaches its caller); the rest
                # fails with its death then (on_worker_exit, which runs after the pool marks
                # it DEAD: checked here under the same lock). Calls behind a constructor that
                # failed fail now.
                worker.doomed = ({call.task_id: call for call in inflight}, death)
                inflight = []
            calls = list(extra_calls) + inflight + list(actor.pending)
            actor.pending.clear()
            for call in calls:
                self._calls.pop(call.task_id, None)
            if worker is not None:
                worker.actor = None
                actor.last_process = _PastProcess(worker.pid, worker.node)
            carried, actor.carried = actor.carried, ()
        self.scope.uncarry(carried)
        self._events.finished(creation_task_id(actor.actor_id), False)
        self._groups.on_actor_dead(actor.actor_id)
        if actor.deps or actor.args.refs:
            self._objects.release(actor.deps, actor.args.refs)  # held for restarts until now
        data = error_data(death)
        for call in calls:
            self._fail_call(call, death, data)
        if grant is not None:
            self._scheduler.release_and_start(grant)
        if worker is not None and retire:
            self._pool.retire(worker, death)
        return worker

    def die_draining(self, actor, death, exiting_task_id):
        """A concurrent ``actor`` called ``exit_actor()`` in call ``exiting_task_id``: it is
        dead (that call and the calls not yet sent fail with ``death``, as in Ray), while the
        calls its process already runs go on: it answers them, then exits (those it had not
        begun fail then, in :meth:`on_worker_exit`)."""
        with self._lock:
            exiting = actor.inflight.pop(exiting_task_id, None)
        self.die(actor, death, () if exiting is None else (exiting,), retire=False, draining=True)

    def kill(self, actor_id, no_restart, death=None):
        """``ray.kill``: the actor's process is killed now; with ``no_restart`` the actor is
        dead at once (pending calls fail with ``death``, default KILLED), else it restarts if
        it has restarts left."""
        with self._lock:
            actor = self._actors.get(actor_id)
            if actor is None:
                return
            worker = actor.worker
            if actor.state is ActorState.DEAD:
                self._free_name_locked(actor)  # (a dead actor's name kept for its handles)
                if worker is not None:  # it exits after its running calls: killed now instead
                    _sigkill(worker.pid)
                return
            if not no_restart:
                actor.kill_restart = True
        if no_restart:
            self.die(actor, death or errors.ActorDied(actor_id, errors.ActorDeath.KILLED,
                                                      actor.options.class_name))
        if worker is not None:
            _sigkill(worker.pid)

    def _free_name_locked(self, actor):
        """(Under the lock.) The name of a dead ``actor`` is free again."""
        o = actor.options
        if o.name and self._names.get((o.namespace, o.name)) == actor.actor_id:
            del self._names[(o.namespace, o.name)]

    def forget(self, actor):
        """Drop a dead actor from the table; its record stays listed (without its constructor's
        arguments and blobs) among the last :data:`DEPARTED_KEPT` departed ones."""
        with self._lock:
            self._free_name_locked(actor)  # (one still draining: nobody can look it up any more)
            if self._actors.pop(actor.actor_id, None) is not None:
                actor.args = actor.meta_blob = actor.env_blob = None
                self._departed.append(actor)

    def has_actors_of(self, job_id):
        """True while an actor of attached job ``job_id`` is not dead (a detached one)."""
        with self._lock:
            return any(a.options.owner_job == job_id and a.state is not ActorState.DEAD
                       for a in self._actors.values())

    def end_job(self, job_id, owner):
        """The driver of attached job ``job_id`` ended (``owner``: its
        :class:`errors.OwnerExit`): the non-detached actors it created die with it
        (``OWNER_DIED``), their processes killed, as Ray ends a job's actors."""
        with self._lock:
            owned = [a for a in self._actors.values()
                     if a.options.owner_job == job_id and not a.options.detached
                     and a.state is not ActorState.DEAD]
        for actor in owned:
            self.kill(actor.actor_id, True, errors.ActorDied(
                actor.actor_id, errors.ActorDeath.OWNER_DIED, actor.options.class_name, owner=owner))

    def end_owned(self, worker, ip):
        """Worker process ``worker`` (not a driver) ended: the non-detached actors it created
        die with it (``OWNER_DIED``), their processes killed without their
        ``__ray_shutdown__``, as Ray ends the actors a dead worker owned -- even those other
        processes still hold handles to. Call before ``on_worker_exit`` reads its actor's death:
        a kill or an out-of-scope end is the runtime's (Ray's INTENDED_SYSTEM_EXIT). A task
        worker the pool retired for idleness or for its function's ``max_calls`` is not an
        owner's end: Ray keeps a worker that owns something alive (a ``max_calls`` worker exits
        once what it owns is out of scope); here what it created lives on, held by its other
        handles."""
        if worker.keeps_what_it_owns:
            return
        with self._lock:
            owned = [a for a in self._actors.values()
                     if a.options.owner_worker == worker.worker_id and not a.options.detached
                     and a.state is not ActorState.DEAD]
            hosted = worker.actor
            ended = (hosted is not None and hosted.state is ActorState.DEAD
                     and hosted.death.cause is not errors.ActorDeath.EXITED)
        if not owned:
            return
        by_runtime = ended or worker.retired_for is not None
        owner = errors.OwnerExit(worker.worker_id.hex(), ip, worker.exit_intended or by_runtime,
                                 by_runtime and not worker.exit_intended)
        for actor in owned:
            self.kill(actor.actor_id, True, errors.ActorDied(
                actor.actor_id, errors.ActorDeath.OWNER_DIED, actor.options.class_name, owner=owner))

    # -- lookups -----------------------------------------------------------------------------
    def get(self, actor_id):
        return self._actors.get(actor_id)

    def in_table(self):
        """The actors in the table (a dead one until it is forgotten); the caller holds the
        manager's lock (the scope, which shares it, does)."""
        return list(self._actors.values())

    def records(self):
        """``[(record, process, grant)]`` of every actor, for the State API (a snapshot): the
        departed dead ones first, then the table's; ``process`` has ``pid`` and ``node`` (the
        live worker, or what a dead actor's process was; None: never placed)."""
        with self._lock:
            return [(a, a.worker or a.last_process, a.grant)
                    for a in (*self._departed, *self._actors.values())]

    def named(self, name, namespace):
        with self._lock:
            actor_id = self._names.get((namespace, name))
            if actor_id is None:
                raise errors.ActorNotFound(name, namespace)
            return self._actors[actor_id].info()

    def list_named(self, namespace, all_namespaces):
        """The named actors that are not dead (a dead one keeps its name for its handles, see
        ``ActorDied.keeps_name``, unlisted, as Ray lists them)."""
        with self._lock:
            return [{"name": name, "namespace": ns} for (ns, name), actor_id in self._names.items()
                    if (all_namespaces or ns == namespace)
                    and self._actors[actor_id].state is not ActorState.DEAD]

    # -- carried handles (delegated to the scope) --------------------------------------------
    def carry(self, actor_ids):
        self.scope.carry(actor_ids)

    def uncarry(self, actor_ids):
        self.scope.uncarry(actor_ids)

    def worker_of(self, task_id):
        """The worker handle of the actor that runs call ``task_id``, or None (no process yet,
        finished, not a call). Read without the lock: a hint, as ``TaskManager.worker_of``."""
        call = self._calls.get(task_id)
        actor = call.actor if call is not None else None
        return actor.worker if actor is not None else None

    def unfinished_returns(self):
        """The return ids of every method call not finished yet (a snapshot; exit grace)."""
        with self._lock:
            return [oid for call in self._calls.values() for oid in call.return_ids]

    def clear(self):
        with self._lock:
            self._actors.clear()
            self._calls.clear()
            self._names.clear()
            self._departed.clear()

    def submit_call(self, actor_id, method, args, deps, options, carried=(), caller=None,
                    task_id=None):
        """Queue a method call; returns its return ids (``[]`` for ``num_returns=0``; one id,
        the completion, for a streaming call). ``task_id``: minted by the caller (None: here).
        Raises PendingCallsLimit."""
        task_id = task_id or self._ids.task(actor_id)
        streaming = options.generator == "streaming"
        num_returns = 1 if streaming else options.num_returns
        return_ids = ids.IdFactory.returns(task_id, num_returns or 1)
        held = False
        with self._lock:
            actor = self._actors.get(actor_id)
            call = CallRecord(task_id, actor, method, args, deps, carried, options, return_ids, caller)
            dead = actor is None or actor.state is ActorState.DEAD
            if not dead:
                limit = actor.options.max_pending_calls
                count = actor.unfinished.get(caller, 0)
                if limit > 0 and count >= limit:
                    raise errors.PendingCallsLimit(actor_id, actor.options.class_name, method, limit)
                held = actor.state is ActorState.RESTARTING and call.retries_left == 0
                actor.unfinished[caller] = count + 1
                call.counted = True
        if deps or args.refs:  # top-level and nested argument refs, until it finishes
            try:
                self._objects.hold(deps, args.refs)
            except errors.ObjectFreed:
                self._uncount(call)  # refused: it does not count against max_pending_calls
                raise
        self._objects.create(return_ids, 1 if num_returns else 0, task_id)
        self._events.submitted(task_id, options.name, "ACTOR_TASK", actor_id,
                               actor.options.method_resources if actor else None, func_name=f"{actor.options.class_name}.{method}" if actor else method,
                               job=getattr(caller, "job_id", None))
        if streaming:
            self._streams.open(task_id, call.backpressure > 0 or (
                actor is not None and actor.options.generator_backpressure > 0))
        if dead:
            failure = actor.death if actor is not None else errors.ActorDied(
                actor_id, errors.ActorDeath.UNKNOWN)
            self._fail_call(call, failure)
            return return_ids if num_returns else []
        with self._lock:
            if actor.state is ActorState.DEAD:  # died meanwhile: fail it as die() would have
                dead = True
            else:
                self._calls[task_id] = call
                actor.pending.append(call)
                self.scope.carry_locked(carried)
        if dead:
            self._fail_call(call, actor.death)
        else:
            if held:
                self._timers.call_later(UNAVAILABLE_AFTER_S, lambda: self._unavailable(call))
            self._flush(actor)
        return return_ids if num_returns else []

    def _unavailable(self, call):
        """A call held while its actor restarts (timer thread): failed with ActorUnavailable if
        the actor is restarting still. Sent already, behind the new constructor, it is
        withdrawn: the worker skips it (Cancel) unless the constructor has just ended and the
        call begun (then, as Ray says of such a call, it may or may not have run); its answer
        is ignored."""
        actor = call.actor
        worker = None
        with self._lock:
            if actor.state is not ActorState.RESTARTING or call.cancel_requested:
                return  # restarted (the call ran or runs), dead (failed with the death), or
                # cancelled by its caller (answered so)
            if call in actor.pending:
                actor.pending.remove(call)
            elif actor.inflight.get(call.task_id) is call:
                del actor.inflight[call.task_id]
                worker = actor.worker
                if worker is not None:
                    worker.enqueue(protocol.Cancel(call.task_id, False))
            else:
                return  # cancelled meanwhile
            self._calls.pop(call.task_id, None)
        if worker is not None:
            worker.flush()
        error = errors.ActorUnavailable(actor.actor_id, while_restarting=True)
        self._fail_call(call, error)
        self._flush(actor)  # the calls behind it, if it was the head waiting for its arguments
        self.scope.end_if_idle(actor)  # its handles may all be gone: nothing left to wait for

    def _flush(self, actor):
        """Send the queued calls whose arguments are ready, in order per caller (see the module
        notes): a call waiting for its arguments holds back its own caller's later calls."""
        sent_streams = []
        wait_for = []
        with self._lock:
            worker = actor.worker
            if worker is None or actor.state is ActorState.DEAD:
                return
            pending = actor.pending
            blocked = set()  # callers with a call waiting for its arguments
            kept = []        # their calls, taken off the queue on the way, in order
            inflight, window = actor.inflight, actor.window
            while pending and len(inflight) < window and not (blocked and pending.only_callers_in(blocked)):
                call = pending.popleft()
                if call.caller in blocked:
                    kept.append(call)
                    continue
                if call.deps and not all(self._objects.ready_flags(call.deps)):
                    blocked.add(call.caller)
                    kept.append(call)
                    if not call.waiting:
                        call.waiting = True
                        wait_for.append(call)
                    continue
                call.waiting = False
                buffers = []
                args = to_payload(call.args, buffers)
                # A failed argument goes too, flagged: the call fails in the actor, as Ray's
                # (its error quotes the argument's, with the actor's pid and repr).
                deps = [Dep(oid, to_payload(data, buffers), is_error)
                        for oid, (data, is_error) in zip(call.deps, self._objects.values(call.deps))] \
                    if call.deps else []
                actor.inflight[call.task_id] = call
                worker.enqueue(protocol.CallActor(
                    task_id=call.task_id, method=call.method, args=args, deps=deps,
                    num_returns=1 if call.streaming else (call.num_returns or 1), name=call.name,
                    group=call.group, streaming=call.streaming, backpressure=call.backpressure,
                    retry_exceptions=call.retry_blob), buffers)
                self._events.running(call.task_id, worker)
                if call.streaming:
                    sent_streams.append(call.task_id)
            if kept:
                pending.put_back(kept)
        for task_id in sent_streams:
            self._streams.attach(task_id, worker)
        worker.flush()
        for call in wait_for:
            self._objects.when_ready(call.deps, lambda ok, a=actor: ok and self._flush(a))

    def _sendable_locked(self, actor):
        """(Under the lock.) The queued calls a flush would send were there no window, in
        order: the ready ones of callers not held back by a call waiting for its arguments."""
        objects = self._objects
        blocked, out = set(), []
        for call in actor.pending:
            if call.caller in blocked:
                continue
            if call.deps and not all(objects.ready_flags(call.deps)):
                blocked.add(call.caller)
                continue
            out.append(call)
        return out

    def on_call_done(self, worker, message, buffers):
        retry = False
        with self._lock:
            actor = worker.actor
            call = actor.inflight.pop(message.task_id, None) if actor is not None else None
            if call is None:
                doomed = worker.doomed
                call = doomed[0].pop(message.task_id, None) if doomed is not None else None
                if call is None:
                    return
                actor = None  # answered before its killed actor's process ended (see die)
            elif not message.ok and message.retryable and call.retries_left != 0 \
                    and actor.state is not ActorState.DEAD:
                left = call.retries_left
                if call.retries_left > 0:
                    call.retries_left -= 1
                actor.pending.appendleft(call)
                retry = True
            else:
                self._calls.pop(call.task_id, None)
        datas = [protocol.from_payload(p, buffers) for p in message.results]
        if actor is None:
            self._finish_call(call, datas, not message.ok)
            return
        if retry:
            notice_retry(call.name, left, datas[0])
            self._flush(actor)
            return
        self._finish_call(call, datas, not message.ok)
        if actor.pending and len(actor.inflight) <= actor.window // 2:
            self._flush(actor)  # refill the window once half of it is done (large writes)
        self.scope.end_if_idle(actor)

    def _uncount(self, call):
        """``call`` no longer counts among its caller's unfinished calls (max_pending_calls)."""
        if not call.counted:
            return
        call.counted = False
        with self._lock:
            unfinished = call.actor.unfinished
            left = unfinished.get(call.caller, 0) - 1
            if left > 0:
                unfinished[call.caller] = left
            else:
                unfinished.pop(call.caller, None)

    def _fail_call(self, call, failure, data=None, cancelled=False):
        """End ``call`` with the runtime's error ``failure`` (``data``: it serialized already,
        when many calls fail with one error)."""
        self._finish_call(call, [data if data is not None else error_data(failure)], True,
                          cancelled, failure)

    def _finish_call(self, call, datas, is_error, cancelled=False, failure=None):
        """The call is over: its results (``datas``; ``is_error``) sealed, what it held let go.
        ``failure``: the runtime's error that ended it (None: the worker's answer)."""
        nested = call.args.refs if call.args is not None else ()
        call.args = None  # its arguments (shared buffers among them) are not needed any more
        self._events.finished(call.task_id, not is_error, _ERROR_TYPES.get(type(failure)))
        self._uncount(call)
        if call.deps or nested:
            self._objects.release(call.deps, nested)
        self.scope.uncarry(call.carried)
        self._objects.seal_results(call.return_ids, datas, is_error)
        if call.streaming:  # a cancelled stream drops what was not taken, as in Ray
            self._streams.end(call.task_id, drop_untaken=is_error and (cancelled or call.cancel_requested))

    def cancel_call(self, task_id):
        """Cancel an actor call: dropped if not sent yet, else the actor is asked to cancel it."""
        with self._lock:
            call = self._calls.get(task_id)
            if call is None or call.actor is None:
                return
            actor = call.actor
            if call in actor.pending:
                actor.pending.remove(call)
                self._calls.pop(task_id, None)
                worker = None
            else:
                worker = actor.worker
                if worker is None:
                    return
                call.cancel_requested = True
                worker.enqueue(protocol.Cancel(task_id, False))
        if worker is None:
            self._fail_call(call, errors.TaskCancelled(task_id), cancelled=True)
            self._flush(actor)
            self.scope.end_if_idle(actor)  # out of scope with nothing left: it ends now
        else:
            worker.flush()
