"""Driver side of the embedded backend: object table, scheduler, worker pool, actor registry.

The driver owns every object. Tasks and actor calls are pushed straight to a worker over its
socket (no intermediate service on the hot path); results come back on the same socket and
are sealed into the object table, waking whoever waits in ``get``/``wait``. Workers reach the
driver with requests for nested calls (``ray.get`` inside a task, a task submitted by an
actor...), answered by :meth:`EmbeddedBackend._on_request`.

One lock (``self._lock``) guards all scheduler state; messages to a worker are sent while it
is held, which keeps per-actor call order without a queue per worker.
"""
import atexit
import collections
import contextvars
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

from ray_adapter.core import errors, ids, serialization, shm
from ray_adapter.core.embedded import wire
from ray_adapter.core.execution import wait_seconds
from ray_adapter.core.embedded.channel import Channel, ChannelClosed
from ray_adapter.core.embedded.resources import NodeResources, detect_accelerators
from ray_adapter.core.interface import ActorInfo, ArgRef, RuntimeCore
from ray_adapter.core.releases import DeferredReleases

NODE_IP = "127.0.0.1"
# While the arguments of a submission are serialized, the actor handles pickled into them are
# collected here: the call carries them (keeps those actors alive) until it finishes, and the
# worker that unpickles them reports its own borrow (see EmbeddedBackend._on_message).
_carried_handles = contextvars.ContextVar("ray_adapter_carried_handles", default=None)
#: Extra idle pool workers kept beyond the CPU count before idle ones are retired.
IDLE_WORKER_SLACK = 2


class _Object:
    """An entry of the object table. ``data`` is a Serialized value or error."""

    __slots__ = ("ready", "data", "is_error", "waiters", "refs", "pinned", "task")

    def __init__(self, task=None):
        self.ready = False
        self.data = None
        self.is_error = False
        self.waiters = None
        self.refs = 0
        self.pinned = False
        self.task = task


class _Latch:
    """Counts sealed objects for one ``get``/``wait`` call."""

    __slots__ = ("remaining", "event")

    def __init__(self, remaining):
        self.remaining = remaining
        self.event = threading.Event()

    def __call__(self):
        self.remaining -= 1
        if self.remaining <= 0:
            self.event.set()


class _Task:
    """A normal task or an actor call."""

    __slots__ = ("task_id", "key", "args", "deps", "options", "return_ids", "retries_left",
                 "units", "worker", "grant", "state", "cancelled", "actor", "method", "name",
                 "unresolved", "waiting_deps", "carried")

    def __init__(self, task_id, key, args, deps, options, return_ids, units, name,
                 actor=None, method=None):
        self.task_id = task_id
        self.key = key
        self.args = args
        self.deps = deps
        self.options = options
        self.return_ids = return_ids
        self.retries_left = options.max_retries
        self.units = units
        self.worker = None
        self.grant = None
        self.state = "PENDING"
        self.cancelled = False
        self.actor = actor
        self.method = method
        self.name = name
        self.unresolved = 0
        self.waiting_deps = False  # an actor call holding back the calls behind it
        self.carried = ()  # ids of actors whose handles travel in the arguments


class _Actor:
    __slots__ = ("actor_id", "key", "args", "deps", "options", "units", "state", "worker",
                 "grant", "pending", "inflight", "restarts_left", "num_restarts", "death",
                 "unresolved", "env_vars", "handles", "escaped", "out_of_scope", "borrowers",
                 "in_transit", "carried")

    def __init__(self, actor_id, key, args, deps, options, units):
        self.actor_id = actor_id
        self.key = key
        self.args = args
        self.deps = deps
        self.options = options
        self.units = units
        self.state = "PENDING_CREATION"
        self.worker = None
        self.grant = None
        self.pending = collections.deque()
        self.inflight = {}
        self.restarts_left = options.max_restarts
        self.num_restarts = 0
        self.death = None
        self.unresolved = 0
        self.env_vars = dict((options.runtime_env or {}).get("env_vars") or {})
        self.handles = 0          # handle objects in the driver
        self.borrowers = 0        # worker processes holding a handle
        self.in_transit = 0       # calls whose arguments carry a handle
        self.escaped = False      # a handle went where it cannot be tracked (a stored value)
        self.out_of_scope = False
        self.carried = ()


class _WorkerProc:
    __slots__ = ("proc", "channel", "pid", "task", "actor", "known_keys", "worker_id",
                 "blocked", "dead", "exit_intended", "calls", "borrowed")

    def __init__(self, proc, channel, worker_id):
        self.proc = proc
        self.channel = channel
        self.pid = proc.pid
        self.task = None
        self.actor = None
        self.known_keys = set()
        self.worker_id = worker_id
        self.blocked = 0
        self.dead = False
        self.exit_intended = False
        self.calls = {}  # function key -> calls run, for max_calls
        self.borrowed = set()  # actor ids this worker holds handles to


class EmbeddedBackend(RuntimeCore):
    """The single-machine runtime ``ray.init()`` starts by default."""

    backend_name = "embedded"

    def __init__(self):
        self._lock = threading.RLock()
        self._objects = {}
        self._functions = {}
        self._tasks = {}           # running or queued normal tasks by task id
        self._ready = collections.OrderedDict()  # resource shape -> deque of runnable tasks
        self._actors = {}
        self._names = {}
        self._workers = []
        self._idle = []
        self._started = False
        self._warned_infeasible = set()
        self._actor_queue = collections.deque()  # actors waiting for resources
        self._releases = None  # DeferredReleases, from start(): drops from __del__/finalizers
        self._wakeups = collections.deque()  # waiters of sealed objects still to run (lock held)
        self._waking = False

    # ================================================================== lifecycle
    def start(self, options):
        total = {"CPU": float(options.num_cpus if options.num_cpus is not None else (os.cpu_count() or 1))}
        accel = detect_accelerators()
        if options.num_gpus is not None:
            accel["GPU"] = options.num_gpus
        total.update({k: float(v) for k, v in accel.items()})
        total["memory"] = float(options.memory if options.memory is not None else _default_memory())
        total["object_store_memory"] = float(
            options.object_store_memory if options.object_store_memory is not None else _default_memory() * 3 // 7)
        for k, v in (options.resources or {}).items():
            total[k] = float(v)
        total[f"node:{NODE_IP}"] = 1.0
        total["node:__internal_head__"] = 1.0
        self.node = NodeResources(total)
        self.job_id = ids.job_id(1)
        self._ids = ids.IdFactory(self.job_id)
        self.node_id = ids.random_id(ids.NODE_ID_SIZE)
        self.driver_task_id = self._ids.task()
        self.driver_worker_id = ids.random_id(ids.WORKER_ID_SIZE)
        self.namespace = options.namespace or str(uuid.uuid4())
        self.log_to_driver = options.log_to_driver
        self.job_runtime_env = dict(options.runtime_env or {})
        self.job_env_vars = dict(self.job_runtime_env.get("env_vars") or {})
        self._worker_pythonpath = _driver_code_path()
        shm.raise_fd_limit()
        self._started = True
        self.start_time = time.time()
        atexit.register(self.shutdown)
        self._releases = DeferredReleases(self._lock)
        # Pre-start one pool worker per CPU off the caller's path, as Ray pre-starts workers.
        prestart = max(1, min(int(total["CPU"]), 8))
        threading.Thread(target=self._prestart, args=(prestart,), daemon=True,
                         name="ray-adapter-prestart").start()
        return {"address": f"embedded://{NODE_IP}:{os.getpid()}", "node_id": self.node_id.hex(),
                "node_ip_address": NODE_IP}

    def _prestart(self, count):
        with self._lock:
            while self._started and len(self._idle) < count:
                self._idle.append(self._spawn_worker())

    def shutdown(self):
        with self._lock:
            if not self._started:
                return
            self._started = False
            workers = list(self._workers)
            self._workers.clear()
            self._idle.clear()
        atexit.unregister(self.shutdown)
        self._releases.close()
        for w in workers:
            w.dead = True
            try:
                w.channel.send(("exit",))
            except OSError:
                pass
        deadline = time.monotonic() + 1.0
        for w in workers:
            try:
                w.proc.wait(max(0.01, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait()
            self._kill_process_group(w)
            w.channel.close()
        with self._lock:
            # Wake every get/wait still blocked (in any thread): they raise NotInitialized.
            for obj in self._objects.values():
                for waiter in obj.waiters or ():
                    if isinstance(waiter, _Latch):
                        waiter.event.set()
            self._objects.clear()
            self._tasks.clear()
            self._ready.clear()
            self._actors.clear()
            self._names.clear()

    # ================================================================== workers
    def _spawn_worker(self):
        parent, child = socket.socketpair()
        env = dict(os.environ)
        env["RAY_BACKEND"] = "yuanrong"
        env["PYTHONPATH"] = self._worker_pythonpath
        env.update(self.job_env_vars)
        out = None if self.log_to_driver else subprocess.DEVNULL
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "ray_adapter.core.embedded.worker", str(child.fileno())],
                pass_fds=(child.fileno(),), env=env, stdin=subprocess.DEVNULL, stdout=out,
                stderr=out, start_new_session=True, close_fds=True)
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        worker = _WorkerProc(proc, Channel(parent), ids.random_id(ids.WORKER_ID_SIZE))
        worker.channel.send(("init", self.job_id, self.node_id, worker.worker_id, self.namespace,
                             self.log_to_driver))
        self._workers.append(worker)
        threading.Thread(target=self._reader, args=(worker,), daemon=True,
                         name=f"ray-adapter-worker-{proc.pid}").start()
        return worker

    def _take_worker(self):
        return self._idle.pop() if self._idle else self._spawn_worker()

    def _return_worker(self, worker):
        worker.task = None
        if worker.dead:
            return
        limit = int(self.node.total_dict().get("CPU", 0)) + IDLE_WORKER_SLACK
        if len(self._idle) >= limit:
            self._retire(worker)
        else:
            self._idle.append(worker)

    def _retire(self, worker):
        worker.dead = True
        if worker in self._workers:
            self._workers.remove(worker)
        try:
            worker.channel.send(("exit",))
        except OSError:
            pass

    def _reader(self, worker):
        channel = worker.channel
        try:
            while True:
                message, buffers = channel.recv()
                try:
                    self._on_message(worker, message, buffers)
                except Exception:  # a bug here must not leave the worker unread forever
                    import traceback

                    sys.stderr.write("ray-adapter: internal error handling a worker message; "
                                     "the worker is stopped:\n" + traceback.format_exc())
                    self._kill_process_group(worker)
                    break
                del message, buffers  # do not keep the last payload alive until the next one
        except ChannelClosed:
            pass
        except OSError as exc:  # e.g. no descriptor left to map a shared buffer
            sys.stderr.write(f"ray-adapter: lost the connection to worker {worker.pid}: {exc}\n")
            self._kill_process_group(worker)
        try:
            worker.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            worker.proc.kill()
            worker.proc.wait()
        self._kill_process_group(worker)  # what the task started dies with the worker, as in Ray
        self._on_worker_exit(worker)

    def _on_message(self, worker, message, buffers):
        kind = message[0]
        if kind == "done":
            self._on_done(worker, message, buffers)
        elif kind == "req":
            self._on_request(worker, message, buffers)
        elif kind == "actor_ready":
            self._on_actor_ready(worker, message[1])
        elif kind == "actor_failed":
            self._on_actor_failed(worker, message[1], wire.unpack(message[2], buffers))
        elif kind == "actor_exit":
            worker.exit_intended = True
        elif kind == "decref":
            with self._lock:
                for oid in message[1]:
                    self._drop_object_ref(oid)
        elif kind == "pin":
            with self._lock:
                for oid in message[1]:
                    self.object_escaped(oid)
        elif kind in ("borrow", "unborrow"):
            with self._lock:
                self._borrow(worker, message[1], 1 if kind == "borrow" else -1)
        elif kind == "pin_actor":
            with self._lock:
                for actor_id in message[1]:
                    actor = self._actors.get(actor_id)
                    if actor is not None:
                        actor.escaped = True

    @staticmethod
    def _kill_process_group(worker):
        try:
            os.killpg(worker.pid, signal.SIGKILL)  # workers lead their own group (new session)
        except (ProcessLookupError, PermissionError):
            pass

    # ================================================================== objects
    def _new_object(self, oid, task=None):
        obj = self._objects[oid] = _Object(task)
        return obj

    def _seal(self, oid, data, is_error):
        obj = self._objects.get(oid)
        if obj is None or obj.ready:
            return
        obj.data, obj.is_error, obj.ready = data, is_error, True
        obj.task = None
        waiters, obj.waiters = obj.waiters, None
        if waiters:
            self._wakeups.extend(waiters)
        self._free_if_unused(oid, obj)
        self._run_wakeups()

    def _run_wakeups(self):
        """Run waiters of sealed objects iteratively: a failure at the root of a long chain of
        dependent tasks fails each one in turn without deepening the stack."""
        if self._waking:
            return
        self._waking = True
        try:
            while self._wakeups:
                self._wakeups.popleft()()
        finally:
            self._waking = False

    def _free_if_unused(self, oid, obj):
        """Drop a sealed object nobody references any more (lock held)."""
        if obj.refs <= 0 and obj.ready and not obj.pinned:
            self._objects.pop(oid, None)

    def _error_data(self, core_error):
        return serialization.dumps(core_error)

    def put(self, value):
        return self._put_serialized(serialization.dumps(value))

    def _put_serialized(self, ser, pinned=False):
        oid = self._ids.put()
        with self._lock:
            obj = self._new_object(oid)
            obj.pinned = pinned
            obj.refs = 1  # the caller's reference
            obj.ready, obj.data = True, ser
        return oid

    def add_local_reference(self, object_id):
        with self._lock:
            obj = self._objects.get(object_id)
            if obj is not None:
                obj.refs += 1

    def remove_local_reference(self, object_id):
        self._releases.put(self._drop_object_ref, object_id)

    def _drop_object_ref(self, object_id):
        obj = self._objects.get(object_id)
        if obj is not None:
            obj.refs -= 1
            self._free_if_unused(object_id, obj)

    def flush_releases(self):
        """Apply every reference drop queued so far (tests use it)."""
        self._releases.flush()

    def object_escaped(self, object_id):
        obj = self._objects.get(object_id)
        if obj is not None:
            obj.pinned = True

    def _wait_ready(self, object_ids, needed, timeout):
        """Block until ``needed`` of ``object_ids`` are sealed; True if so before timeout."""
        with self._lock:
            missing = []
            for oid in object_ids:
                obj = self._objects.get(oid)
                if obj is None:
                    if needed >= len(object_ids):
                        raise errors.ObjectFreed(oid)
                    continue
                if not obj.ready:
                    missing.append(obj)
            short = needed - (len(object_ids) - len(missing))
            if short <= 0:
                return True
            if timeout is not None and timeout <= 0:
                return False
            latch = _Latch(short)
            for obj in missing:
                if obj.waiters is None:
                    obj.waiters = []
                obj.waiters.append(latch)
        if latch.event.wait(wait_seconds(timeout)):
            if not self._started:
                raise errors.NotInitialized("ray.shutdown() was called while this call was waiting")
            return True
        with self._lock:
            for obj in missing:
                if obj.waiters and latch in obj.waiters:
                    obj.waiters.remove(latch)
            return latch.remaining <= 0

    def _get_serialized(self, object_ids, timeout):
        if not self._wait_ready(object_ids, len(object_ids), timeout):
            raise errors.GetTimeout(f"Get timed out: some object(s) not ready after {timeout} s.")
        out = []
        with self._lock:
            for oid in object_ids:
                obj = self._objects.get(oid)
                if obj is None:
                    raise errors.ObjectFreed(oid)
                out.append(obj)
        return out

    def get(self, object_ids, timeout):
        values = []
        for obj in self._get_serialized(object_ids, timeout):
            value = serialization.loads(obj.data)
            if obj.is_error:
                raise value
            values.append(value)
        return values

    def wait(self, object_ids, num_returns, timeout):
        self._wait_ready(object_ids, num_returns, timeout)
        ready, not_ready = [], []
        with self._lock:
            for oid in object_ids:
                obj = self._objects.get(oid)
                if (obj is None or obj.ready) and len(ready) < num_returns:
                    ready.append(oid)
                else:
                    not_ready.append(oid)
        return ready, not_ready

    # ================================================================== tasks
    def _register_function(self, key, function=None, blob=None):
        if key not in self._functions:
            self._functions[key] = blob if blob is not None else serialization.dumps_plain(function)

    @staticmethod
    def _deps_of(args, kwargs):
        deps = [a.object_id for a in args if type(a) is ArgRef]
        deps.extend(v.object_id for v in kwargs.values() if type(v) is ArgRef)
        return deps

    @staticmethod
    def _dumps_args(args, kwargs):
        """Serialized arguments and the ids of the actors whose handles they carry."""
        carried = []
        token = _carried_handles.set(carried)
        try:
            return serialization.dumps((args, kwargs)), tuple(carried)
        finally:
            _carried_handles.reset(token)

    def submit_task(self, function, function_key, args, kwargs, options):
        self._register_function(function_key, function)
        ser, carried = self._dumps_args(args, kwargs)
        return self._submit(function_key, ser, self._deps_of(args, kwargs), options, carried)

    def _check_deps_exist(self, deps):
        for oid in deps:
            if oid not in self._objects:
                raise errors.ObjectFreed(oid)  # e.g. a ref from before ray.shutdown()

    def _submit(self, key, args_ser, deps, options, carried=()):
        self._check_started()
        self._check_deps_exist(deps)
        task_id = self._ids.task()
        return_ids = self._ids.returns(task_id, options.num_returns or 1)
        units = self.node.request_units(options.resources)
        task = _Task(task_id, key, args_ser, deps, options, return_ids, units,
                     options.name or "task")
        owned = 1 if options.num_returns else 0  # the caller's reference to each return
        with self._lock:
            for oid in return_ids:
                obj = self._new_object(oid, task)
                obj.refs = owned
            self._carry(task, carried)
            self._tasks[task_id] = task
            self._hold_deps(task, self._make_runnable)
        return return_ids if options.num_returns else []

    def _hold_deps(self, record, on_ready):
        """Count the record's unresolved dependencies; ``on_ready(record)`` when all sealed."""
        record.unresolved = 0
        for oid in record.deps:
            obj = self._objects.get(oid)
            if obj is None:
                continue
            obj.refs += 1
            if not obj.ready:
                record.unresolved += 1
                if obj.waiters is None:
                    obj.waiters = []
                obj.waiters.append(lambda r=record: self._dep_sealed(r, on_ready))
        if record.unresolved == 0:
            on_ready(record)

    def _dep_sealed(self, record, on_ready):
        record.unresolved -= 1
        if record.unresolved == 0:
            on_ready(record)

    def _release_deps(self, record):
        for oid in record.deps:
            obj = self._objects.get(oid)
            if obj is not None:
                obj.refs -= 1
                self._free_if_unused(oid, obj)

    def _failed_dep(self, record):
        """The error data of the first dependency that failed, or None."""
        for oid in record.deps:
            obj = self._objects.get(oid)
            if obj is not None and obj.is_error:
                return obj.data
        return None

    def _make_runnable(self, task):
        if task.state != "PENDING":
            return
        failed = self._failed_dep(task)
        if failed is not None:
            self._finish_task(task, [failed] * len(task.return_ids), True)
            return
        if not self.node.feasible(task.units):
            self._warn_infeasible(task.name, task.options.resources)
        shape = tuple(sorted(task.units.items()))
        runnable = self._ready.get(shape)
        if runnable is None:
            runnable = self._ready[shape] = collections.deque()
        runnable.append(task)
        task.state = "QUEUED"
        self._dispatch()

    def _warn_infeasible(self, name, request):
        key = tuple(sorted(request.items()))
        if key in self._warned_infeasible:
            return
        self._warned_infeasible.add(key)
        sys.stderr.write(
            f"ray-adapter: warning: the task or actor {name!r} requests {dict(request)}, which no "
            f"node can satisfy (cluster resources: {self.node.total_dict()}); it stays pending "
            "until such resources exist, as in Ray.\n")

    def _dispatch(self):
        """Start every queued task whose resources are free (called with the lock held)."""
        if not self._started:
            return
        for shape, runnable in list(self._ready.items()):
            while runnable:
                task = runnable[0]
                if task.state != "QUEUED":
                    runnable.popleft()
                    continue
                if not self.node.fits(task.units):
                    break
                runnable.popleft()
                self._start_task(task)
            if not runnable:
                del self._ready[shape]

    def _start_task(self, task):
        try:
            worker = self._take_worker()
        except Exception as exc:  # could not start a worker process (EMFILE, bad env, ...)
            self._finish_task(task, [self._error_data(errors.WorkerDied(
                f"Could not start a worker process for task {task.name!r}: {exc!r}"))], True)
            return
        task.grant = self.node.acquire(task.units)
        task.worker, task.state = worker, "RUNNING"
        worker.task = task
        buffers = []
        args = wire.pack(task.args, buffers)
        deps = {oid: wire.pack(self._objects[oid].data, buffers) for oid in task.deps if oid in self._objects}
        blob = None
        if task.key not in worker.known_keys:
            blob = self._functions[task.key]
            worker.known_keys.add(task.key)
        env = dict((task.options.runtime_env or {}).get("env_vars") or {})
        env.update(_device_env(task.grant))
        try:
            worker.channel.send(("task", task.task_id, task.key, blob, args, deps,
                                 task.options.num_returns or 1, task.name, env,
                                 self.node.amounts(task.units), task.grant.get("GPU", [])),
                                buffers)
        except OSError:
            pass  # the worker died; its reader reports the exit and the task is retried

    def _on_done(self, worker, message, buffers):
        _, task_id, kind, results = message
        datas = [wire.unpack(p, buffers) for p in results]
        with self._lock:
            actor = worker.actor
            if actor is not None:
                task = actor.inflight.pop(task_id, None)
                if task is not None:
                    self._release_deps(task)
                    self._uncarry(task)
                    for oid, data in zip(task.return_ids, datas):
                        self._seal(oid, data, kind == "err")
                    if actor.out_of_scope:
                        self._end_if_out_of_scope(actor)
                return
            task = worker.task
            if task is None or task.task_id != task_id:
                return
            self._release_task_units(worker, task)
            calls = worker.calls[task.key] = worker.calls.get(task.key, 0) + 1
            if task.options.max_calls and calls >= task.options.max_calls:
                worker.task = None
                self._retire(worker)  # max_calls reached: a fresh worker replaces it
            else:
                self._return_worker(worker)
            if kind == "err" and self._should_retry_exception(task, datas[0]):
                task.retries_left -= 1 if task.retries_left > 0 else 0
                task.state = "PENDING"
                task.worker = None
                self._make_runnable(task)
                return
            self._finish_task(task, datas, kind == "err")
            self._dispatch()

    def _release_task_units(self, worker, task):
        units = task.units
        if worker.blocked:  # its CPUs were lent back while it waited in get
            units = {k: v for k, v in units.items() if k != "CPU"}
            worker.blocked = 0
        self.node.release(units, task.grant)

    def _should_retry_exception(self, task, data):
        spec = task.options.retry_exceptions
        if not spec or task.retries_left == 0 or task.cancelled:
            return False
        err = serialization.loads(data)
        if not isinstance(err, errors.TaskFailed) or err.cause is None:
            return spec is True
        if spec is True:
            return True
        return isinstance(err.cause, tuple(spec))

    def _finish_task(self, task, datas, is_error):
        task.state = "FINISHED"
        self._tasks.pop(task.task_id, None)
        self._release_deps(task)
        self._uncarry(task)
        if len(datas) < len(task.return_ids):
            datas = list(datas) + [datas[-1]] * (len(task.return_ids) - len(datas))
        for oid, data in zip(task.return_ids, datas):
            self._seal(oid, data, is_error)

    def cancel(self, object_id, force, recursive):
        with self._lock:
            obj = self._objects.get(object_id)
            task = obj.task if obj is not None else None
            if task is None or task.state == "FINISHED":
                return
            task.cancelled = True
            if task.actor is not None:
                if task.state == "PENDING":
                    try:
                        task.actor.pending.remove(task)
                    except ValueError:
                        pass
                    self._finish_task(task, [self._error_data(errors.TaskCancelled(task.task_id))], True)
                elif task.actor.worker is not None:
                    self._send(task.actor.worker, ("cancel", task.task_id, False))
                return
            if task.state in ("PENDING", "QUEUED"):
                task.state = "CANCELLED"
                self._finish_task(task, [self._error_data(errors.TaskCancelled(task.task_id))], True)
            elif task.state == "RUNNING" and task.worker is not None:
                self._send(task.worker, ("cancel", task.task_id, bool(force)))

    def _send(self, worker, message, buffers=()):
        try:
            worker.channel.send(message, buffers)
        except OSError:
            pass

    # ================================================================== worker exit
    def _on_worker_exit(self, worker):
        with self._lock:
            worker.dead = True
            if worker in self._workers:
                self._workers.remove(worker)
            if worker in self._idle:
                self._idle.remove(worker)
            if not self._started:
                return
            task = worker.task
            if task is not None and task.state == "RUNNING":
                self._release_task_units(worker, task)
                worker.task = None
                if task.cancelled:
                    self._finish_task(task, [self._error_data(errors.TaskCancelled(task.task_id))], True)
                elif task.retries_left != 0:
                    if task.retries_left > 0:
                        task.retries_left -= 1
                    task.state = "PENDING"
                    self._make_runnable(task)
                else:
                    msg = (f"The worker running task {task.name!r} died unexpectedly (pid={worker.pid}, "
                           f"exit code {worker.proc.returncode}); no retries were left "
                           f"(max_retries={task.options.max_retries}).")
                    self._finish_task(task, [self._error_data(errors.WorkerDied(msg))], True)
            if worker.actor is not None:
                self._on_actor_process_exit(worker.actor, worker)
            self._borrow(worker, list(worker.borrowed), -1)  # its handles died with it
            self._dispatch()

    # ================================================================== actors
    def create_actor(self, cls, class_key, args, kwargs, options):
        self._register_function(class_key, cls)
        ser, carried = self._dumps_args(args, kwargs)
        return self._create_actor(class_key, ser, self._deps_of(args, kwargs), options, carried)

    def _create_actor(self, key, args_ser, deps, options, carried=()):
        self._check_started()
        self._check_deps_exist(deps)
        with self._lock:
            namespace = options.namespace if options.namespace is not None else self.namespace
            if options.name:
                existing = self._names.get((namespace, options.name))
                if existing is not None:
                    if options.get_if_exists:
                        return self._actor_info(self._actors[existing])
                    raise errors.ActorNameTaken(options.name, namespace)
            actor_id = self._ids.actor()
            actor = _Actor(actor_id, key, args_ser, deps, options, self.node.request_units(options.resources))
            actor.options.namespace = namespace
            self._actors[actor_id] = actor
            self._carry(actor, carried)  # until its constructor ran (then the actor borrows)
            if options.name:
                self._names[(namespace, options.name)] = actor_id
            self._hold_deps(actor, self._schedule_actor)
            return self._actor_info(actor)

    def _actor_info(self, actor):
        o = actor.options
        return ActorInfo(actor.actor_id, o.name, o.namespace, o.class_name, o.handle_meta, actor.state)

    def _schedule_actor(self, actor):
        if actor.state == "DEAD":
            return
        failed = self._failed_dep(actor)
        if failed is not None:
            self._actor_died(actor, errors.ActorDied(
                actor.actor_id, "The actor's constructor arguments failed.",
                creation_error=serialization.loads(failed), class_name=actor.options.class_name))
            return
        if not self.node.feasible(actor.units):
            self._warn_infeasible(actor.options.class_name, actor.options.resources)
        if not self.node.fits(actor.units):
            self._actor_queue.append(actor)
            return
        try:
            worker = self._take_worker()
        except Exception as exc:  # could not start a worker process
            self._actor_died(actor, errors.ActorDied(
                actor.actor_id, f"Could not start a worker process for the actor: {exc!r}",
                class_name=actor.options.class_name))
            return
        actor.grant = self.node.acquire(actor.units)
        worker.actor = actor
        actor.worker = worker
        buffers = []
        args = wire.pack(actor.args, buffers)
        deps = {oid: wire.pack(self._objects[oid].data, buffers) for oid in actor.deps if oid in self._objects}
        blob = None
        if actor.key not in worker.known_keys:
            blob = self._functions[actor.key]
            worker.known_keys.add(actor.key)
        env = dict(actor.env_vars)
        env.update(_device_env(actor.grant))
        opts = {"name": actor.options.name, "class_name": actor.options.class_name,
                "is_async": actor.options.is_async, "max_concurrency": actor.options.max_concurrency,
                "restart_count": actor.num_restarts, "env_vars": env,
                "resources": self.node.amounts(actor.units),
                "gpu_ids": actor.grant.get("GPU", []), "handle_meta": actor.options.handle_meta,
                "runtime_env": actor.options.runtime_env}
        self._send(worker, ("create_actor", actor.actor_id, actor.key, blob, args, deps, opts), buffers)
        # Calls are pipelined behind the constructor; the worker runs them after it.
        self._flush_actor(actor)

    def _on_actor_ready(self, worker, actor_id):
        with self._lock:
            actor = self._actors.get(actor_id)
            if actor is not None and actor.state != "DEAD":
                actor.state = "ALIVE"
            if actor is not None:
                self._uncarry(actor)

    def _on_actor_failed(self, worker, actor_id, data):
        with self._lock:
            actor = self._actors.get(actor_id)
            if actor is None:
                return
            cause = serialization.loads(data)
            self._actor_died(actor, errors.ActorDied(
                actor_id, "The actor died because of an error raised in its creation task.",
                creation_error=cause, class_name=actor.options.class_name))
            self._retire(worker)
            self._release_actor_resources(actor)

    def submit_actor_task(self, actor_id, method_name, args, kwargs, options):
        ser, carried = self._dumps_args(args, kwargs)
        return self._submit_actor_task(actor_id, method_name, ser, self._deps_of(args, kwargs),
                                       options, carried)

    def _submit_actor_task(self, actor_id, method_name, args_ser, deps, options, carried=()):
        self._check_started()
        self._check_deps_exist(deps)
        task_id = self._ids.task(actor_id)
        return_ids = self._ids.returns(task_id, options.num_returns or 1)
        with self._lock:
            actor = self._actors.get(actor_id)
            task = _Task(task_id, None, args_ser, deps, options, return_ids, {},
                         options.name or method_name, actor=actor, method=method_name)
            task.retries_left = actor.options.max_task_retries if actor is not None else 0
            owned = 1 if options.num_returns else 0
            for oid in return_ids:
                obj = self._new_object(oid, task)
                obj.refs = owned
            if actor is None or actor.state == "DEAD":
                death = actor.death if actor is not None else errors.ActorDied(
                    actor_id, "The actor is not known to this runtime (it may belong to a runtime "
                              "that was shut down).")
                self._finish_task(task, [self._error_data(death)], True)
                return return_ids if options.num_returns else []
            for oid in deps:
                obj = self._objects.get(oid)
                if obj is not None:
                    obj.refs += 1
            self._carry(task, carried)
            actor.pending.append(task)
            self._flush_actor(actor)
        return return_ids if options.num_returns else []

    def _flush_actor(self, actor):
        """Send queued calls in order while the head call's arguments are ready."""
        worker = actor.worker
        if worker is None or actor.state in ("DEAD", "RESTARTING_WAIT"):
            return
        while actor.pending:
            task = actor.pending[0]
            if not self._deps_ready(task):
                self._wait_then_flush(task, actor)
                return
            actor.pending.popleft()
            failed = self._failed_dep(task)
            if failed is not None:
                self._finish_task(task, [failed], True)
                continue
            buffers = []
            args = wire.pack(task.args, buffers)
            deps = {oid: wire.pack(self._objects[oid].data, buffers) for oid in task.deps if oid in self._objects}
            task.state = "RUNNING"
            actor.inflight[task.task_id] = task
            self._send(worker, ("call", task.task_id, actor.actor_id, task.method, args, deps,
                                task.options.num_returns or 1, task.name), buffers)

    def _deps_ready(self, task):
        for oid in task.deps:
            obj = self._objects.get(oid)
            if obj is not None and not obj.ready:
                return False
        return True

    def _wait_then_flush(self, task, actor):
        """The head call's arguments are not ready: flush the actor's queue once they are."""
        if task.waiting_deps:
            return
        task.waiting_deps = True
        for oid in task.deps:
            obj = self._objects.get(oid)
            if obj is not None and not obj.ready:
                if obj.waiters is None:
                    obj.waiters = []

                def wake(t=task, a=actor):
                    if self._deps_ready(t):
                        t.waiting_deps = False
                        self._flush_actor(a)

                obj.waiters.append(wake)

    def _on_actor_process_exit(self, actor, worker):
        if actor.worker is not worker:
            return
        actor.worker = None
        self._release_actor_resources(actor)
        if actor.state == "DEAD":
            return
        if worker.exit_intended:
            self._actor_died(actor, errors.ActorDied(
                actor.actor_id, "The actor is dead because it exited intentionally (exit_actor).",
                class_name=actor.options.class_name))
            return
        inflight = list(actor.inflight.values())
        actor.inflight.clear()
        if actor.restarts_left != 0:
            if actor.restarts_left > 0:
                actor.restarts_left -= 1
            actor.num_restarts += 1
            actor.state = "RESTARTING"
            retry, fail = [], []
            for task in inflight:
                (retry if task.retries_left != 0 else fail).append(task)
            for task in fail:
                self._finish_task(task, [self._error_data(self._crash_error(actor, worker))], True)
            for task in reversed(retry):
                if task.retries_left > 0:
                    task.retries_left -= 1
                task.state = "PENDING"
                actor.pending.appendleft(task)
            self._schedule_actor(actor)
            return
        self._actor_died(actor, self._crash_error(actor, worker), inflight)

    def _crash_error(self, actor, worker):
        return errors.ActorDied(
            actor.actor_id,
            f"The actor is dead because its worker process has died (pid={worker.pid}, exit code "
            f"{worker.proc.returncode}).", class_name=actor.options.class_name)

    def _release_actor_resources(self, actor):
        if actor.grant is not None:
            self.node.release(actor.units, actor.grant)
            actor.grant = None
            self._retry_waiting_actors()
            self._dispatch()

    def _retry_waiting_actors(self):
        queue = self._actor_queue
        while queue:
            actor = queue[0]
            if actor.state == "DEAD":
                queue.popleft()
                continue
            if not self.node.fits(actor.units):
                return
            queue.popleft()
            self._schedule_actor(actor)

    def _actor_died(self, actor, death, inflight=()):
        actor.state = "DEAD"
        actor.death = death
        self._uncarry(actor)
        o = actor.options
        if o.name and self._names.get((o.namespace, o.name)) == actor.actor_id:
            del self._names[(o.namespace, o.name)]
        data = self._error_data(death)
        pending = list(inflight) + list(actor.inflight.values()) + list(actor.pending)
        actor.inflight.clear()
        actor.pending.clear()
        for task in pending:
            self._finish_task(task, [data], True)

    def add_actor_handle(self, actor_id):
        with self._lock:
            actor = self._actors.get(actor_id)
            if actor is not None:
                actor.handles += 1

    def remove_actor_handle(self, actor_id):
        self._releases.put(self._drop_actor_handle, actor_id)

    def _drop_actor_handle(self, actor_id):
        actor = self._actors.get(actor_id)
        if actor is not None:
            actor.handles -= 1
            self._check_scope(actor)

    def _check_scope(self, actor):
        """End a non-detached actor once no handle is left anywhere (lock held), as Ray does."""
        if (actor.handles > 0 or actor.borrowers > 0 or actor.in_transit > 0 or actor.escaped
                or actor.options.detached or actor.state == "DEAD"):
            return
        actor.out_of_scope = True
        self._end_if_out_of_scope(actor)

    def _carry(self, record, carried):
        record.carried = carried
        for actor_id in carried:
            actor = self._actors.get(actor_id)
            if actor is not None:
                actor.in_transit += 1

    def _uncarry(self, record):
        carried, record.carried = record.carried, ()
        for actor_id in carried:
            actor = self._actors.get(actor_id)
            if actor is not None:
                actor.in_transit -= 1
                self._check_scope(actor)

    def _borrow(self, worker, actor_ids, delta):
        for actor_id in actor_ids:
            actor = self._actors.get(actor_id)
            if actor is None:
                continue
            if delta > 0 and actor_id not in worker.borrowed:
                worker.borrowed.add(actor_id)
                actor.borrowers += 1
            elif delta < 0 and actor_id in worker.borrowed:
                worker.borrowed.discard(actor_id)
                actor.borrowers -= 1
                self._check_scope(actor)

    def actor_handle_escaped(self, actor_id):
        carried = _carried_handles.get()
        if carried is not None:  # pickled into a call's arguments: tracked (see _carry)
            carried.append(actor_id)
            return
        with self._lock:
            actor = self._actors.get(actor_id)
            if actor is not None:
                actor.escaped = True

    def _end_if_out_of_scope(self, actor):
        """End an actor nobody can call any more, once the calls it already has are done."""
        if not actor.out_of_scope or actor.inflight or actor.pending or actor.state == "DEAD":
            return
        worker = actor.worker
        self._actor_died(actor, errors.ActorDied(
            actor.actor_id, "The actor is dead because all references to the actor were removed.",
            class_name=actor.options.class_name))
        self._actors.pop(actor.actor_id, None)
        if worker is not None:
            worker.actor = None
            actor.worker = None
            self._release_actor_resources(actor)
            self._retire(worker)

    def kill_actor(self, actor_id, no_restart):
        with self._lock:
            actor = self._actors.get(actor_id)
            if actor is None or actor.state == "DEAD":
                return
            worker = actor.worker
            if no_restart:
                self._actor_died(actor, errors.ActorDied(
                    actor_id, "The actor is dead because it was killed by `ray.kill`.",
                    class_name=actor.options.class_name))
                if worker is not None:
                    worker.actor = None
                    actor.worker = None
                    self._release_actor_resources(actor)
                    self._retire(worker)
        if worker is not None:
            try:
                os.kill(worker.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def get_named_actor(self, name, namespace):
        with self._lock:
            ns = namespace if namespace is not None else self.namespace
            actor_id = self._names.get((ns, name))
            if actor_id is None:
                raise errors.ActorNotFound(name, ns)
            return self._actor_info(self._actors[actor_id])

    def list_named_actors(self, all_namespaces):
        with self._lock:
            return [{"name": name, "namespace": ns} for (ns, name) in self._names
                    if all_namespaces or ns == self.namespace]

    def exit_current_actor(self):
        raise RuntimeError("exit_actor() can only be called inside an actor")

    # ================================================================== requests from workers
    def _on_request(self, worker, message, buffers):
        _, req_id, method, packed = message
        args = serialization.loads(wire.unpack(packed, buffers))
        if method in ("get", "wait"):
            # Daemon: a task blocked in a nested get must not keep the driver from exiting.
            threading.Thread(target=self._answer, args=(worker, req_id, method, args),
                             daemon=True, name="ray-adapter-req").start()
        else:
            self._answer(worker, req_id, method, args)

    def _answer(self, worker, req_id, method, args):
        try:
            ok, value = True, getattr(self, "_rpc_" + method)(worker, *args)
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the caller
            ok, value = False, exc
        buffers = []
        try:
            payload = wire.pack(serialization.dumps(value), buffers)
        except Exception as exc:  # noqa: BLE001
            ok, buffers = False, []
            payload = wire.pack(serialization.dumps(RuntimeError(f"unserializable reply: {exc!r}")), buffers)
        self._send(worker, ("reply", req_id, ok, payload), buffers)

    def _rpc_put(self, worker, ser):
        return self._put_serialized(ser)  # owned by the worker until it sends "decref"

    def _rpc_get(self, worker, object_ids, timeout):
        self._block(worker)
        try:
            objs = self._get_serialized(object_ids, timeout)
        finally:
            self._unblock(worker)
        for obj in objs:
            if obj.is_error:
                raise serialization.loads(obj.data)
        return [obj.data for obj in objs]

    def _rpc_wait(self, worker, object_ids, num_returns, timeout):
        self._block(worker)
        try:
            return self.wait(object_ids, num_returns, timeout)
        finally:
            self._unblock(worker)

    def _block(self, worker):
        """A task blocked in get/wait lends its CPUs back, so nested tasks cannot deadlock."""
        with self._lock:
            task = worker.task
            if task is not None and worker.actor is None:
                worker.blocked += 1
                if worker.blocked == 1:
                    self.node.release({k: v for k, v in task.units.items() if k == "CPU"}, None)
                    self._dispatch()

    def _unblock(self, worker):
        with self._lock:
            task = worker.task
            if task is not None and worker.actor is None and worker.blocked:
                worker.blocked -= 1
                if worker.blocked == 0:
                    cpu = {k: v for k, v in task.units.items() if k == "CPU"}
                    self.node.acquire(cpu)  # may oversubscribe briefly, as Ray does

    def _rpc_submit_task(self, worker, key, blob, args_ser, options):
        with self._lock:
            self._register_function(key, blob=blob) if blob is not None else None
        args, kwargs = serialization.loads(args_ser)
        return self._submit(key, args_ser, self._deps_of(args, kwargs), options)

    def _rpc_create_actor(self, worker, key, blob, args_ser, options):
        with self._lock:
            self._register_function(key, blob=blob) if blob is not None else None
        args, kwargs = serialization.loads(args_ser)
        return self._create_actor(key, args_ser, self._deps_of(args, kwargs), options)

    def _rpc_submit_actor_task(self, worker, actor_id, method, args_ser, options):
        args, kwargs = serialization.loads(args_ser)
        return self._submit_actor_task(actor_id, method, args_ser, self._deps_of(args, kwargs), options)

    def _rpc_cancel(self, worker, object_id, force, recursive):
        return self.cancel(object_id, force, recursive)

    def _rpc_kill_actor(self, worker, actor_id, no_restart):
        return self.kill_actor(actor_id, no_restart)

    def _rpc_get_named_actor(self, worker, name, namespace):
        return self.get_named_actor(name, namespace)

    def _rpc_list_named_actors(self, worker, all_namespaces):
        return self.list_named_actors(all_namespaces)

    def _rpc_nodes(self, worker):
        return self.nodes()

    def _rpc_cluster_resources(self, worker):
        return self.cluster_resources()

    def _rpc_available_resources(self, worker):
        return self.available_resources()

    # ================================================================== cluster state
    def nodes(self):
        with self._lock:
            return [{
                "node_id": self.node_id.hex(), "alive": True, "address": NODE_IP,
                "hostname": socket.gethostname(), "resources_total": self.node.total_dict(),
                "labels": {}, "start_time": self.start_time,
            }]

    def cluster_resources(self):
        with self._lock:
            return self.node.total_dict()

    def available_resources(self):
        with self._lock:
            return self.node.available_dict()

    def context(self):
        return {
            "job_id": self.job_id, "node_id": self.node_id, "task_id": self.driver_task_id,
            "actor_id": None, "namespace": self.namespace, "worker_mode": "driver",
            "worker_id": self.driver_worker_id, "assigned_resources": {}, "gpu_ids": [], "task_name": "",
            "actor_name": None, "was_restarted": False, "actor_handle_meta": None,
            "runtime_env": self.job_runtime_env, "node_ip_address": NODE_IP,
        }

    def _check_started(self):
        if not self._started:
            raise errors.NotInitialized("the embedded runtime has been shut down")


def _device_env(grant):
    """Device-visibility variables for a grant, unless the user asked Ray not to set them."""
    env = {}
    if not grant:
        return env
    if "GPU" in grant and not os.environ.get("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"):
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in grant["GPU"])
    if "NPU" in grant and not os.environ.get("RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"):
        env["ASCEND_RT_VISIBLE_DEVICES"] = ",".join(str(i) for i in grant["NPU"])
    return env


def _driver_code_path():
    """PYTHONPATH for workers: the driver's own code folders (its script's folder, the cwd,
    PYTHONPATH and folders added to sys.path), so workers import the driver's modules as Ray's
    do. Interpreter folders (stdlib, site-packages) are left out: the worker has them already."""
    import site
    import sysconfig

    interpreter = {os.path.abspath(p) for p in sysconfig.get_paths().values()}
    interpreter.update(os.path.abspath(p) for p in getattr(site, "getsitepackages", lambda: [])())
    interpreter.add(os.path.abspath(site.getusersitepackages()))
    entries = []
    for p in sys.path:
        path = os.path.abspath(p or os.getcwd())
        if path in interpreter or path.endswith(".zip") or not os.path.isdir(path):
            continue
        entries.append(path)
    return os.pathsep.join(dict.fromkeys(entries))


def _default_memory():
    try:
        import psutil

        return int(psutil.virtual_memory().available * 0.7)
    except Exception:  # psutil missing or unreadable /proc
        return 8 * 1024 ** 3
