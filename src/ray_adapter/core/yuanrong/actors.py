"""The yuanrong backend's actors: one ActorShell instance per actor, names, handle scope.

Names are tracked here as well, since yr's local mode cannot look names up; a name is
reserved before the instance is created, so concurrent creators of one name get one actor.
An actor whose handles are all gone ends after the calls it already has (callbacks count
them; its ending is queued to the one endings thread: no thread per actor).

Thread-safety: ``ActorTable._lock`` guards ``_actors``, ``_names`` and each record's
``handles``, ``unfinished``, ``dead`` and ``death``; it is a leaf: the object table, the streams,
the local resources and yr are called after it is let go (an actor's death is decided under
it, then acted on outside).
"""
import threading
import time

from ray_adapter.core import errors
from ray_adapter.core.interface import ActorInfo
from ray_adapter.core.yuanrong import actor_shell, shell
from ray_adapter.core.yuanrong.completions import completion_of
from ray_adapter.core.yuanrong.objects import from_yr_error

DEFAULT_ASYNC_CONCURRENCY = 1000


#: Deaths that happen where the actor runs and reach the driver in a call's outcome.
_DEATHS_SEEN_IN_CALLS = frozenset((errors.ActorDeath.CREATION_FAILED, errors.ActorDeath.ARGS_FAILED,
                                   errors.ActorDeath.CRASHED, errors.ActorDeath.EXITED))

class _Actor:
    """An actor of this driver. Created in two steps: its record (reserving its name) under the
    table's lock, then its yr instance outside it (``created`` is set once ``proxy`` is)."""

    __slots__ = ("actor_id", "proxy", "info", "handles", "escaped", "dead", "death", "detached",
                 "resources", "call", "created", "options", "unfinished", "arg_holds", "times",
                 "owner")

    def __init__(self, actor_id, proxy, info, detached, resources=None, options=None):
        self.resources = dict(resources or {})
        self.options = options
        self.unfinished = 0  # calls made from this process and not finished (max_pending_calls)
        self.created = threading.Event()
        self.proxy = self.call = None
        if proxy is not None:
            self.set_proxy(proxy)
        self.actor_id = actor_id
        self.info = info
        self.handles = 0
        self.escaped = False
        self.dead = False
        self.death = None
        self.detached = detached
        self.arg_holds = None  # what its packed constructor arguments hold, until it is dead
        self.owner = None      # the id of the actor that created it (None: the driver or a task)
        # [registered, alive (the adapter sees it so once created), dead, last change]: seconds
        now = time.time()
        self.times = [now, now, None, now]

    def set_proxy(self, proxy):
        self.proxy = proxy
        self.call = proxy.call  # the shell's one method, resolved once (yr builds it per access)
        self.created.set()


class ActorTable:
    """Actor creation, calls, kill, scope and names over yr instances.

    Collaborators: ``yr``, ``id_factory``, ``objects`` (the object table: arguments, returns,
    the futures of calls in flight), ``streams`` (streaming calls), ``options_map``
    (:class:`~.invoke_options.InvokeOptionsMap`), ``job_env`` (env_vars), ``local`` (local
    mode's resource grants, or None), ``endings`` (the thread that ends actors gone out of
    scope), ``namespace`` (the job's), ``local_mode``."""

    def __init__(self, yr, id_factory, objects, streams, options_map, *, job_env, local,
                 endings, namespace, local_mode):
        self.yr = yr
        self._ids = id_factory
        self.objects = objects
        self.streams = streams
        self.options_map = options_map
        self.job_env = job_env
        self._local = local
        self._endings = endings
        self.namespace = namespace
        self.local_mode = local_mode
        self._lock = threading.RLock()
        self._actors = {}  # actor id -> _Actor
        self._names = {}   # (namespace, name) -> actor id (a live one, or dead and kept: keeps_name)
        self._shell_creator = None
        self._closed = False

    def _shell(self):
        if self._shell_creator is None:
            self._shell_creator = self.yr.instance(actor_shell.ActorShell)
        return self._shell_creator

    # -- creation and calls ----------------------------------------------------------------
    def create(self, cls, class_key, args, kwargs, options):
        """A new actor (its ActorInfo; ``get_if_exists``: the live one of that name);
        ActorNameTaken for a live name."""
        namespace = options.namespace if options.namespace is not None else self.namespace
        actor_id = self._ids.actor()
        info = ActorInfo(actor_id, options.name, namespace, options.class_name, options.handle_meta)
        actor = _Actor(actor_id, None, info, options.detached, options.resources, options)
        actor.owner = shell.current_call.get()[2]  # created in one of an actor's calls
        with self._lock:  # check and reserve the name at once: concurrent creators race here
            if options.name:
                existing = self._names.get((namespace, options.name))
                if existing is not None:  # (a dead one whose name is kept too: keeps_name)
                    if options.get_if_exists:
                        return self._actors[existing].info
                    raise errors.ActorNameTaken(options.name, namespace)
                self._names[(namespace, options.name)] = actor_id
            self._actors[actor_id] = actor
        try:
            packed, dep_indexes, deps = self.objects.pack_args(args, kwargs)
            env = self.job_env.env_vars(options.runtime_env)
            placement = options.scheduling
            in_group = placement is not None and placement.in_group
            groups = dict(options.concurrency_groups or {})
            meta = (actor_id, options.name, options.class_name, options.is_async, env,
                    dict(options.resources), dep_indexes, groups, options.max_concurrency,
                    options.max_restarts,
                    (placement.group_id, bool(placement.capture)) if in_group else None,
                    placement if self.local_mode else None)  # local mode: granted by the adapter
            concurrency = options.max_concurrency or (DEFAULT_ASYNC_CONCURRENCY if options.is_async else 1)
            concurrency += sum(groups.values())  # every group's calls run at once; the shell limits each
            opts = self.options_map.invoke_options(
                options.resources, name=None if self.local_mode else options.name,
                namespace=None if self.local_mode else namespace, restarts=options.max_restarts,
                retries=options.max_task_retries, concurrency=concurrency, detached=options.detached,
                runtime_env=options.runtime_env, placement=placement)
            with self._lock:
                actor.arg_holds = packed
            proxy = self._shell().options(opts).invoke(cls, meta, packed, *deps)
        except BaseException:
            with self._lock:
                held, actor.arg_holds = actor.arg_holds, None
                self._actors.pop(actor_id, None)
                if options.name and self._names.get((namespace, options.name)) == actor_id:
                    del self._names[(namespace, options.name)]
                actor.dead = True
            self.objects.release_now(held)
            actor.created.set()
            raise
        actor.set_proxy(proxy)
        if actor.dead:  # killed while it was being created (by name): its instance goes too
            with self._lock:
                held, actor.arg_holds = actor.arg_holds, None
            self.objects.release_now(held)
            self._terminate(actor)
        return info

    def _actor(self, actor_id):
        actor = self._actors.get(actor_id)
        if actor is None:
            raise errors.ActorDied(actor_id, errors.ActorDeath.UNKNOWN)
        return actor

    def info(self, actor_id):
        """The ActorInfo of an actor of this table, or None."""
        actor = self._actors.get(actor_id)
        return None if actor is None else actor.info

    def submit(self, actor_id, method_name, args, kwargs, options):
        """Call ``method_name``: the ids of its returns (failing with the actor's death when it
        is dead); PendingCallsLimit beyond ``max_pending_calls``."""
        actor = self._actor(actor_id)
        task_id = self._ids.task(actor_id)
        if actor.call is None:
            actor.created.wait()  # created by another thread a moment ago (get_if_exists)
        objects = self.objects
        if actor.dead or actor.call is None:
            return objects.failed_returns(task_id, options.num_returns, actor.death or errors.ActorDied(
                actor_id, errors.ActorDeath.UNKNOWN, actor.info.class_name))
        limit = actor.options.max_pending_calls if actor.options is not None else -1
        if limit > 0 and actor.unfinished >= limit:
            raise errors.PendingCallsLimit(actor_id, actor.info.class_name, method_name, limit)
        packed, dep_indexes, deps = objects.pack_args(args, kwargs)
        streaming = options.generator == "streaming"
        retries = options.max_task_retries
        if retries is None:
            retries = actor.options.max_task_retries if actor.options is not None else 0
        retry_on = options.retry_exceptions
        meta = (method_name, task_id, options.name, options.num_returns or 1, dep_indexes, streaming,
                options.concurrency_group or "", retry_on, retries if retry_on else 0, retries)

        def invoke():
            ref = actor.call.invoke(meta, packed, *deps)
            objects.release_after(ref, packed)  # what the arguments hold, once the call ended
            completion_of(ref).add(lambda value, exc: self._death_seen(actor, value))
            return ref

        try:
            if streaming:
                limit = options.generator_backpressure
                return_ids = self.streams.open_call(invoke, task_id, limit, actor_id, options.name)
            else:
                return_ids = objects.returns(invoke(), task_id, options.num_returns, actor_id, options.name)
        except Exception as exc:  # e.g. "this instance is terminated"
            objects.release_now(packed)
            return objects.failed_returns(task_id, options.num_returns,
                                          actor.death or from_yr_error(exc, actor_id))
        if actor.options is not None and actor.options.max_pending_calls > 0 and return_ids:
            self._count_unfinished(actor, return_ids[0])
        return return_ids

    def _count_unfinished(self, actor, object_id):
        with self._lock:
            actor.unfinished += 1
        try:
            future = self.objects.future_of(object_id)
        except errors.ObjectFreed:  # dropped already: its end is not watched
            with self._lock:
                actor.unfinished -= 1
            return

        def done(_f):
            with self._lock:
                actor.unfinished -= 1

        future.add_done_callback(done)

    # -- death -----------------------------------------------------------------------------
    def _death_seen(self, actor, outcome):
        """(yr's completion thread.) A call's outcome is how this driver learns that its actor
        died where it runs: a constructor that raised, a process that ended with no restart
        left (the shell answers every call with that death). The actor is then dead here too:
        the State API lists it so, later calls fail at once, its instance is ended."""
        err = outcome.value if isinstance(outcome, shell.Box) and not outcome.ok else None
        if not (isinstance(err, errors.ActorDied) and err.actor_id == actor.actor_id
                and err.cause in _DEATHS_SEEN_IN_CALLS) or actor.dead:
            return
        with self._lock:
            died = self._decide_death(actor, err)
        if died:
            self._act_on_death(actor, every_call=False)
            self._endings.put(self._terminate, actor)

    def _terminate(self, actor):
        # Local mode: its env_vars go with it (a process of its own would have ended); its shell
        # is taken first, as yr drops the instance when it ends it.
        shell = actor_shell.take_local_shell(actor.actor_id) if self.local_mode else None
        try:
            actor.proxy.terminate(is_sync=True)
        except Exception:  # already gone
            pass
        if shell is not None:
            shell.ended_by_kill()

    def _decide_death(self, actor, death):
        """(Under the lock.) ``actor`` dies of ``death``: True if it was alive. Its name is
        free at once, unless ``death.keeps_name`` (then when its handles are gone, or it is
        killed); :meth:`_act_on_death` does the rest, outside the lock."""
        if actor.dead:
            return False
        actor.death = death  # before dead: readers without the lock see a death with it
        actor.dead = True
        actor.times[2] = actor.times[3] = time.time()
        if actor.detached or not death.keeps_name:  # (else kept while handles remain, as Ray)
            self._free_name_locked(actor)
        return True

    def _free_name_locked(self, actor):
        info = actor.info
        if info.name and self._names.get((info.namespace, info.name)) == actor.actor_id:
            del self._names[(info.namespace, info.name)]

    def _act_on_death(self, actor, every_call):
        """The actor died: its constructor arguments' holds and its resources go back, its
        calls in flight fail now (``every_call``: also those nobody asked about yet), as in
        Ray, and its streams end."""
        with self._lock:
            packed, actor.arg_holds = actor.arg_holds, None
        self.objects.release_now(packed)
        if self._local is not None:  # its resources go back (or its waiting request ends)
            self._local.release(actor.actor_id)
        self.objects.fail_calls(actor.actor_id, actor.death, every=every_call)
        self.streams.end_of(actor.actor_id)
        self._end_owned(actor)

    def _end_owned(self, owner):
        """Dead ``owner``'s non-detached actors (those created in its calls) die with it
        (``OWNER_DIED``), their instances ended without their ``__ray_shutdown__``, as Ray ends
        the actors a dead worker owned, whoever else holds handles to them."""
        with self._lock:
            owned = [a for a in self._actors.values()
                     if a.owner == owner.actor_id and not a.detached and not a.dead]
            if not owned:
                return
            cause = owner.death.cause if owner.death is not None else None
            by_runtime = cause in (errors.ActorDeath.KILLED, errors.ActorDeath.OUT_OF_SCOPE)
            how = errors.OwnerExit(owner.actor_id.hex(), "127.0.0.1",
                                   by_runtime or cause is errors.ActorDeath.EXITED, by_runtime)
            died = [a for a in owned if self._decide_death(a, errors.ActorDied(
                a.actor_id, errors.ActorDeath.OWNER_DIED, a.info.class_name, owner=how))]
        for actor in died:
            self._act_on_death(actor, every_call=True)
            self._endings.put(self._terminate, actor)

    def kill(self, actor_id, no_restart):
        """``ray.kill``: the actor dies (KILLED) and its instance is terminated."""
        with self._lock:
            actor = self._actors.get(actor_id)
            if actor is not None and actor.dead:
                self._free_name_locked(actor)  # (a dead actor's name kept for its handles)
            if actor is None or not self._decide_death(actor, errors.ActorDied(
                    actor_id, errors.ActorDeath.KILLED, actor.info.class_name,
                    detail=None if no_restart else errors.KILLED_PROCESS)):
                return
        self._act_on_death(actor, every_call=True)
        self._terminate(actor)

    # -- handles and scope -----------------------------------------------------------------
    def add_handle(self, actor_id):
        self.add_handles((actor_id,))

    def add_handles(self, actor_ids):
        """A value being packed holds these handles."""
        with self._lock:
            for actor_id in actor_ids:
                actor = self._actors.get(actor_id)
                if actor is not None:
                    actor.handles += 1

    def drop_handles(self, actor_ids):
        """(Release thread.) Handles gone: an actor nobody can call any more ends after the
        calls it already has."""
        ending = []
        with self._lock:
            for actor_id in actor_ids:
                actor = self._actors.get(actor_id)
                if actor is None:
                    continue
                actor.handles -= 1
                if actor.handles <= 0 and not actor.escaped and not actor.detached:
                    if actor.dead:
                        self._free_name_locked(actor)  # (a dead actor's name kept for them)
                    else:
                        ending.append(actor)
        for actor in ending:
            self._end_after_calls(actor)

    def drop_handle(self, actor_id):
        self.drop_handles((actor_id,))

    def _end_after_calls(self, actor):
        """An actor nobody can call any more ends after the calls it already has, as in Ray:
        once the last of them is done (a callback counts them: no thread waits), its ending is
        queued to the endings thread."""
        pending = self.objects.call_futures(actor.actor_id)
        if not pending:
            self._endings.put(self._end_out_of_scope, actor)
            return
        count_lock, left = threading.Lock(), [len(pending)]

        def one_done(_future):
            with count_lock:
                left[0] -= 1
                last = left[0] == 0
            if last:
                self._endings.put(self._end_out_of_scope, actor)

        for future in pending:
            future.add_done_callback(one_done)

    def _end_out_of_scope(self, actor):
        """(Endings thread.) End an actor whose calls are over, unless a handle came back."""
        with self._lock:
            if actor.handles > 0 or self._closed or not self._decide_death(actor, errors.ActorDied(
                    actor.actor_id, errors.ActorDeath.OUT_OF_SCOPE, actor.info.class_name)):
                return
        self._act_on_death(actor, every_call=False)
        self._shut_down_then_terminate(actor)

    def _shut_down_then_terminate(self, actor):
        """An actor that went out of scope ends gracefully, as in Ray: its instance runs its
        ``__ray_shutdown__`` first (a call of its shell), then the endings thread terminates
        it. No thread waits for the hook: its call's completion queues the ending."""
        try:
            ref = actor.proxy.shut_down.invoke()
        except Exception:  # noqa: BLE001 - already gone: nothing to run it in
            self._terminate(actor)
            return
        completion_of(ref).add(lambda value, exc: self._endings.put(self._terminate, actor))

    def handle_escaped(self, actor_id):
        """A handle the table cannot see (unpacked in another process): kept for the session."""
        with self._lock:
            actor = self._actors.get(actor_id)
            if actor is not None:
                actor.escaped = True

    # -- names -----------------------------------------------------------------------------
    def get_named(self, name, namespace):
        """The ActorInfo of the live actor ``name`` (on a cluster, also another driver's);
        ActorNotFound."""
        ns = namespace if namespace is not None else self.namespace
        with self._lock:
            actor_id = self._names.get((ns, name))
            if actor_id is not None:
                return self._actors[actor_id].info
        if self.local_mode:
            raise errors.ActorNotFound(name, ns)
        try:  # cluster mode: an actor another driver created
            proxy = self.yr.get_instance(name, ns)
        except Exception:
            raise errors.ActorNotFound(name, ns) from None
        actor_id = self._ids.actor()
        # Created by another driver: its methods are unknown here, so any name may be called.
        info = ActorInfo(actor_id, name, ns, "", {"class_name": name, "module": "", "methods": None})
        with self._lock:
            self._actors[actor_id] = _Actor(actor_id, proxy, info, detached=True)
        return info

    def list_named(self, all_namespaces):
        """``[{"name", "namespace"}]`` of the live named actors (the job's namespace only
        unless ``all_namespaces``)."""
        with self._lock:
            found = {(ns, name) for (ns, name), aid in self._names.items() if not self._actors[aid].dead}
        if not self.local_mode:
            try:
                for entry in self.yr.list_named_instances(all_namespaces=all_namespaces) or []:
                    if isinstance(entry, dict):
                        found.add((entry.get("namespace", ""), entry.get("name", "")))
                    else:
                        found.add((self.namespace, str(entry)))
            except Exception:
                pass
        return [{"name": name, "namespace": ns} for ns, name in sorted(found)
                if all_namespaces or ns == self.namespace]

    def exit_current(self):
        """``ray.actor.exit_actor()`` in the running call: the actor dies (EXITED); raises
        SystemExit to unwind the method (RuntimeError outside an actor)."""
        actor_id = shell.current_call.get()[2]
        current = shell.current_shell.get()
        if actor_id is None or current is None:
            raise RuntimeError("exit_actor() can only be called inside an actor")
        current.exited = True  # later calls fail in the shell, in submission order
        with self._lock:
            actor = self._actors.get(actor_id)
            died = actor is not None and self._decide_death(actor, errors.ActorDied(
                actor_id, errors.ActorDeath.EXITED, actor.info.class_name,
                detail=errors.EXITED_BY_EXIT_ACTOR))
        if died:
            self._act_on_death(actor, every_call=False)
            self._endings.put(self._terminate, actor)  # not in this call: it waits for the call
        raise SystemExit(0)  # unwinds the method; the shell answers the call with None

    # -- state -----------------------------------------------------------------------------
    def records(self):
        """The actors of this table (their records, read-only)."""
        with self._lock:
            return list(self._actors.values())

    def close(self):
        """Shutdown: the table is emptied; returns the live actors, to be ended by the caller
        (:meth:`terminate_all`)."""
        with self._lock:
            self._closed = True
            live = [a for a in self._actors.values() if not a.dead]
            self._actors.clear()
            self._names.clear()
        return live

    def terminate_all(self, actors):
        for actor in actors:
            self._terminate(actor)
