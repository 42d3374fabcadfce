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

Units: see :mod:`.invoke_options`.

The backend is the façade that starts and wires the components, one concern and one lock each
(collaborators passed by name, imports downward only; see ``docs/architecture.md``):

- :class:`~.objects.ObjectTable`: object ids, futures, get / wait / put, counts, drops, the
  refs held inside values, unread-error reports;
- :class:`~.streams.StreamTable`: streaming calls' items;
- :class:`~.resource_groups.ResourceGroups`: placement groups;
- :class:`~.invoke_options.InvokeOptionsMap`: Ray options as yr's InvokeOptions;
- :class:`~.tasks.TaskCalls` and :class:`~.actors.ActorTable`: tasks, actors and their calls;
- :class:`~.cluster.ClusterView`: nodes, resources, the call context, State API records;
- in local mode, :class:`~.local_resources.LocalResources` over one embedded Scheduler (shared
  with the placement groups): the resources tasks and actors declare, granted as Ray does.

Threads: the caller's; yr's callback threads (completions); the release thread
(``_releases``: drops from finalizers, in order, no component lock held); the endings thread
(actors ended after their last call); the unread-error report thread.
"""
import concurrent.futures
import os
import threading
import time
import uuid

from ray_adapter.core import errors, ids
from ray_adapter.core.execution import exit_grace_seconds
from ray_adapter.core.interface import RuntimeCore
from ray_adapter.core.releases import DeferredReleases
from ray_adapter.core.embedded.resources import check_declared_gpus, detect_accelerators
from ray_adapter.core.yuanrong import local_mode_repairs, shell, thread_env, thread_exit
from ray_adapter.core.yuanrong.actors import ActorTable
from ray_adapter.core.yuanrong.cluster import ClusterView, local_node
from ray_adapter.core.yuanrong.envs import JobEnv, shared_environ
from ray_adapter.core.metrics import MetricsExport
from ray_adapter.core.yuanrong.exit_grace import EXIT_GRACE_S, exit_grace as _exit_grace
from ray_adapter.core.yuanrong.invoke_options import InvokeOptionsMap
from ray_adapter.core.yuanrong.local_resources import LocalResources
from ray_adapter.core.yuanrong.objects import ObjectTable
from ray_adapter.core.yuanrong.resource_groups import ResourceGroups
from ray_adapter.core.yuanrong.streams import StreamTable
from ray_adapter.core.yuanrong.tasks import TaskCalls


def load_yr():
    """Import the openYuanrong SDK, with a clear error when the extra is not installed."""
    try:
        import yr
    except ImportError as exc:
        raise ImportError(
            "the yuanrong backend needs the openYuanrong SDK: pip install 'ray-adapter[yuanrong]' "
            f"(package openyuanrong-sdk) [{exc}]") from exc
    return yr


def _local_scheduler(node):
    """Local mode: the embedded scheduler over the one local node (grants and bundles)."""
    from ray_adapter.core.embedded.resources import Node, visible_device_ids
    from ray_adapter.core.embedded.scheduler import Scheduler

    return Scheduler([Node(bytes.fromhex(node["node_id"]), node["address"], node["resources_total"],
                           device_ids=visible_device_ids())])


class YuanrongBackend(RuntimeCore):
    """Runtime core over ``yr``; ``yr_module`` may be a recording stand-in in tests.

    Lifecycle here; everything else in the components :meth:`start` builds (see the module's
    docstring). ``_started`` is written by the caller of start / shutdown (the proxy's
    session, which serializes them)."""

    backend_name = "yuanrong"

    def __init__(self, yr_module=None, local_mode=None):
        self.yr = yr_module
        self.local_mode = local_mode
        self._started = False
        self.local_resources = None  # local mode: the LocalResources granting declared resources

    # ================================================================== lifecycle
    def start(self, options):
        yr = self.yr = self.yr or load_yr()
        if self.local_mode is None:
            self.local_mode = os.environ.get("RAY_ADAPTER_RUNTIME", "").lower() == "yr-local"
        local_mode = self.local_mode
        self.job_id = ids.job_id(1)
        self._ids = ids.IdFactory(self.job_id)
        self.node_id = ids.random_id(ids.NODE_ID_SIZE)
        self.worker_id = ids.random_id(ids.WORKER_ID_SIZE)
        self.namespace = options.namespace or str(uuid.uuid4())
        self.options = options
        num_cpus = float(options.num_cpus if options.num_cpus is not None else (os.cpu_count() or 1))
        num_gpus, num_npus = options.num_gpus, None
        if local_mode:  # the node's accelerators, as the embedded runtime finds them
            accelerators = detect_accelerators()
            if options.num_gpus is not None:
                check_declared_gpus(options.num_gpus)
                accelerators["GPU"] = options.num_gpus
            num_gpus, num_npus = accelerators.get("GPU"), accelerators.get("NPU")
        node = local_node(self.node_id, num_cpus, dict(options.resources or {}), num_gpus, num_npus)
        self.job_env = JobEnv(options.runtime_env, local_mode)
        self.job_env.start()
        self._owns_yr = not yr.is_initialized()
        if local_mode:  # defects of yr's local mode (local_mode_repairs), repaired before it starts
            local_mode_repairs.install()
        if self._owns_yr:
            # yr's native init prints notices on stdout (kept off the program's stdout) and, in
            # local mode, that no `yr` command is installed (true, and not needed there).
            with _native_notices(drop=_NO_YR_COMMAND if local_mode else None):
                yr.init(self._config(options))
        self._releases = DeferredReleases()
        # Actors whose last handle went and whose calls are over are ended here, one after
        # another (ending one waits for yr to terminate its instance).
        self._endings = DeferredReleases(name="ray-adapter-actor-ends")
        # Unread errors are reported on a thread of their own: the report formats the user's
        # exception, which must not run on the release thread (or under any lock).
        self._reports = (None if options.on_unhandled_error is None else
                         DeferredReleases(name="ray-adapter-unhandled"))
        scheduler = _local_scheduler(node) if local_mode else None
        if local_mode:  # the adapter grants what tasks and actors declare (yr does not)
            self.local_resources = LocalResources(scheduler)
        self.objects = ObjectTable(
            yr, self._ids, local_mode=local_mode, local=self.local_resources,
            releases=self._releases, reports=self._reports,
            on_unhandled_error=options.on_unhandled_error,
            on_free_handles=lambda actor_ids: self.actors.drop_handles(actor_ids))
        self.streams = StreamTable(self.objects, self._releases, local_mode)
        self.groups = ResourceGroups(yr, self._ids, self.objects, job_id=self.job_id,
                                     namespace=self.namespace, node_id=self.node_id, scheduler=scheduler)
        options_map = InvokeOptionsMap(yr, self.job_env, self.groups.rg_name, local_mode)
        self.tasks = TaskCalls(yr, self._ids, self.objects, self.streams, options_map,
                               job_env=self.job_env, local=self.local_resources, local_mode=local_mode)
        self.actors = ActorTable(yr, self._ids, self.objects, self.streams, options_map,
                                 job_env=self.job_env, local=self.local_resources,
                                 endings=self._endings, namespace=self.namespace, local_mode=local_mode)
        address = self.address = "yr-local" if local_mode else self._server_address(options)
        self.cluster = ClusterView(yr, node, objects=self.objects, actors=self.actors,
                                   groups=self.groups, scheduler=scheduler, job_env=self.job_env,
                                   job_id=self.job_id, node_id=self.node_id,
                                   worker_id=self.worker_id, namespace=self.namespace,
                                   address=address)
        # (in local mode the runtime is this machine: its node metrics are served too)
        self.metrics = MetricsExport(options.metrics_export_port,
                                     node_ip=node["address"] if local_mode else None)
        self._started = True
        _exit_grace.register(self)
        if local_mode:  # os._exit in a task or actor (a thread) says it ends the driver
            thread_exit.install()
            thread_env.install()  # each call reads its own CUDA_VISIBLE_DEVICES (in Python)
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
        if not self._started:
            return
        concurrent.futures.wait(self.objects.unfinished(), timeout=exit_grace_seconds(EXIT_GRACE_S))

    def shutdown(self):
        if not self._started:
            return
        self._started = False
        gone = errors.NotInitialized("ray.shutdown() was called while this call was waiting")
        actors = self.actors.close()
        self.objects.close(gone)  # wakes every get / wait still blocked
        _exit_grace.unregister(self)
        if self.local_mode:
            thread_exit.uninstall()
            thread_env.uninstall()
        self.streams.close_all()  # a producer paused by backpressure stops
        self._releases.close()
        self._endings.close()
        if self._reports is not None:
            self._reports.close()
        if self.local_resources is not None:  # requests still waiting for resources fail
            self.local_resources.close(gone)
        self.groups.close(gone)
        self.job_env.stop()
        shared_environ.release_all()  # what actors still held (local mode: this process's env)
        self.metrics.close()
        self.actors.terminate_all(actors)
        if self._owns_yr:
            self.yr.finalize()

    def _check_started(self):
        if not self._started:
            raise errors.NotInitialized("the yuanrong runtime has been shut down")

    # ================================================================== objects
    def put(self, value):
        self._check_started()
        return self.objects.put(value)

    def get(self, object_ids, timeout):
        return self.objects.get(object_ids, timeout)

    def wait(self, object_ids, num_returns, timeout):
        return self.objects.wait(object_ids, num_returns, timeout)

    def object_future(self, object_id):
        return self.objects.object_future(object_id)

    def add_local_reference(self, object_id):
        self.objects.add_local_reference(object_id)

    def remove_local_reference(self, object_id):
        self.objects.remove_local_reference(object_id)

    def object_escaped(self, object_id):
        self.objects.escaped(object_id)

    def flush_releases(self):
        """Apply every reference drop queued so far (tests use it)."""
        self._releases.flush()

    def hold_contained(self, refs, handles):
        """A value being packed holds ``refs`` (object ids) and ``handles`` (actor ids)
        (local mode; see :mod:`.holders`)."""
        self.objects.hold(refs)
        self.actors.add_handles(handles)

    def object_store_stats(self):
        return self.cluster.object_store_stats()

    # ================================================================== tasks
    def submit_task(self, function, function_key, args, kwargs, options):
        self._check_started()
        return self.tasks.submit(function, function_key, args, kwargs, options)

    def cancel(self, object_id, force, recursive):
        self.tasks.cancel(object_id, force, recursive)

    def stream_next(self, generator_id, timeout):
        self._check_started()
        return self.streams.next(generator_id, timeout)

    def stream_peek(self, generator_id):
        return self.streams.peek(generator_id)

    def stream_close(self, generator_id):
        self.streams.close(generator_id)

    # ================================================================== actors
    def create_actor(self, cls, class_key, args, kwargs, options):
        self._check_started()
        return self.actors.create(cls, class_key, args, kwargs, options)

    def submit_actor_task(self, actor_id, method_name, args, kwargs, options):
        self._check_started()
        return self.actors.submit(actor_id, method_name, args, kwargs, options)

    def add_actor_handle(self, actor_id):
        self.actors.add_handle(actor_id)

    def remove_actor_handle(self, actor_id):
        self._releases.put(self.actors.drop_handle, actor_id)  # from a finalizer: deferred

    def actor_handle_escaped(self, actor_id):
        self.actors.handle_escaped(actor_id)

    def kill_actor(self, actor_id, no_restart):
        self.actors.kill(actor_id, no_restart)

    def get_named_actor(self, name, namespace):
        return self.actors.get_named(name, namespace)

    def list_named_actors(self, all_namespaces):
        return self.actors.list_named(all_namespaces)

    def exit_current_actor(self):
        self.actors.exit_current()

    # ================================================================== placement groups
    def create_placement_group(self, bundles, strategy, name, lifetime, label_selectors=None,
                               _creator_actor=None):
        self._check_started()
        return self.groups.create(bundles, strategy, name, lifetime, label_selectors)

    def remove_placement_group(self, placement_group_id):
        self._check_started()
        self.groups.remove(placement_group_id)

    def wait_placement_group(self, placement_group_id, timeout):
        return self.groups.wait(placement_group_id, timeout)

    def placement_group_ready(self, placement_group_id, value):
        return self.groups.ready_object(placement_group_id, value)

    def placement_group_table(self, placement_group_id):
        self._check_started()
        return self.groups.table(placement_group_id)

    def captured_placement_group(self):
        group = shell.current_group.get()
        if group is not None and group[1]:
            return group[0], -1
        return None

    # ================================================================== cluster state
    def nodes(self):
        return self.cluster.nodes()

    def cluster_resources(self):
        return self.cluster.cluster_resources()

    def available_resources(self):
        return self.cluster.available_resources()

    def resources_per_node(self, which):
        return self.cluster.resources_per_node(which)

    def context(self):
        return self.cluster.context()

    def state(self, kind):
        self._releases.flush()  # this driver's queued drops count first, as in Ray's owner
        return self.cluster.state(kind)

    def record_metric(self, kind, name, description, tag_keys, boundaries, tags, value):
        """Recorded in the driver's endpoint: by the driver, and by tasks and actors of yr's
        local mode (threads of the driver); on a cluster, records made in remote yr workers
        stay there (matrix: ray.util.metrics)."""
        self._check_started()
        self.metrics.record(kind, name, description, tag_keys, boundaries, tags, value)


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
