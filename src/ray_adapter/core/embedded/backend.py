"""The embedded backend: the single-machine runtime ``ray.init()`` starts by default.

A thin facade over its components (each module states which thread owns its state)::

    user threads ──► EmbeddedBackend ──► TaskManager / ActorManager ──► Scheduler (decides)
                         │                    │    ▲                        │ grants
                         ▼                    ▼    │ results                ▼
                     ObjectTable ◄────── WorkerPool: WorkerHandle ──channel──► worker process
                         ▲                    │ reader thread per worker
                         └──── DriverService ◄┘ (nested requests, reference updates)

Tasks and actor calls are pushed straight to a worker over its socket; results come back on
the same socket and are sealed into the object table, waking whoever waits.
"""
import atexit
import dataclasses
import os
import pickle
import shutil
import socket
import time
import uuid

import msgspec

from ray_adapter.core import errors, ids, relays, serialization, shm
from ray_adapter.core.embedded import protocol
from ray_adapter.core.embedded.actors import ActorManager
from ray_adapter.core.embedded import local_runtimes
from ray_adapter.core.embedded.arena import Arena
from ray_adapter.core.embedded.attach_server import AttachServer
from ray_adapter.core.embedded.demands import InfeasibleWarnings
from ray_adapter.core.embedded.drivers import AttachedDrivers, is_driver
from ray_adapter.core.embedded.driver_reading import close_free_wakes
from ray_adapter.core.embedded.posts import flush_posted
from ray_adapter.core.embedded.protocol import to_payload
from ray_adapter.core.embedded.nodes import Nodes, describe_all, make_head
from ray_adapter.core.embedded.objects import ObjectTable
from ray_adapter.core.embedded.placement import PlacementGroups
from ray_adapter.core.embedded.pool import WorkerPool, worker_environment
from ray_adapter.core.embedded.runtime_envs import RuntimeEnvs
from ray_adapter.core.embedded.scheduler import Scheduler
from ray_adapter.core.embedded.service import DriverService
from ray_adapter.core.embedded.state_reports import StateReports
from ray_adapter.core.embedded.streams import StreamTable
from ray_adapter.core.embedded.task_events import TaskEvents
from ray_adapter.core.embedded.tasks import TaskManager
from ray_adapter.core.embedded.timers import Timers
from ray_adapter.core.execution import exit_grace_seconds, serialize_args, serialize_value
from ray_adapter.core.metrics import MetricsExport
from ray_adapter.core.interface import ArgRef, CallContext, RuntimeCore
from ray_adapter.core.releases import DeferredReleases

#: Seconds the work still running when the driver's interpreter exits is given before the
#: runtime stops (Ray 2.60's ``shutdown`` at exit sleeps 0.5 s "to make sure that log messages
#: finish printing", then kills its workers): output printed meanwhile reaches the terminal.
EXIT_GRACE_S = 0.5
#: At exit, seconds an idle worker has to end by itself before it is killed (a busy one is
#: killed then too: Ray's workers die with their raylet).
EXIT_KILL_AFTER_S = 0.1


#: Started backends, shut down at interpreter exit by the one handler below. (A handler
#: registered per ray.init and unregistered at shutdown leaked: CPython's atexit table never
#: shrinks, it grew by a slot every init/shutdown cycle.) Set operations are atomic (GIL).
_running = set()


@atexit.register
def _shutdown_running():
    for backend in list(_running):
        backend._at_exit()


def _reserve_port(ip):
    """A TCP socket bound to a free port of ``ip`` (loopback if ``ip`` is not this machine's),
    not listening: the port names the runtime and no other process can take it meanwhile."""
    for host in (ip, "127.0.0.1"):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind((host, 0))
            return sock
        except OSError:
            sock.close()
    raise OSError("no TCP port can be reserved for the runtime's address")


class EmbeddedBackend(RuntimeCore):
    """The single-machine runtime ``ray.init()`` starts by default: a head node, plus the
    virtual nodes of ``InitOptions.nodes`` / :meth:`add_node`. A façade: it builds the
    components (each given its collaborators by name), routes workers' messages to them and
    answers :class:`~ray_adapter.core.interface.RuntimeCore` by delegating to them."""

    backend_name = "embedded"

    def __init__(self):
        self._started = False

    # ================================================================== lifecycle
    def start(self, options):
        # The job's env first: copying working_dir / py_modules may fail (as in Ray's init).
        self.envs = RuntimeEnvs(worker_environment({}))
        self.job_runtime_env = self.envs.start_job(options.runtime_env)
        self.job_id = ids.job_id(1)
        self.ids = ids.IdFactory(self.job_id)
        node = make_head(options)
        self.node_id, self.head_ip, self._pid = node.node_id, node.ip, os.getpid()
        self.headless = options.head_port is not None
        # A driver-started runtime's address is host:port as Ray's (code splits it): a port
        # held bound (never listening; drivers attach through the Unix socket) while it runs.
        self._address_port = None if self.headless else _reserve_port(self.head_ip)
        port = options.head_port if self.headless else self._address_port.getsockname()[1]
        self.address = f"{self.head_ip}:{port}"
        self.driver_task_id = self.ids.task()
        self.driver_worker_id = ids.driver_worker_id(self.job_id)
        self.namespace = options.namespace or str(uuid.uuid4())
        self.start_time = time.time()
        shm.raise_fd_limit()
        self.scheduler = Scheduler([node])
        infeasible = InfeasibleWarnings(self.scheduler.total)  # request shapes warned about once
        # A freed value's actor handles are let go by the release thread: the table calls
        # this under its own lock, and ending an actor takes the actor manager's.
        self.objects = ObjectTable(
            on_free_handles=lambda actor_ids: self._releases.put(self.actors.scope.drop_handles, actor_ids),
            on_unread_error=lambda data, owner: self._releases.put(self._report_unread, (data, owner)),
            on_adopt_handles=lambda actor_ids: self.actors.scope.add_handles(actor_ids),
            run_elsewhere=lambda callbacks: self._callbacks.put(self.objects.run_callbacks, callbacks))
        self._on_unhandled_error = options.on_unhandled_error
        self.events = TaskEvents(self.job_id)
        self.groups = PlacementGroups(ids=self.ids, job_id=self.job_id, namespace=self.namespace,
                                      objects=self.objects, scheduler=self.scheduler)
        self.streams = StreamTable(self.objects)
        self.functions = {}   # function / class key -> pickled blob (dict ops are atomic)
        self.timers = Timers()
        self._releases = DeferredReleases()
        # Futures' callbacks completed by a get that reads a worker's reply itself
        # (driver_reading): they run user code (done-callbacks), never on that caller.
        self._callbacks = DeferredReleases(name="ray-adapter-callbacks")
        self.metrics = MetricsExport(options.metrics_export_port, node_ip=self.head_ip)
        log_to_driver = options.log_to_driver

        def init_message(worker_id, node, spec, job):
            job_id, namespace, code_path, main_module = self.job_id, self.namespace, "", ""
            if job is not None:  # an attached driver's: its output is relayed to it (its own
                job_id = job     # choice of log_to_driver applies there)
                namespace, code_path, main_module = (self.drivers.identity_of(job)
                                                     or (self.namespace, "", ""))
            return protocol.Init(protocol.VERSION, job_id, node.node_id, worker_id, namespace,
                                 log_to_driver or job is not None, node.ip, pickle.dumps(spec.env),
                                 relay_output=job is not None, code_path=code_path,
                                 main_module=main_module, id_salt=self.ids.caller_salt(),
                                 address=self.address)

        self.arena = Arena(node.resources.total_dict()["object_store_memory"]) if shm.AVAILABLE else None
        if self.arena is not None:
            serialization.set_allocator(self.arena.copy_of)
        self.pool = WorkerPool(init_message, self.envs.job, log_to_driver, self._dispatch,
                               self._on_worker_exit, self.arena,
                               session_dir=self.envs.session_dir)
        shared = dict(ids=self.ids, objects=self.objects, scheduler=self.scheduler, pool=self.pool,
                      envs=self.envs, functions=self.functions, events=self.events,
                      streams=self.streams, timers=self.timers, infeasible=infeasible)
        self.actors = ActorManager(namespace=self.namespace, groups=self.groups, **shared)
        self.tasks = TaskManager(scope=self.actors.scope, **shared)
        self.scheduler.spare = self.tasks.on_spare_resources
        self.nodes_added = Nodes(scheduler=self.scheduler, pool=self.pool)
        self.service = DriverService(self)
        self.drivers = AttachedDrivers(pool=self.pool, node=node, envs=self.envs, actors=self.actors,
                                       groups=self.groups, arena=self.arena, address=self.address,
                                       first_job=1 if self.headless else 2, ids=self.ids)
        if not self.headless:  # this process's driver has the first job
            self.drivers.job_records.driver_attached("", self.job_id.hex(), self._pid)
        self.reports = StateReports(job_id=self.job_id, driver_worker_id=self.driver_worker_id,
                                    driver_pid=None if self.headless else self._pid, objects=self.objects,
                                    scheduler=self.scheduler, events=self.events,
                                    groups=self.groups, actors=self.actors, pool=self.pool,
                                    drivers=self.drivers)
        self._handlers = self._message_handlers()
        self._started = True
        _running.add(self)  # stopped at exit (one atexit handler for every session)
        self._attach = None
        self._attach = self._listen_for_drivers(options)
        # Pre-start one worker per CPU off the caller's path, as Ray pre-starts workers.
        cpus = node.resources.total_dict().get("CPU", 1)
        self.pool.prestart(node, max(2, min(int(cpus), 8)))
        for spec in options.nodes or ():
            self.nodes_added.add(spec)
        return {"address": self.address, "node_id": self.node_id.hex(),
                "node_ip_address": self.head_ip, "metrics_export_port": self.metrics.port}

    def _listen_for_drivers(self, options):
        """Make this runtime attachable (:mod:`.local_runtimes`, :mod:`.attach_server`); None
        when it cannot be (no private registry directory here: then only a headless runtime
        fails, with the reason)."""
        directory = server = None
        try:
            directory = local_runtimes.runtime_dir(self._pid)
            server = AttachServer(directory=directory, on_driver=self.drivers.accept)
            server.start()
            record = {"address": self.address, "socket": server.path, "pid": self._pid,
                      "dir": directory, "version": protocol.VERSION, "node_id": self.node_id.hex(),
                      "started_by": "ray start" if self.headless else "ray.init",
                      "start_time": self.start_time}
            local_runtimes.register(record)
            if self.headless:
                local_runtimes.set_current(record)
            return server, directory
        except OSError:
            if server is not None:
                server.close()
            if directory is not None:
                shutil.rmtree(directory, ignore_errors=True)
            if self.headless:
                self._stop(grace=0.1)
                raise
            return None

    def _stop_listening(self):
        attach, self._attach = self._attach, None
        if attach is not None:
            server, directory = attach
            server.close()
            local_runtimes.unregister(self._pid)
            shutil.rmtree(directory, ignore_errors=True)

    def shutdown(self):
        self._stop(grace=1.0)

    def _at_exit(self):
        """The driver's interpreter exits with the runtime started (Ray's atexit shutdown):
        tasks and actor calls not finished get :data:`EXIT_GRACE_S` seconds, the runtime fully
        working (a task may still submit and get), so what they print meanwhile is shown; then
        every worker is stopped, a task that never ends killed with it. Runs in the main
        thread, once, from ``atexit``."""
        if not self._started:
            return
        if os.getpid() != self._pid:  # a process forked from the driver (see _stop)
            self._stop(grace=0)
            return
        unfinished = self.tasks.unfinished_returns() + self.actors.unfinished_returns()
        if unfinished:
            try:
                self.objects.wait(unfinished, len(unfinished), exit_grace_seconds(EXIT_GRACE_S))
            except errors.NotInitialized:  # shut down meanwhile (another thread)
                pass
        self._stop(grace=EXIT_KILL_AFTER_S)

    def _stop(self, grace):
        """Stop the runtime: workers get ``grace`` seconds to exit, then are killed. In a
        process forked from the driver the runtime is left alone (its workers, sockets and
        files are the parent's, which goes on using them): only this copy is marked stopped."""
        if not self._started:
            return
        self._started = False
        _running.discard(self)
        if os.getpid() != self._pid:
            return
        self._stop_listening()
        self._releases.close()
        self._callbacks.close()
        self.timers.close()
        self.groups.close()
        self.pool.shutdown(grace)
        self.objects.close()  # every get/wait still blocked raises NotInitialized
        close_free_wakes()  # (no worker left to read: the callers' wake-up pipes go)
        if self.arena is not None:
            serialization.set_allocator(None)
            self.arena.close()
        self.tasks.clear()
        self.actors.clear()
        self.streams.clear()
        self.envs.close()
        self.metrics.close()
        if self._address_port is not None:
            self._address_port.close()

    def _check_started(self):
        if not self._started:
            raise errors.NotInitialized("the embedded runtime has been shut down")

    # ================================================================== worker messages
    def _message_handlers(self):
        s, a = self.service, self.actors
        return {
            protocol.Hello: lambda w, m, b: None,
            protocol.AttachHello: self.drivers.on_hello,
            protocol.Exit: self.drivers.on_goodbye,
            protocol.TaskDone: self._on_done,
            protocol.Released: self.tasks.on_released,
            protocol.StreamItem: self.streams.on_item,
            protocol.ActorReady: lambda w, m, b: a.on_ready(w, m),
            protocol.ActorFailed: a.on_failed,
            protocol.ActorExiting: self._on_actor_exiting,
            protocol.Leaving: self._on_leaving,
            protocol.RefUpdate: s.on_ref_update,
            protocol.FunctionReq: s.on_function,
            protocol.SubmitTaskReq: s.on_submit_task,
            protocol.CreateActorReq: s.on_create_actor,
            protocol.CallActorReq: s.on_call_actor,
            protocol.PutReq: s.on_put,
            protocol.GetReq: s.on_get,
            protocol.WaitReq: s.on_wait,
            protocol.StreamNextReq: s.on_stream_next,
            protocol.MetricRecord: lambda w, m, b: self.metrics.record(
                m.kind, m.name, m.description, m.tag_keys, m.boundaries, m.tags, m.value),
            protocol.Relay: lambda w, m, b: relays.deliver(m.topic, msgspec.msgpack.decode(m.data)),
            protocol.Output: lambda w, m, b: self.drivers.output(w.job_id, m),
            **{query: s.on_query for query in protocol.QUERIES},
        }

    def _dispatch(self, worker, message, buffers):
        self._handlers[type(message)](worker, message, buffers)

    def _on_done(self, worker, message, buffers):
        # (An actor killed a moment ago keeps its calls in flight on its process: ``doomed``,
        # set before ``actor`` is cleared, see ActorManager.die.)
        if worker.actor is not None or worker.doomed is not None:
            self.actors.on_call_done(worker, message, buffers)
        else:
            self.tasks.on_done(worker, message, buffers)

    @staticmethod
    def _on_leaving(worker, message, buffers):
        worker.left_by_python = True  # (read when its stream ends, on this same reader thread)

    def _on_actor_exiting(self, worker, message, buffers):
        """exit_actor() ran: the actor is dead now; its process exits by itself. The calls not
        yet answered fail with that, but in a concurrent actor (``draining``) those running
        beside the exiting call are answered first."""
        worker.exit_intended = True
        worker.exit_by_exit_actor = message.by_exit_actor
        actor = worker.actor
        if actor is not None and actor.actor_id == message.actor_id:
            death = errors.ActorDied(actor.actor_id, errors.ActorDeath.EXITED, actor.options.class_name,
                                     detail=errors.EXITED_BY_EXIT_ACTOR if message.by_exit_actor else "")
            if message.draining:
                self.actors.die_draining(actor, death, message.task_id)
            else:
                self.actors.die(actor, death, retire=False)

    def _on_worker_exit(self, worker):
        if not self._started:
            return
        if is_driver(worker):
            # Its job ends first: its actors die because their owner did (OWNER_DIED, as in Ray),
            # not because its handles to them went out of scope a moment before.
            self.drivers.on_exit(worker)
        else:
            self.actors.end_owned(worker, self.head_ip)  # what it created dies with it
        self.tasks.on_worker_exit(worker)
        self.actors.on_worker_exit(worker)
        self.actors.scope.worker_gone(worker)
        self.objects.worker_gone(worker)

    # ================================================================== objects
    def put(self, value):
        self._check_started()
        return self.put_serialized(serialize_value(value))

    def put_serialized(self, ser, job=None):
        """Store ``ser`` as a new object of job ``job`` (an attached driver's or its
        workers'; None: this runtime's); returns its id, with one reference (the caller's)."""
        oid = self.ids.put(job)
        self.objects.adopt_contained((ser,))
        self.objects.put(oid, ser, 1)  # the caller's reference
        return oid

    def get(self, object_ids, timeout):
        self._check_started()
        reader = self._reply_reader(object_ids[0]) if len(object_ids) == 1 else None
        # An id the table does not hold (freed, forged) is never ready, as in Ray: GetTimeout.
        if not self.objects.wait(object_ids, len(object_ids), timeout, on_error=True, unknown_ready=False,
                                 reader=reader):
            raise errors.GetTimeout(timeout)
        values = []
        for data, is_error in self.objects.collect(object_ids):
            if is_error:
                raise serialization.loads(data)
            values.append(serialization.loads_value(data))
        return values

    def _reply_reader(self, object_id):
        """The read role of the worker whose reply will seal ``object_id`` (a running task's,
        or the actor's of a call), for ``get`` to read that reply itself; None when it is
        sealed already, not known, or the worker has not booted (see driver_reading)."""
        task_id = self.objects.producer(object_id)
        if task_id is None:
            return None
        worker = (self.actors if ids.names_actor(task_id) else self.tasks).worker_of(task_id)
        if worker is None or not worker.booted:
            return None
        return worker.read_role

    def wait(self, object_ids, num_returns, timeout):
        self._check_started()
        self.objects.wait(object_ids, num_returns, timeout, unknown_ready=False)
        flags = self.objects.ready_flags(object_ids, unknown_ready=False)
        ready, not_ready = [], []
        for oid, is_ready in zip(object_ids, flags):
            (ready if is_ready and len(ready) < num_returns else not_ready).append(oid)
        return ready, not_ready

    def object_future(self, object_id):
        import concurrent.futures

        future = concurrent.futures.Future()

        def settle(ok):
            try:
                if not ok:
                    raise errors.NotInitialized("ray.shutdown() was called while this call was waiting")
                (data, is_error), = self.objects.values([object_id])
                if is_error:
                    raise serialization.loads(data)
                future.set_result(serialization.loads_value(data))
            except BaseException as exc:  # noqa: BLE001 - the failure belongs to the future
                future.set_exception(exc)

        self._check_started()
        # An id the table does not hold never settles (Ray's future of such a ref never does).
        self.objects.when_ready([object_id], settle, unknown_ready=False, user=True)
        return future

    def add_local_reference(self, object_id):
        self.objects.add_ref(object_id)

    def remove_local_reference(self, object_id):
        # Called from ObjectRef.__del__, in any thread, at any point: applied at once when the
        # table's (leaf) lock is free, else queued for the release thread.
        if self._started and not self.objects.try_drop_ref(object_id):
            self._releases.put(self.objects.drop_ref, object_id)

    def _report_unread(self, freed):
        """On the release thread: an error object freed unread goes to the proxy's report, or
        to the attached driver it was lent to (whose own proxy reports it, as Ray's owner)."""
        data, owner = freed
        if owner is not None and is_driver(owner):
            buffers = []
            owner.post(protocol.UnreadError(to_payload(data, buffers)), buffers)
            flush_posted()
            return
        if self._on_unhandled_error is None:
            return
        try:
            error = serialization.loads(data)
        except Exception:  # noqa: BLE001 - an error the driver cannot rebuild: nothing to show
            return
        if errors.reported_when_unread(error):
            self._on_unhandled_error(error)

    def flush_releases(self):
        """Apply every reference drop queued so far (tests use it)."""
        self._releases.flush()

    def object_escaped(self, object_id):
        self.objects.pin([object_id])

    # ================================================================== tasks
    def _register(self, key, function):
        if key not in self.functions:
            self.functions.setdefault(key, serialization.dumps_plain(function))

    @staticmethod
    def _deps_of(args, kwargs):
        deps = [a.object_id for a in args if type(a) is ArgRef]
        if kwargs:
            deps.extend(v.object_id for v in kwargs.values() if type(v) is ArgRef)
        return deps or ()  # none: a shared tuple (one object less per task for the GC)

    def submit_task(self, function, function_key, args, kwargs, options):
        self._check_started()
        self._register(function_key, function)
        ser = serialize_args(args, kwargs)
        return self.submit_serialized(function_key, ser, self._deps_of(args, kwargs), options)

    def submit_serialized(self, key, args, deps, options, parent=None, owner=None, parent_task=None,
                          task_id=None):
        """``parent``: the runtime-env spec of the submitting worker; ``owner``: that worker
        (its tasks are cancelled when its process dies, as Ray fate-shares them);
        ``parent_task``: the id of the task that submits it (``ray.cancel`` of that task, with
        ``recursive=True``, cancels this one too); ``task_id``: minted by the submitter (None:
        here)."""
        # Refs pickled inside ``args`` (``args.refs``) are held with the top-level ones until
        # the task finishes: by then the worker that unpickled them has reported its borrow.
        env = self.envs.effective(options.runtime_env, parent)  # None: the job's
        if env is not options.runtime_env:
            options = dataclasses.replace(options, runtime_env=env)
        return self.tasks.submit(key, args, deps, options, tuple(args.handles), owner, parent_task,
                                 task_id)

    def cancel(self, object_id, force, recursive):
        self._check_started()
        task_id = object_id[:ids.TASK_ID_SIZE]
        if ids.names_actor(task_id):
            self.actors.cancel_call(task_id)
        else:
            self.tasks.cancel(task_id, force, recursive)

    # ================================================================== actors
    def create_actor(self, cls, class_key, args, kwargs, options):
        self._check_started()
        self._register(class_key, cls)
        ser = serialize_args(args, kwargs)
        return self.create_serialized(class_key, ser, self._deps_of(args, kwargs), options)

    def create_serialized(self, key, args, deps, options, parent=None):
        options.runtime_env = self.envs.effective(options.runtime_env, parent) or self.job_runtime_env
        return self.actors.create(key, args, deps, options, tuple(args.handles))

    def submit_actor_task(self, actor_id, method_name, args, kwargs, options):
        self._check_started()
        ser = serialize_args(args, kwargs)
        return self.call_serialized(actor_id, method_name, ser, self._deps_of(args, kwargs), options)

    def call_serialized(self, actor_id, method, args, deps, options, caller=None, task_id=None):
        """A method call from ``caller`` (a worker handle; None: the driver); ``task_id``: the
        id the caller minted for it (None: minted here)."""
        return self.actors.submit_call(actor_id, method, args, deps, options,
                                       tuple(args.handles), caller, task_id)

    def add_actor_handle(self, actor_id):
        self.actors.scope.add_handle(actor_id)

    def remove_actor_handle(self, actor_id):
        if self._started:
            self._releases.put(self.actors.scope.drop_handle, actor_id)

    def actor_handle_escaped(self, actor_id):
        self.actors.scope.escape([actor_id])

    def kill_actor(self, actor_id, no_restart):
        self._check_started()
        self.actors.kill(actor_id, no_restart)

    def get_named_actor(self, name, namespace):
        self._check_started()
        return self.actors.named(name, namespace if namespace is not None else self.namespace)

    def list_named_actors(self, all_namespaces, namespace=None):
        self._check_started()
        return self.actors.list_named(namespace or self.namespace, all_namespaces)

    def exit_current_actor(self):
        raise RuntimeError("exit_actor() can only be called inside an actor")

    def record_metric(self, kind, name, description, tag_keys, boundaries, tags, value):
        self._check_started()
        self.metrics.record(kind, name, description, tag_keys, boundaries, tags, value)

    def object_store_stats(self):
        count, used = self.objects.stats()
        return {"num_objects": count, "bytes_used": used,
                "bytes_avail": int(self.scheduler.total().get("object_store_memory", 0))}

    # ================================================================== streams
    def stream_next(self, generator_id, timeout):
        self._check_started()
        return self.streams.next(generator_id, timeout)

    def stream_peek(self, generator_id):
        self._check_started()
        return self.streams.peek(generator_id)

    def stream_close(self, generator_id):
        # From a finalizer, in any thread: applied by the release thread.
        if self._started:
            self._releases.put(self.streams.close, generator_id)

    # ================================================================== cluster
    # -- nodes and resources -----------------------------------------------------------------
    def nodes(self):
        return describe_all(self.scheduler)

    def cluster_resources(self):
        return self.scheduler.total()

    def available_resources(self):
        return self.scheduler.available()

    def resources_per_node(self, which):
        return self.scheduler.per_node(which)

    def add_node(self, spec):
        self._check_started()
        return self.nodes_added.add(spec)

    def remove_node(self, node_id):
        self._check_started()
        self.nodes_added.remove(node_id)

    def context(self):
        return CallContext(job_id=self.job_id, node_id=self.node_id, worker_id=self.driver_worker_id,
                           namespace=self.namespace, is_driver=True, task_id=self.driver_task_id,
                           runtime_env=self.job_runtime_env, node_ip_address=self.head_ip,
                           gcs_address=self.address)

    # -- placement groups --------------------------------------------------------------------
    def create_placement_group(self, bundles, strategy, name, lifetime, label_selectors=None,
                               _creator_actor=None, namespace=None, owner_job=None):
        self._check_started()
        return self.groups.create(bundles, strategy, name, lifetime, label_selectors,
                                  namespace=namespace, creator_actor=_creator_actor,
                                  owner_job=owner_job)

    def remove_placement_group(self, placement_group_id):
        self._check_started()
        self.groups.remove(placement_group_id)

    def placement_group_table(self, placement_group_id):
        self._check_started()
        return self.groups.table(placement_group_id)

    def wait_placement_group(self, placement_group_id, timeout):
        self._check_started()
        return self.groups.wait(placement_group_id, timeout)

    def placement_group_ready(self, placement_group_id, value):
        self._check_started()
        return self.groups.ready(placement_group_id, serialization.dumps(value))

    def placement_group_ready_serialized(self, placement_group_id, data):
        """:meth:`placement_group_ready` with the value already serialized (a worker's)."""
        self._check_started()
        return self.groups.ready(placement_group_id, data)

    # -- the State API -----------------------------------------------------------------------
    def state(self, kind):
        self._check_started()
        # This driver's drops queued by finalizers count first: Ray's owner applies a `del` at
        # once, so a listing right after it no longer shows the reference.
        self._releases.flush()
        return self.reports.state(kind)
