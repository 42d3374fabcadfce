"""The yuanrong backend's actors: one ActorShell instance per actor, names, handle scope.

Mixed into :class:`~ray_adapter.core.yuanrong.backend.YuanrongBackend`; its state
(``_actors``, ``_names``) is guarded by the backend's lock. Names are tracked here as well,
since yr's local mode cannot look names up; a name is reserved before the instance is created,
so concurrent creators of one name get one actor.
"""
import concurrent.futures
import threading

from ray_adapter.core import errors
from ray_adapter.core.interface import ActorInfo
from ray_adapter.core.yuanrong import actor_shell, shell
from ray_adapter.core.yuanrong.holders import contents

DEFAULT_ASYNC_CONCURRENCY = 1000


class _Actor:
    """An actor of this driver. Created in two steps: its record (reserving its name) under the
    backend's lock, then its yr instance outside it (``created`` is set once ``proxy`` is)."""

    __slots__ = ("actor_id", "proxy", "info", "handles", "escaped", "dead", "death", "detached",
                 "resources", "call", "created", "options", "unfinished", "arg_holds")

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

    def set_proxy(self, proxy):
        self.proxy = proxy
        self.call = proxy.call  # the shell's one method, resolved once (yr builds it per access)
        self.created.set()


class ActorsMixin:
    """Actor creation, calls, kill, scope and names over yr instances."""

    def _shell(self):
        if self._shell_creator is None:
            self._shell_creator = self.yr.instance(actor_shell.ActorShell)
        return self._shell_creator

    def create_actor(self, cls, class_key, args, kwargs, options):
        self._check_started()
        namespace = options.namespace if options.namespace is not None else self.namespace
        actor_id = self._ids.actor()
        info = ActorInfo(actor_id, options.name, namespace, options.class_name, options.handle_meta)
        actor = _Actor(actor_id, None, info, options.detached, options.resources, options)
        with self._lock:  # check and reserve the name at once: concurrent creators race here
            if options.name:
                existing = self._names.get((namespace, options.name))
                if existing is not None and not self._actors[existing].dead:
                    if options.get_if_exists:
                        return self._actors[existing].info
                    raise errors.ActorNameTaken(options.name, namespace)
                self._names[(namespace, options.name)] = actor_id
            self._actors[actor_id] = actor
        try:
            packed, dep_indexes, deps = self._pack_args(args, kwargs)
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
            opts = self.invoke_options(
                options.resources, name=None if self.local_mode else options.name,
                namespace=None if self.local_mode else namespace, restarts=options.max_restarts,
                retries=options.max_task_retries, concurrency=concurrency, detached=options.detached,
                runtime_env=options.runtime_env, placement=placement)
            actor.arg_holds = packed
            proxy = self._shell().options(opts).invoke(cls, meta, packed, *deps)
        except BaseException:
            self._release_now(actor.arg_holds)
            actor.arg_holds = None
            with self._lock:
                self._actors.pop(actor_id, None)
                if options.name and self._names.get((namespace, options.name)) == actor_id:
                    del self._names[(namespace, options.name)]
            actor.dead = True
            actor.created.set()
            raise
        actor.set_proxy(proxy)
        return info

    def _actor(self, actor_id):
        actor = self._actors.get(actor_id)
        if actor is None:
            raise errors.ActorDied(actor_id, errors.ActorDeath.UNKNOWN)
        return actor

    def submit_actor_task(self, actor_id, method_name, args, kwargs, options):
        self._check_started()
        with self._lock:
            actor = self._actor(actor_id)
        task_id = self._ids.task(actor_id)
        if actor.call is None:
            actor.created.wait()  # created by another thread a moment ago (get_if_exists)
        if actor.dead or actor.call is None:
            return self._failed_returns(task_id, options.num_returns, actor.death or errors.ActorDied(
                actor_id, errors.ActorDeath.UNKNOWN, actor.info.class_name))
        limit = actor.options.max_pending_calls if actor.options is not None else -1
        if limit > 0 and actor.unfinished >= limit:
            raise errors.PendingCallsLimit(actor_id, actor.info.class_name, method_name, limit)
        packed, dep_indexes, deps = self._pack_args(args, kwargs)
        streaming = options.generator == "streaming"
        retries = options.max_task_retries
        if retries is None:
            retries = actor.options.max_task_retries if actor.options is not None else 0
        retry_on = options.retry_exceptions
        meta = (method_name, task_id, options.name, options.num_returns or 1, dep_indexes, streaming,
                options.concurrency_group or "", retry_on, retries if retry_on else 0, retries)
        def invoke():
            ref = actor.call.invoke(meta, packed, *deps)
            self.release_after(ref, packed)  # what the arguments hold, once the call ended
            return ref

        try:
            if streaming:
                limit = options.generator_backpressure
                return_ids = self._stream_returns(invoke, task_id, limit, actor_id, options.name)
            else:
                return_ids = self._returns(invoke(), task_id, options.num_returns, actor_id, options.name)
        except Exception as exc:  # e.g. "this instance is terminated"
            self._release_now(packed)
            return self._failed_returns(task_id, options.num_returns,
                                        actor.death or self._from_yr_error(exc, actor_id))
        if actor.options is not None and actor.options.max_pending_calls > 0 and return_ids:
            self._count_unfinished(actor, return_ids[0])
        return return_ids

    def _count_unfinished(self, actor, object_id):
        with self._lock:
            actor.unfinished += 1
            future = self._future(self._objects[object_id])

        def done(_f):
            with self._lock:
                actor.unfinished -= 1

        future.add_done_callback(done)

    def _release_now(self, packed):
        held = contents(packed)
        if held is not None:
            self._releases.put(self.release_contained, held)

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

    def _mark_dead(self, actor, death):
        actor.dead = True
        packed, actor.arg_holds = actor.arg_holds, None
        self._release_now(packed)
        actor.death = death
        if self._local is not None:  # its resources go back (or its waiting request ends)
            self._local.release(actor.actor_id)
        info = actor.info
        if info.name and self._names.get((info.namespace, info.name)) == actor.actor_id:
            del self._names[(info.namespace, info.name)]
        for obj in list(self._objects.values()):  # calls in flight fail now, as in Ray
            if obj.actor_id == actor.actor_id and obj.future is not None and not obj.future.done():
                try:
                    obj.future.set_exception(death)
                except concurrent.futures.InvalidStateError:
                    pass
        self._end_streams_of(actor.actor_id)

    def kill_actor(self, actor_id, no_restart):
        with self._lock:
            actor = self._actors.get(actor_id)
            if actor is None or actor.dead:
                return
            for obj in self._objects.values():
                if obj.actor_id == actor_id:
                    self._future(obj)
            self._mark_dead(actor, errors.ActorDied(actor_id, errors.ActorDeath.KILLED,
                                                    actor.info.class_name))
        self._terminate(actor)

    def add_actor_handle(self, actor_id):
        with self._lock:
            actor = self._actors.get(actor_id)
            if actor is not None:
                actor.handles += 1

    def remove_actor_handle(self, actor_id):
        self._releases.put(self._drop_actor_handle, actor_id)  # from a finalizer: deferred

    def _drop_actor_handle(self, actor_id):
        # Ending the actor waits for its calls in flight: not here, under the lock.
        actor = self._actors.get(actor_id)
        if actor is None:
            return
        actor.handles -= 1
        if actor.handles <= 0 and not actor.escaped and not actor.detached and not actor.dead:
            self._end_after_calls(actor)

    def _end_after_calls(self, actor):
        """(Under the lock.) An actor nobody can call any more ends after the calls it already
        has, as in Ray: once the last of them is done (a callback counts them: no thread
        waits), its ending is queued to the endings thread."""
        pending = [self._future(o) for o in list(self._objects.values())
                   if o.actor_id == actor.actor_id and o.ref is not None]
        pending = [f for f in pending if not f.done()]
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
            if actor.dead or actor.handles > 0 or not self._started:
                return
            self._mark_dead(actor, errors.ActorDied(actor.actor_id, errors.ActorDeath.OUT_OF_SCOPE,
                                                    actor.info.class_name))
        self._terminate(actor)

    def actor_handle_escaped(self, actor_id):
        with self._lock:
            actor = self._actors.get(actor_id)
            if actor is not None:
                actor.escaped = True

    def get_named_actor(self, name, namespace):
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

    def list_named_actors(self, all_namespaces):
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

    def exit_current_actor(self):
        actor_id = shell.current_call.get()[2]
        current = shell.current_shell.get()
        if actor_id is None or current is None:
            raise RuntimeError("exit_actor() can only be called inside an actor")
        current.exited = True  # later calls fail in the shell, in submission order
        with self._lock:
            actor = self._actors.get(actor_id)
            if actor is not None:
                self._mark_dead(actor, errors.ActorDied(actor_id, errors.ActorDeath.EXITED,
                                                        actor.info.class_name))
        if actor is not None:
            threading.Thread(target=self._terminate, args=(actor,), daemon=True).start()
        raise SystemExit(0)  # unwinds the method; the shell answers the call with None
