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
import threading
import time
import uuid

from ray_adapter.core import errors, ids, serialization
from ray_adapter.core.execution import exit_grace_seconds
from ray_adapter.core.interface import ArgRef, RuntimeCore
from ray_adapter.core.locks import OwnedRLock
from ray_adapter.core.releases import DeferredReleases
from ray_adapter.core.embedded.resources import detect_accelerators
from ray_adapter.core.yuanrong import shell, thread_env, thread_exit
from ray_adapter.core.yuanrong.actors import ActorsMixin
from ray_adapter.core.yuanrong.cluster import ClusterMixin
from ray_adapter.core.yuanrong.envs import JobEnv, shared_environ
from ray_adapter.core.metrics import MetricsExport
from ray_adapter.core.yuanrong.exit_grace import EXIT_GRACE_S, exit_grace as _exit_grace
from ray_adapter.core.yuanrong.completions import completion_of
from ray_adapter.core.yuanrong.holders import HoldersMixin
from ray_adapter.core.yuanrong.local_resources import LocalResources
from ray_adapter.core.yuanrong.objects import ObjectsMixin, failed_future
from ray_adapter.core.yuanrong.resource_groups import ResourceGroupsMixin
from ray_adapter.core.yuanrong.streams import StreamsMixin

#: yr resource names for Ray's accelerator resources.
ACCELERATOR_RESOURCES = {"GPU": "GPU/.+/count", "NPU": "NPU/.+/count"}
#: yr's ``retry_times``/``recover_retry_times`` have no "forever"; Ray's -1 maps to this.
FOREVER = 2 ** 31 - 1


def load_yr():
    """Import the openYuanrong SDK, with a clear error when the extra is not installed."""
    try:
        import yr
    except ImportError as exc:
        raise ImportError(
            "the yuanrong backend needs the openYuanrong SDK: pip install 'ray-adapter[yuanrong]' "
            f"(package openyuanrong-sdk) [{exc}]") from exc
    return yr


def _outcome_box(future):
    """The Box of an object the adapter holds (its future: a stream item, a placement group's
    ready object), waiting for it if it is not there yet (such an argument is rare: a
    pending ``pg.ready()`` makes ``.remote()`` wait for the group)."""
    try:
        return future.result()
    except errors.CoreError as exc:
        return shell.Box(False, exc)


class YuanrongBackend(ObjectsMixin, StreamsMixin, ActorsMixin, ClusterMixin, ResourceGroupsMixin,
                      HoldersMixin, RuntimeCore):
    """Runtime core over ``yr``; ``yr_module`` may be a recording stand-in in tests.

    Lifecycle and tasks live here; objects, actors and cluster state in the mixins of
    :mod:`.objects`, :mod:`.actors` and :mod:`.cluster`. All state is guarded by ``_lock``."""

    backend_name = "yuanrong"

    def __init__(self, yr_module=None, local_mode=None):
        self.yr = yr_module
        self.local_mode = local_mode
        self._lock = OwnedRLock()  # re-entrant; finalizers ask whether their thread holds it
        self._objects = {}
        self._dropped_running = {}  # object id -> yr future of a dropped, unfinished call
        self._actors = {}
        self._names = {}
        self._streams = {}  # task id -> streams.Stream of a streaming call
        # (namespace, name) -> Future of the ActorInfo of a named actor being created: a
        # concurrent create with the same name waits on it (get_if_exists) or fails, so two
        # racing ``get_if_exists`` creations yield one actor. The creator always resolves it.
        self._runner = None
        self._runners = {}  # (resources, retries) -> the runner with those InvokeOptions
        self._blobs = {}
        self._shell_creator = None
        self._started = False
        self._local = None  # local mode: the LocalResources granting tasks' and actors' resources
        self._reports = None  # the unread-error report thread (started with a report handler)
        self._endings = None  # the thread ending actors gone out of scope (see .actors)
        self._rg_scheduler = None  # local mode: the scheduler of the one local node
        self._groups = {}  # placement group id -> resource_groups._Group
        self._group_names = {}

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
        self.num_gpus, self.num_npus = options.num_gpus, None
        if self.local_mode:  # the node's accelerators, as the embedded runtime finds them
            accelerators = detect_accelerators()
            if options.num_gpus is not None:
                accelerators["GPU"] = options.num_gpus
            self.num_gpus, self.num_npus = accelerators.get("GPU"), accelerators.get("NPU")
        self.job_env = JobEnv(options.runtime_env, self.local_mode)
        self.job_env.start()
        self._owns_yr = not yr.is_initialized()
        if self._owns_yr:
            # yr's native init prints notices on stdout (kept off the program's stdout) and, in
            # local mode, that no `yr` command is installed (true, and not needed there).
            with _native_notices(drop=_NO_YR_COMMAND if self.local_mode else None):
                yr.init(self._config(options))
        self._releases = DeferredReleases(self._lock)
        # Actors whose last handle went and whose calls are over are ended here, one after
        # another, outside the lock (ending one waits for yr to terminate its instance).
        self._endings = DeferredReleases(name="ray-adapter-actor-ends")
        # Unread errors are reported on a thread of their own: the report formats the user's
        # exception, which must not run under the backend's lock (the release thread holds it).
        self._reports = (None if options.on_unhandled_error is None else
                         DeferredReleases(name="ray-adapter-unhandled"))
        if self.local_mode:  # the adapter grants what tasks and actors declare (yr does not)
            self._local = LocalResources(self._local_scheduler())
        # What a wait on an id the backend does not hold waits on: failed at shutdown only.
        self._never = concurrent.futures.Future()
        self.metrics = MetricsExport(options.metrics_export_port)
        self._started = True
        _exit_grace.register(self)
        if self.local_mode:  # os._exit in a task or actor (a thread) says it ends the driver
            thread_exit.install()
            thread_env.install()  # each call reads its own CUDA_VISIBLE_DEVICES (in Python)
        address = self.address = "yr-local" if self.local_mode else self._server_address(options)
        return {"address": address, "node_id": self.node_id.hex(), "node_ip_address": "127.0.0.1",
                "metrics_export_port": self.metrics.port}

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
        if self.job_env.config_env():
            kwargs["runtime_env"] = self.job_env.config_env()
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

    def _at_exit(self):
        """The interpreter is exiting: calls already submitted get up to ``EXIT_GRACE_S``
        seconds to finish, so the output of a task fired just before the end reaches the
        terminal, as with Ray's driver exit (the embedded runtime gives its workers the same
        grace). Runs from :data:`_exit_grace`, before thread pools refuse new work."""
        with self._lock:
            if not self._started:
                return
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
        concurrent.futures.wait([f for f in futures if not f.done()],
                                timeout=exit_grace_seconds(EXIT_GRACE_S))

    def shutdown(self):
        with self._lock:
            if not self._started:
                return
            self._started = False
            actors = [a for a in self._actors.values() if not a.dead]
            gone = errors.NotInitialized("ray.shutdown() was called while this call was waiting")
            self._never.set_exception(gone)
            for obj in self._objects.values():  # wake every get/wait still blocked
                if obj.future is not None and not obj.future.done():
                    try:
                        obj.future.set_exception(gone)
                    except concurrent.futures.InvalidStateError:
                        pass
            self._objects.clear()
            self._actors.clear()
            self._names.clear()
            streams, self._streams = list(self._streams.values()), {}
        _exit_grace.unregister(self)
        if self.local_mode:
            thread_exit.uninstall()
            thread_env.uninstall()
        for stream in streams:  # a producer paused by backpressure stops
            stream.cancel()
        self._releases.close()
        self._endings.close()
        if self._reports is not None:
            self._reports.close()
        if self._local is not None:  # requests still waiting for resources fail
            self._local.close(gone)
        self._close_groups(gone)
        self.job_env.stop()
        shared_environ.release_all()  # what actors still held (local mode: this process's env)
        self.metrics.close()
        for actor in actors:
            self._terminate(actor)
        if self._owns_yr:
            self.yr.finalize()

    def record_metric(self, kind, name, description, tag_keys, boundaries, tags, value):
        """Recorded in the driver's endpoint: by the driver, and by tasks and actors of yr's
        local mode (threads of the driver); on a cluster, records made in remote yr workers
        stay there (matrix: ray.util.metrics)."""
        self._check_started()
        self.metrics.record(kind, name, description, tag_keys, boundaries, tags, value)

    # ================================================================== tasks
    def _pack_args(self, args, kwargs):
        """``(packed_args, dep_indexes, deps)``: the arguments serialized by the adapter with
        their top-level refs left as placeholders, and those refs' yr ObjectRefs, which yr
        waits for and resolves before the call runs (as Ray resolves top-level refs)."""
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

    def invoke_options(self, resources, *, placement=None, **options):
        """The ``yr.InvokeOptions`` for Ray resources/options (units converted) and a core
        Placement (resource group bundle, schedule affinities)."""
        kwargs = self.invoke_kwargs(resources, **options)
        kwargs.update(self.placement_kwargs(placement))
        return self.yr.InvokeOptions(**kwargs)

    def invoke_kwargs(self, resources, *, name=None, namespace=None, retries=0, restarts=0,
                      concurrency=None, get_if_exists=False, detached=False, runtime_env=None):
        """The InvokeOptions fields for Ray resources/options: ``cpu`` millicores, ``memory``
        MB, ``GPU/.+/count`` (or ``GPU/<model>/count`` with ``accelerator_type``)..."""
        kwargs = {"cpu": int(round(float(resources.get("CPU", 0)) * 1000))}
        if resources.get("memory"):
            kwargs["memory"] = max(1, math.ceil(resources["memory"] / (1024 * 1024)))
        custom = {}
        model = next((k.split(":", 1)[1] for k in resources if k.startswith("accelerator_type:")), None)
        for key, amount in resources.items():
            if key in ("CPU", "memory") or not amount or (model and key.startswith("accelerator_type:")):
                continue
            name_ = ACCELERATOR_RESOURCES.get(key, key)
            if model and key in ACCELERATOR_RESOURCES:  # accelerator_type: the card model
                name_ = f"{key}/{model}/count"
            custom[name_] = float(amount)
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
        env = self.job_env.env_vars(runtime_env)
        if env:
            kwargs["env_vars"] = env
        return kwargs

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
        env = self.job_env.env_vars(options.runtime_env)
        retry_on = options.retry_exceptions
        placement = options.scheduling
        in_group = placement is not None and placement.in_group
        streaming = options.generator == "streaming"
        meta = (task_id, options.name, options.num_returns or 1, env, dict(options.resources),
                retry_on, options.max_retries if retry_on else 0, dep_indexes, streaming,
                (placement.group_id, bool(placement.capture)) if in_group else None,
                placement if self.local_mode else None)  # local mode: granted by the adapter
        shape = (tuple(sorted(options.resources.items())), options.max_retries,
                 placement.key() if placement is not None else None)
        runner = self._runners.get(shape)
        if runner is None:  # InvokeOptions and yr's options() are built once per shape
            opts = self.invoke_options(options.resources, retries=options.max_retries,
                                       placement=placement)
            runner = self._runners[shape] = self._runner.options(opts)
        if streaming:
            def invoke():
                stream_ref = runner.invoke(function_key, blob, meta, packed, *deps)
                self.release_after(stream_ref, packed)
                return stream_ref

            return self._stream_returns(invoke, task_id, options.generator_backpressure, name=options.name)
        ref = runner.invoke(function_key, blob, meta, packed, *deps)
        self.release_after(ref, packed)  # what the arguments hold, once the task ended
        return self._returns(ref, task_id, options.num_returns, name=options.name)

    def cancel(self, object_id, force, recursive):
        with self._lock:
            obj = self._objects.get(object_id)
        if obj is None:
            return
        future = self._future(obj)
        if future.done():
            return
        task_id = object_id[:ids.TASK_ID_SIZE]
        started = True
        if obj.actor_id is not None:
            shell.request_cancel(task_id)  # the running call sees is_canceled(); never skipped
        elif self.local_mode:
            # yr's local mode loses the worker thread of a cancelled running task and then
            # schedules later tasks onto it (they never run): never let it cancel. A task that
            # has not started yet is skipped by the runner; a running one (a thread: it cannot
            # be interrupted) finishes and its result is dropped.
            started = not shell.cancel_local(task_id)
            if started and self._local.abort(task_id, errors.TaskCancelled(task_id)):
                started = False  # it was waiting for its resources: it never ran
        else:
            try:
                self.yr.cancel(obj.ref, allow_force=bool(force), allow_recursive=bool(recursive))
            except Exception:  # yr cancels stateless tasks only; the ref still fails below
                pass
        if obj.actor_id is None and started:
            # A running task is interrupted in Ray: RayTaskError(TaskCancelledError).
            error = errors.TaskFailed(errors.TaskCancelled(task_id), "TaskCancelledError",
                                      obj.name or "task", None, "127.0.0.1",
                                      cause_repr="TaskCancelledError()")
        else:
            error = errors.TaskCancelled(task_id)
        stream = self._streams.get(task_id)
        if stream is not None:
            stream.cancel()
        try:
            future.set_exception(error)
        except concurrent.futures.InvalidStateError:
            pass

    # ================================================================== cluster state


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


#: What yr's native init says in local mode, where no yr command is needed.
_NO_YR_COMMAND = "failed to detect `yr` command in PATH"


class _native_notices:
    """Catch what native code writes on file descriptors 1 and 2 during the block and pass it
    on to stderr afterwards, less the lines containing ``drop``: native code cannot write into
    the program's stdout (a Ray program's stdout holds only what it prints)."""

    def __init__(self, drop=None):
        self._drop = drop

    def __enter__(self):
        import sys
        import tempfile

        sys.stdout.flush()
        sys.stderr.flush()
        self._file = tempfile.TemporaryFile()
        self._saved = os.dup(1), os.dup(2)
        os.dup2(self._file.fileno(), 1)
        os.dup2(self._file.fileno(), 2)

    def __exit__(self, *exc):
        for fd, saved in zip((1, 2), self._saved):
            os.dup2(saved, fd)
            os.close(saved)
        self._file.seek(0)
        text = self._file.read().decode(errors="replace")
        self._file.close()
        kept = "".join(line for line in text.splitlines(keepends=True)
                       if self._drop is None or self._drop not in line)
        if kept:
            os.write(2, kept.encode())
        return False


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
