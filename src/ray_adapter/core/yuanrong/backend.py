"""The yuanrong backend: the runtime-core interface driven by openYuanrong's SDK (``yr``).

Used for Yuanrong clusters (``ray.init(address=...)``, ``RAY_ADDRESS``, ``YR_SERVER_ADDRESS``)
and, with ``RAY_ADAPTER_RUNTIME=yr-local``, on yr's local mode. Where yr differs from Ray the
differences are absorbed here (see ``shared/reference/yr_mapping.md``):

- results travel in :class:`~.shell.Box` so ``None`` results, cancellations and failures are
  told apart (yr's ``get`` returns ``None`` for "not ready" and "cancelled");
- float timeouts are kept: waits use the futures of yr's ObjectRefs, never yr's whole-second
  ``get`` timeouts;
- ``num_returns > 1`` is one yr return split by the adapter (yr's ``return_nums`` races);
- async methods run on an event loop inside the actor shell;
- a failed constructor fails each call with ActorDied instead of the creation call;
- named actors are tracked here as well, since local mode cannot look names up;
- ``put(None)`` / ``put(b"")`` work (values are boxed).

Units: ``num_cpus`` -> ``cpu`` millicores, ``memory`` bytes -> MB, GPU/NPU -> ``GPU/.+/count``.
"""
import concurrent.futures
import math
import os
import socket
import threading
import time
import uuid

from ray_adapter.core import errors, ids, serialization
from ray_adapter.core.execution import wait_seconds
from ray_adapter.core.interface import ActorInfo, ArgRef, CallContext, RuntimeCore
from ray_adapter.core.releases import DeferredReleases
from ray_adapter.core.yuanrong import shell

#: yr resource names for Ray's accelerator resources.
ACCELERATOR_RESOURCES = {"GPU": "GPU/.+/count", "NPU": "NPU/.+/count"}
#: yr's ``retry_times``/``recover_retry_times`` have no "forever"; Ray's -1 maps to this.
FOREVER = 2 ** 31 - 1
DEFAULT_ASYNC_CONCURRENCY = 1000


def load_yr():
    """Import the openYuanrong SDK, with a clear error when the extra is not installed."""
    try:
        import yr
    except ImportError as exc:
        raise ImportError(
            "the yuanrong backend needs the openYuanrong SDK: pip install 'ray-adapter[yuanrong]' "
            f"(package openyuanrong-sdk) [{exc}]") from exc
    return yr


class _Obj:
    """An object id's yr ObjectRef (``index``: element of a multi-return) and its future."""

    __slots__ = ("ref", "index", "future", "refs", "actor_id")

    def __init__(self, ref, index=None, actor_id=None):
        self.ref = ref
        self.index = index
        self.future = None
        self.refs = 1
        self.actor_id = actor_id


class _Actor:
    """An actor of this driver. Created in two steps: its record (reserving its name) under the
    backend's lock, then its yr instance outside it (``created`` is set once ``proxy`` is)."""

    __slots__ = ("actor_id", "proxy", "info", "handles", "escaped", "dead", "death", "detached",
                 "resources", "call", "created")

    def __init__(self, actor_id, proxy, info, detached, resources=None):
        self.resources = dict(resources or {})
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

    def set_proxy(self, proxy):
        self.proxy = proxy
        self.call = proxy.call  # the shell's one method, resolved once (yr builds it per access)
        self.created.set()


class YuanrongBackend(RuntimeCore):
    """Runtime core over ``yr``; ``yr_module`` may be a recording stand-in in tests."""

    backend_name = "yuanrong"

    def __init__(self, yr_module=None, local_mode=None):
        self.yr = yr_module
        self.local_mode = local_mode
        self._lock = threading.RLock()
        self._objects = {}
        self._actors = {}
        self._names = {}
        # (namespace, name) -> Future of the ActorInfo of a named actor being created: a
        # concurrent create with the same name waits on it (get_if_exists) or fails, so two
        # racing ``get_if_exists`` creations yield one actor. The creator always resolves it.
        self._runner = None
        self._runners = {}  # (resources, retries) -> the runner with those InvokeOptions
        self._blobs = {}
        self._shell_creator = None
        self._started = False
        self._held = {}  # local mode: resources held by live actors and running tasks

    # ================================================================== lifecycle
    def start(self, options):
        yr = self.yr = self.yr or load_yr()
        if self.local_mode is None:
            self.local_mode = os.environ.get("RAY_ADAPTER_RUNTIME", "").lower() == "yr-local"
        self.job_id = ids.job_id(1)
        self._ids = ids.IdFactory(self.job_id)
        self.node_id = ids.random_id(ids.NODE_ID_SIZE)
        self.worker_id = ids.random_id(ids.WORKER_ID_SIZE)
        self.namespace = options.namespace or str(uuid.uuid4())
        self.options = options
        self.num_cpus = float(options.num_cpus if options.num_cpus is not None else (os.cpu_count() or 1))
        self.custom_resources = dict(options.resources or {})
        self.runtime_env = dict(options.runtime_env or {})
        self._owns_yr = not yr.is_initialized()
        if self._owns_yr:
            with _stdout_to_stderr():  # yr's native init prints notices on stdout
                yr.init(self._config(options))
        self._releases = DeferredReleases(self._lock)
        self._started = True
        address = "yr-local" if self.local_mode else self._server_address(options)
        return {"address": address, "node_id": self.node_id.hex(), "node_ip_address": "127.0.0.1"}

    @staticmethod
    def _server_address(options):
        address = options.address or os.environ.get("YR_SERVER_ADDRESS", "")
        for scheme in ("yr://", "http://", "https://"):
            if address.startswith(scheme):
                address = address[len(scheme):]
        return address

    def _config(self, options):
        """The ``yr.Config`` for ``ray.init`` options (cluster settings from the environment)."""
        yr = self.yr
        kwargs = {"ns": self.namespace, "log_to_driver": options.log_to_driver}
        if options.num_cpus is not None:
            kwargs["num_cpus"] = int(options.num_cpus)
        if options.runtime_env:
            kwargs["runtime_env"] = dict(options.runtime_env)
        if self.local_mode:
            kwargs["local_mode"] = True
            return yr.Config(**kwargs)
        kwargs["server_address"] = self._server_address(options)
        if os.environ.get("YR_DS_ADDRESS"):
            kwargs["ds_address"] = os.environ["YR_DS_ADDRESS"]
        if os.environ.get("YR_IN_CLUSTER"):
            kwargs["in_cluster"] = os.environ["YR_IN_CLUSTER"].lower() in ("1", "true", "yes")
        if os.environ.get("YR_JWT_TOKEN"):
            kwargs["auth_token"] = os.environ["YR_JWT_TOKEN"]
        if os.environ.get("YR_CERT_FILE"):
            kwargs["enable_tls"] = True
            kwargs["certificate_file_path"] = os.environ["YR_CERT_FILE"]
        return yr.Config(**kwargs)

    def shutdown(self):
        with self._lock:
            if not self._started:
                return
            self._started = False
            actors = [a for a in self._actors.values() if not a.dead]
            gone = errors.NotInitialized("ray.shutdown() was called while this call was waiting")
            for obj in self._objects.values():  # wake every get/wait still blocked
                if obj.future is not None and not obj.future.done():
                    try:
                        obj.future.set_exception(gone)
                    except concurrent.futures.InvalidStateError:
                        pass
            self._objects.clear()
            self._actors.clear()
            self._names.clear()
        self._releases.close()
        for actor in actors:
            self._terminate(actor)
        if self._owns_yr:
            self.yr.finalize()

    # ================================================================== objects
    def _new_id(self, ref, index=None, actor_id=None, object_id=None):
        oid = object_id or self._ids.put()
        with self._lock:
            self._objects[oid] = _Obj(ref, index, actor_id)
        return oid

    def put(self, value):
        self._check_started()
        # Serialized by the adapter: the store keeps a copy and readers get read-only arrays.
        return self._new_id(self.yr.put(shell.Box(True, shell.pack(value))))

    def _obj(self, object_id):
        obj = self._objects.get(object_id)
        if obj is None:
            raise errors.ObjectFreed(object_id)
        return obj

    def _future(self, obj):
        """A Future resolving to the object's Box (our own, so cancel/kill can fail it)."""
        if obj.future is None:
            obj.future = concurrent.futures.Future()
            obj.ref.get_future().add_done_callback(lambda f, ours=obj.future: _settle(ours, f))
        return obj.future

    def _value(self, obj):
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
        return shell.unpack(box.value if obj.index is None else box.value[obj.index])

    def get(self, object_ids, timeout):
        timeout = wait_seconds(timeout)
        with self._lock:
            objs = [self._obj(oid) for oid in object_ids]
        futures = [self._future(o) for o in objs]
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
        else:
            _, pending = concurrent.futures.wait(futures, timeout=timeout)
            if pending:
                raise errors.GetTimeout(timeout)
        return [self._value(o) for o in objs]

    def wait(self, object_ids, num_returns, timeout):
        with self._lock:
            futures = {}
            for oid in object_ids:
                obj = self._objects.get(oid)
                futures[oid] = self._future(obj) if obj is not None else None
        # concurrent.futures.wait installs its waiter on each future and removes it when it
        # returns, so polling wait(timeout=0) leaves nothing behind on long-pending futures.
        pending = {f for f in futures.values() if f is not None and not f.done()}
        done_count = len(futures) - len(pending)
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
        ready, not_ready = [], []
        for oid, f in futures.items():
            if (f is None or f.done()) and len(ready) < num_returns:
                ready.append(oid)
            else:
                not_ready.append(oid)
        return ready, not_ready

    def object_future(self, object_id):
        with self._lock:
            obj = self._obj(object_id)
        source = self._future(obj)
        future = concurrent.futures.Future()

        def settle(_done):
            try:
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
        self._releases.put(self._drop_object_ref, object_id)  # from __del__: deferred

    def _drop_object_ref(self, object_id):
        obj = self._objects.get(object_id)
        if obj is not None:
            obj.refs -= 1
            if obj.refs <= 0:
                self._objects.pop(object_id, None)

    def object_escaped(self, object_id):
        with self._lock:
            obj = self._objects.get(object_id)
            if obj is not None:
                obj.refs += 1  # another holder we cannot see: keep it for the session

    # ================================================================== tasks
    def _pack_args(self, args, kwargs):
        """``(packed_args, dep_indexes, deps)``: the arguments serialized by the adapter with
        their top-level refs left as placeholders, and those refs' yr ObjectRefs, which yr
        waits for and resolves before the call runs (as Ray resolves top-level refs)."""
        refs = [a for a in args if type(a) is ArgRef] + [v for v in kwargs.values() if type(v) is ArgRef]
        deps, dep_indexes = [], []
        with self._lock:
            for r in refs:
                obj = self._obj(r.object_id)
                deps.append(obj.ref)
                dep_indexes.append(obj.index)
        return shell.pack_args(args, kwargs), dep_indexes, deps

    def invoke_options(self, resources, *, name=None, namespace=None, retries=0, restarts=0,
                       concurrency=None, get_if_exists=False, detached=False, runtime_env=None):
        """The ``yr.InvokeOptions`` for Ray resources/options (units converted)."""
        kwargs = {"cpu": int(round(float(resources.get("CPU", 0)) * 1000))}
        if resources.get("memory"):
            kwargs["memory"] = max(1, math.ceil(resources["memory"] / (1024 * 1024)))
        custom = {}
        for key, amount in resources.items():
            if key in ("CPU", "memory") or not amount:
                continue
            custom[ACCELERATOR_RESOURCES.get(key, key)] = float(amount)
        if custom:
            kwargs["custom_resources"] = custom
        if retries:
            kwargs["retry_times"] = FOREVER if retries < 0 else int(retries)
        if restarts:
            kwargs["recover_retry_times"] = FOREVER if restarts < 0 else int(restarts)
        if concurrency:
            kwargs["concurrency"] = int(concurrency)
        if name:
            kwargs["name"] = name
        if namespace:
            kwargs["namespace"] = namespace
        if get_if_exists:
            kwargs["get_if_exists"] = True
        if detached:
            kwargs["custom_extensions"] = {"lifecycle": "detached"}
        env = dict((runtime_env or {}).get("env_vars") or {})
        if env:
            kwargs["env_vars"] = env
        return self.yr.InvokeOptions(**kwargs)

    def submit_task(self, function, function_key, args, kwargs, options):
        self._check_started()
        if self._runner is None:
            self._runner = self.yr.invoke(shell.run_keyed)
        blob = self._blobs.get(function_key)
        if blob is None:
            # Local mode runs tasks in this process: the registry is shared, nothing to ship.
            shell.FUNCTIONS[function_key] = function
            blob = self._blobs[function_key] = b"" if self.local_mode else serialization.dumps_plain(function)
        packed, dep_indexes, deps = self._pack_args(args, kwargs)
        task_id = self._ids.task()
        env = dict((options.runtime_env or {}).get("env_vars") or {})
        retry_on = options.retry_exceptions
        meta = (task_id, options.name, options.num_returns or 1, env, dict(options.resources),
                retry_on, options.max_retries if retry_on else 0, dep_indexes)
        shape = (tuple(sorted(options.resources.items())), options.max_retries)
        runner = self._runners.get(shape)
        if runner is None:  # InvokeOptions and yr's options() are built once per shape
            opts = self.invoke_options(options.resources, retries=options.max_retries)
            runner = self._runners[shape] = self._runner.options(opts)
        ref = runner.invoke(function_key, blob, meta, packed, *deps)
        return_ids = self._returns(ref, task_id, options.num_returns)
        if self.local_mode and options.resources:
            self._hold(options.resources)
            ref.get_future().add_done_callback(lambda _f, r=dict(options.resources): self._release(r))
        return return_ids

    def _hold(self, resources, sign=1):
        """Local mode keeps Ray's accounting of what live actors and running tasks hold, so
        ``available_resources()`` answers as Ray's does (nothing is enforced: no scheduler)."""
        with self._lock:
            for k, v in resources.items():
                self._held[k] = self._held.get(k, 0.0) + sign * float(v)

    def _release(self, resources):
        self._hold(resources, -1)

    def _returns(self, ref, task_id, num_returns, actor_id=None):
        count = num_returns or 1
        return_ids = ids.IdFactory.returns(task_id, count)
        if count == 1:
            self._new_id(ref, None, actor_id, return_ids[0])
        else:
            for i, oid in enumerate(return_ids):
                self._new_id(ref, i, actor_id, oid)
        return return_ids if num_returns else []

    def cancel(self, object_id, force, recursive):
        with self._lock:
            obj = self._objects.get(object_id)
        if obj is None:
            return
        future = self._future(obj)
        if future.done():
            return
        task_id = object_id[:ids.TASK_ID_SIZE]
        if self.local_mode:
            # yr's local mode loses the worker thread of a cancelled running task and then
            # schedules later tasks onto it (they never run): never let it cancel. A task that
            # has not started yet is skipped by the runner; a running one (a thread: it cannot
            # be interrupted) finishes and its result is dropped.
            shell.cancel_local(task_id)
        else:
            try:
                self.yr.cancel(obj.ref, allow_force=bool(force), allow_recursive=bool(recursive))
            except Exception:  # yr cancels stateless tasks only; the ref still fails below
                pass
        try:
            future.set_exception(errors.TaskCancelled(task_id))
        except concurrent.futures.InvalidStateError:
            pass

    # ================================================================== actors
    def _shell(self):
        if self._shell_creator is None:
            self._shell_creator = self.yr.instance(shell.ActorShell)
        return self._shell_creator

    def create_actor(self, cls, class_key, args, kwargs, options):
        self._check_started()
        namespace = options.namespace if options.namespace is not None else self.namespace
        actor_id = self._ids.actor()
        info = ActorInfo(actor_id, options.name, namespace, options.class_name, options.handle_meta)
        actor = _Actor(actor_id, None, info, options.detached, options.resources)
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
            env = dict((options.runtime_env or {}).get("env_vars") or {})
            meta = (actor_id, options.name, options.class_name, options.is_async, env,
                    dict(options.resources), dep_indexes)
            concurrency = options.max_concurrency or (DEFAULT_ASYNC_CONCURRENCY if options.is_async else 1)
            opts = self.invoke_options(
                options.resources, name=None if self.local_mode else options.name,
                namespace=None if self.local_mode else namespace, restarts=options.max_restarts,
                retries=options.max_task_retries, concurrency=concurrency, detached=options.detached,
                runtime_env=options.runtime_env)
            proxy = self._shell().options(opts).invoke(cls, meta, packed, *deps)
        except BaseException:
            with self._lock:
                self._actors.pop(actor_id, None)
                if options.name and self._names.get((namespace, options.name)) == actor_id:
                    del self._names[(namespace, options.name)]
            actor.dead = True
            actor.created.set()
            raise
        if self.local_mode:
            self._hold(options.resources)
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
        packed, dep_indexes, deps = self._pack_args(args, kwargs)
        meta = (method_name, task_id, options.name, options.num_returns or 1, dep_indexes)
        try:
            ref = actor.call.invoke(meta, packed, *deps)
        except Exception as exc:  # e.g. "this instance is terminated"
            return self._failed_returns(task_id, options.num_returns,
                                        actor.death or self._from_yr_error(exc, actor_id))
        return self._returns(ref, task_id, options.num_returns, actor_id)

    def _failed_returns(self, task_id, num_returns, error):
        future = concurrent.futures.Future()
        future.set_exception(error)
        return_ids = ids.IdFactory.returns(task_id, num_returns or 1)
        for oid in return_ids:
            self._new_id(None, None, None, oid)
            self._objects[oid].future = future
        return return_ids if num_returns else []

    def _terminate(self, actor):
        try:
            actor.proxy.terminate(is_sync=True)
        except Exception:  # already gone
            pass

    def _mark_dead(self, actor, death):
        actor.dead = True
        actor.death = death
        if self.local_mode:
            self._release(actor.resources)
        info = actor.info
        if info.name and self._names.get((info.namespace, info.name)) == actor.actor_id:
            del self._names[(info.namespace, info.name)]
        for obj in list(self._objects.values()):  # calls in flight fail now, as in Ray
            if obj.actor_id == actor.actor_id and obj.future is not None and not obj.future.done():
                try:
                    obj.future.set_exception(death)
                except concurrent.futures.InvalidStateError:
                    pass

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
            threading.Thread(target=self._end_out_of_scope, args=(actor,), daemon=True).start()

    def _end_out_of_scope(self, actor):
        """End an actor nobody can call any more, after the calls it already has (as Ray)."""
        with self._lock:
            if actor.dead or actor.handles > 0:
                return
            pending = [self._future(o) for o in list(self._objects.values())
                       if o.actor_id == actor.actor_id and o.ref is not None]
            pending = [f for f in pending if not f.done()]
        if pending:
            concurrent.futures.wait(pending)
        with self._lock:
            if actor.dead or actor.handles > 0:
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

    # ================================================================== cluster state
    def _yr_nodes(self):
        """``yr.resources()`` as the core's node dicts; None where yr cannot list nodes."""
        if self.local_mode:
            return None
        try:
            raw = self.yr.resources()
        except Exception:
            return None
        nodes = []
        for entry in raw or []:
            nodes.append({
                "node_id": str(entry.get("id", "")), "alive": entry.get("status", 0) in (0, "healthy", "ALIVE"),
                "address": entry.get("labels", {}).get("ip", entry.get("id", "")),
                "hostname": entry.get("labels", {}).get("hostname", ""),
                "resources_total": _from_yr_resources(entry.get("capacity", {})),
                "resources_available": _from_yr_resources(entry.get("allocatable", {})),
                "labels": dict(entry.get("labels", {})),
            })
        return nodes

    def _local_node(self):
        total = {"CPU": self.num_cpus, "memory": float(_machine_memory()),
                 "object_store_memory": float(_machine_memory() * 3 // 7),
                 "node:127.0.0.1": 1.0, "node:__internal_head__": 1.0}
        total.update({k: float(v) for k, v in self.custom_resources.items()})
        return {"node_id": self.node_id.hex(), "alive": True, "address": "127.0.0.1",
                "hostname": socket.gethostname(), "resources_total": total,
                "resources_available": dict(total), "labels": {}}

    def nodes(self):
        return self._yr_nodes() or [self._local_node()]

    def cluster_resources(self):
        out = {}
        for node in self.nodes():
            for k, v in node["resources_total"].items():
                out[k] = out.get(k, 0.0) + v
        return out

    def available_resources(self):
        out = {}
        for node in self.nodes():
            for k, v in node["resources_available"].items():
                out[k] = out.get(k, 0.0) + v
        if self.local_mode:
            with self._lock:
                for k, v in self._held.items():
                    if k in out:
                        out[k] -= v
        return {k: v for k, v in out.items() if v > 1e-9}  # nothing free: omitted, as in Ray

    def context(self):
        task_id, task_name, actor_id, actor_name, resources = shell.current_call.get()
        in_call = task_id is not None or actor_id is not None
        meta = None
        if actor_id is not None and actor_id in self._actors:
            meta = self._actors[actor_id].info.handle_meta
        return CallContext(
            job_id=self.job_id, node_id=self.node_id, worker_id=self.worker_id,
            namespace=self.namespace, is_driver=not in_call,
            task_id=task_id if in_call else None, actor_id=actor_id, task_name=task_name,
            actor_name=actor_name,
            assigned_resources={k: float(v) for k, v in resources.items()} if in_call else {},
            actor_handle_meta=meta, runtime_env=self.runtime_env, node_ip_address=self._node_ip())

    def _node_ip(self):
        if self.local_mode:
            return "127.0.0.1"
        if getattr(self, "_ip", None) is None:
            try:
                self._ip = str(self.yr.get_node_ip_address())
            except Exception:  # not reachable from this process: the local address
                self._ip = socket.gethostbyname(socket.gethostname())
        return self._ip

    # ================================================================== helpers
    def _check_started(self):
        if not self._started:
            raise errors.NotInitialized("the yuanrong runtime has been shut down")

    def _from_yr_error(self, exc, actor_id=None):
        name = type(exc).__name__
        if name in ("YRTimeoutError", "GetTimeoutError"):
            return errors.GetTimeout(str(exc))
        if name == "CancelError":
            return errors.TaskCancelled(None)
        if actor_id is not None and "terminated" in str(exc):
            return errors.ActorDied(actor_id, errors.ActorDeath.TERMINATED, detail=str(exc))
        cause = getattr(exc, "cause", None) or exc
        return errors.TaskFailed(cause, str(exc), "yr", os.getpid(), "127.0.0.1", cause_repr=repr(cause))


class _stdout_to_stderr:
    """Point file descriptor 1 at stderr for the block, so native code cannot write into the
    program's stdout (a Ray program's stdout holds only what it prints)."""

    def __enter__(self):
        import sys

        sys.stdout.flush()
        self._saved = os.dup(1)
        os.dup2(2, 1)

    def __exit__(self, *exc):
        os.dup2(self._saved, 1)
        os.close(self._saved)
        return False


def _settle(ours, theirs):
    """Copy a finished yr future into ours. Local mode resolves a ref's future to another
    future holding the value: follow the chain to the value."""
    if ours.done():
        return
    exc = theirs.exception()
    if exc is None:
        value = theirs.result()
        if isinstance(value, concurrent.futures.Future):
            value.add_done_callback(lambda inner: _settle(ours, inner))
            return
    try:
        if exc is not None:
            ours.set_exception(exc)
        else:
            ours.set_result(value)
    except concurrent.futures.InvalidStateError:  # cancelled or killed meanwhile
        pass


def _from_yr_resources(resources):
    """yr resource amounts -> Ray's: cpu millicores -> CPUs, memory MB -> bytes, GPU/x/count -> GPU."""
    out = {}
    for key, value in (resources or {}).items():
        k = str(key)
        if k.lower() == "cpu":
            out["CPU"] = out.get("CPU", 0.0) + float(value) / 1000
        elif k.lower() == "memory":
            out["memory"] = float(value) * 1024 * 1024
        elif k.startswith("GPU/") or k.startswith("NPU/"):
            kind = k.split("/", 1)[0]
            out[kind] = out.get(kind, 0.0) + float(value)
        else:
            out[k] = float(value)
    return out


def _machine_memory():
    try:
        import psutil

        return int(psutil.virtual_memory().available * 0.7)
    except Exception:
        return 8 * 1024 ** 3


def probe(address, timeout=10.0):
    """Try ``yr.init`` against ``address`` in a thread; returns (ok, message, seconds)."""
    yr = load_yr()
    result = {}

    def attempt():
        start = time.monotonic()
        try:
            yr.init(yr.Config(server_address=address))
            yr.finalize()
            result["ok"] = (True, "reachable")
        except Exception as exc:
            result["ok"] = (False, str(exc))
        result["s"] = time.monotonic() - start

    t = threading.Thread(target=attempt, daemon=True)
    t.start()
    t.join(timeout)
    if "ok" not in result:
        return False, f"no answer within {timeout:.0f} s", timeout
    return result["ok"][0], result["ok"][1], result["s"]
