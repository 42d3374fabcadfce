"""Worker process of the embedded backend.

Started by the driver as ``python -m ray_adapter.core.embedded.worker FD`` with one end of a
socket pair. A reader thread takes every message from the driver; tasks and calls of a
synchronous actor run in the main thread (so cancellation can interrupt them), threaded actors
in a thread pool, async actors on an asyncio loop. Calls the user's code makes into ``ray``
(nested tasks, ``ray.get`` ...) go to the driver through :class:`WorkerCore`.

The worker exits as soon as the driver's end of the socket closes, so a driver that dies for
any reason leaves no worker behind.
"""
import asyncio
import contextvars
import inspect
import os
import queue
import signal
import socket
import sys
import threading
import traceback

from ray_adapter.core import errors, serialization, shm
from ray_adapter.core.execution import NODE_IP, apply_env, restore_env, split_returns, task_failure
from ray_adapter.core.embedded import wire
from ray_adapter.core.embedded.channel import Channel, ChannelClosed
from ray_adapter.core.interface import ArgRef, RuntimeCore

# (task_id, task_name, actor_id) of the call running in this thread / coroutine.
_current_call = contextvars.ContextVar("ray_adapter_current_call", default=(None, "", None))


class _Cancelled(BaseException):
    """Raised inside a running task by a non-force cancel (BaseException: user ``except
    Exception`` blocks do not swallow it, as with Ray's KeyboardInterrupt-based cancel)."""


class WorkerCore(RuntimeCore):
    """The runtime core inside a worker: every call is a request to the driver."""

    backend_name = "embedded"

    def __init__(self, worker):
        self._worker = worker
        self._pending = {}
        self._lock = threading.Lock()
        self._next = 0
        self._shipped_functions = set()
        self._ref_events = queue.SimpleQueue()
        self._handle_lock = threading.Lock()
        self._handle_counts = {}
        threading.Thread(target=self.ref_loop, daemon=True, name="ray-adapter-refs").start()

    # -- request/reply -----------------------------------------------------------------------
    def _request(self, method, *args):
        with self._lock:
            self._next += 1
            req_id = self._next
            slot = self._pending[req_id] = [threading.Event(), None, None]
        buffers = []
        payload = wire.pack(serialization.dumps(args), buffers)
        self._worker.channel.send(("req", req_id, method, payload), buffers)
        slot[0].wait()
        with self._lock:
            del self._pending[req_id]
        ok, value = slot[1], slot[2]
        if not ok:
            raise value
        return value

    def on_reply(self, req_id, ok, packed, buffers):
        slot = self._pending.get(req_id)
        if slot is None:
            return
        value = serialization.loads(wire.unpack(packed, buffers))
        slot[1], slot[2] = ok, value
        slot[0].set()

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self, options):
        raise RuntimeError("a worker process does not start a runtime")

    def shutdown(self):
        return None

    # -- objects -----------------------------------------------------------------------------
    def put(self, value):
        return self._own([self._request("put", serialization.dumps(value))])[0]

    def get(self, object_ids, timeout):
        packed_values = self._request("get", list(object_ids), timeout)
        return [serialization.loads(v) for v in packed_values]

    def wait(self, object_ids, num_returns, timeout):
        return self._request("wait", list(object_ids), num_returns, timeout)

    # Reference counting of the objects this worker created (its puts and submissions): the
    # driver frees one when the worker drops its last ObjectRef to it. Refs the worker borrowed
    # (received in arguments or values) were pinned by the driver when they were serialized.
    # Events come from __init__/__del__/__reduce__ in any thread, so they are only queued
    # here (SimpleQueue.put is reentrant) and applied by one thread.

    def _own(self, object_ids):
        self._ref_events.put(("own", object_ids))
        return object_ids

    def add_local_reference(self, object_id):
        self._ref_events.put(("+", object_id))

    def remove_local_reference(self, object_id):
        self._ref_events.put(("-", object_id))

    def object_escaped(self, object_id):
        self._ref_events.put(("pin", object_id))

    def ref_loop(self):
        counts, owned = {}, set()
        while True:
            event = self._ref_events.get()
            out = []  # ("decref" | "pin", oid) in the order they happened
            while event is not None:
                kind, target = event
                if kind == "own":
                    for oid in target:
                        counts[oid] = counts.get(oid, 0) + 1
                        owned.add(oid)
                elif kind == "+":
                    counts[target] = counts.get(target, 0) + 1
                elif kind == "-":
                    left = counts.get(target, 0) - 1
                    if left > 0:
                        counts[target] = left
                    else:
                        counts.pop(target, None)
                        if target in owned:
                            owned.discard(target)
                            out.append(("decref", target))
                elif kind == "pin" and target in owned:
                    out.append(("pin", target))
                elif kind == "h-" and self._handle_dropped(target):
                    out.append(("unborrow", target))
                elif kind == "hpin":
                    out.append(("pin_actor", target))
                try:
                    event = self._ref_events.get_nowait()
                except queue.Empty:
                    event = None
            for kind, oid in out:
                try:
                    self._worker.channel.send((kind, [oid]))
                except OSError:
                    return

    # -- tasks and actors --------------------------------------------------------------------
    def _function_blob(self, key, function):
        if key in self._shipped_functions:
            return None
        self._shipped_functions.add(key)
        return serialization.dumps_plain(function)

    def submit_task(self, function, function_key, args, kwargs, options):
        blob = self._function_blob(function_key, function)
        return self._own(self._request("submit_task", function_key, blob,
                                       serialization.dumps((args, kwargs)), options))

    def cancel(self, object_id, force, recursive):
        return self._request("cancel", object_id, force, recursive)

    def create_actor(self, cls, class_key, args, kwargs, options):
        blob = self._function_blob(class_key, cls)
        return self._request("create_actor", class_key, blob, serialization.dumps((args, kwargs)), options)

    def submit_actor_task(self, actor_id, method_name, args, kwargs, options):
        return self._own(self._request("submit_actor_task", actor_id, method_name,
                                       serialization.dumps((args, kwargs)), options))

    def kill_actor(self, actor_id, no_restart):
        return self._request("kill_actor", actor_id, no_restart)

    # Actor handles: the first handle to an actor in this process registers a borrow with the
    # driver (sent at once, so it precedes the reply of the call that carried the handle); the
    # drop of the last one returns it. A handle this worker pickles onward pins its actor.

    def add_actor_handle(self, actor_id):
        with self._handle_lock:
            self._handle_counts[actor_id] = self._handle_counts.get(actor_id, 0) + 1
            first = self._handle_counts[actor_id] == 1
        if first:
            self._worker.channel.send(("borrow", [actor_id]))

    def remove_actor_handle(self, actor_id):
        self._ref_events.put(("h-", actor_id))  # from a finalizer: queued, not sent here

    def actor_handle_escaped(self, actor_id):
        self._ref_events.put(("hpin", actor_id))

    def _handle_dropped(self, actor_id):
        with self._handle_lock:
            left = self._handle_counts.get(actor_id, 0) - 1
            if left > 0:
                self._handle_counts[actor_id] = left
                return False
            self._handle_counts.pop(actor_id, None)
            return True

    def get_named_actor(self, name, namespace):
        return self._request("get_named_actor", name, namespace)

    def list_named_actors(self, all_namespaces):
        return self._request("list_named_actors", all_namespaces)

    def exit_current_actor(self):
        actor_id = _current_call.get()[2]
        if actor_id is None:
            raise RuntimeError("exit_actor() is called outside an actor")
        self._worker.exit_actor_after_call = True
        raise SystemExit(0)

    # -- cluster state -----------------------------------------------------------------------
    def nodes(self):
        return self._request("nodes")

    def cluster_resources(self):
        return self._request("cluster_resources")

    def available_resources(self):
        return self._request("available_resources")

    def context(self):
        task_id, task_name, actor_id = _current_call.get()
        w = self._worker
        return {
            "job_id": w.job_id,
            "node_id": w.node_id,
            "task_id": task_id,
            "actor_id": actor_id if actor_id is not None else w.actor_id,
            "namespace": w.namespace,
            "worker_mode": "worker",
            "worker_id": w.worker_id,
            "assigned_resources": dict(w.assigned_resources),
            "gpu_ids": list(w.gpu_ids),
            "task_name": task_name,
            "actor_name": w.actor_name,
            "was_restarted": w.restart_count > 0,
            "actor_handle_meta": w.actor_handle_meta,
            "runtime_env": w.runtime_env,
            "node_ip_address": NODE_IP,
        }


class _PrefixWriter:
    """Prefixes each line written to stdout/stderr with ``(name pid=N)``, as Ray's log
    forwarding does, and writes straight to the driver's inherited stream."""

    def __init__(self, stream, worker):
        self._stream = stream
        self._worker = worker
        self._at_line_start = True
        self._lock = threading.Lock()

    def write(self, text):
        if not text:
            return 0
        name = self._worker.actor_class_name or _current_call.get()[1] or "worker"
        prefix = f"({name} pid={os.getpid()}) "
        with self._lock:
            out = []
            for piece in text.splitlines(keepends=True):
                if self._at_line_start:
                    out.append(prefix)
                out.append(piece)
                self._at_line_start = piece.endswith("\n")
            try:
                self._stream.write("".join(out))
                if "\n" in text:
                    self._stream.flush()
            except (OSError, ValueError):  # the driver's stdout is gone (e.g. `| head`)
                pass
        return len(text)

    def flush(self):
        try:
            self._stream.flush()
        except (OSError, ValueError):
            pass

    def __getattr__(self, name):
        return getattr(self._stream, name)


class Worker:
    """State and main loop of one worker process."""

    def __init__(self, fd):
        self.channel = Channel(socket.socket(fileno=fd))
        self.core = WorkerCore(self)
        self.functions = {}
        self.exec_queue = queue.SimpleQueue()
        self.job_id = self.node_id = self.worker_id = None
        self.namespace = None
        self.actor_id = None
        self.actor_name = None
        self.actor_class_name = None
        self.actor_handle_meta = None
        self.runtime_env = None
        self.actor_instance = None
        self.actor_executor = None
        self.actor_loop = None
        self.actor_ready = threading.Event()
        self.actor_ready_async = None
        self.restart_count = 0
        self.assigned_resources = {}
        self.gpu_ids = []
        self.running_task = None  # the task or call running in the main thread
        self.cancel_requested = None
        self.cancelled = set()  # cancelled before they started
        self.async_calls = {}  # task id -> future of a call on the async actor loop
        self.exit_actor_after_call = False

    # -- driver messages ---------------------------------------------------------------------
    def reader(self):
        try:
            while True:
                message, buffers = self.channel.recv()
                kind = message[0]
                if kind == "reply":
                    self.core.on_reply(message[1], message[2], message[3], buffers)
                elif kind == "call" and self.actor_executor is not None:
                    self.actor_executor(message, buffers)
                elif kind == "create_actor":
                    # Route calls to a concurrent actor's executor from now on; they wait
                    # there until the constructor (run by the main thread) has finished.
                    self.actor_executor = self._make_actor_executor(message[6])
                    self.exec_queue.put((message, buffers))
                elif kind == "cancel":
                    self.on_cancel(message[1], message[2])
                elif kind == "exit":
                    self.exec_queue.put(None)
                    return
                else:
                    self.exec_queue.put((message, buffers))
                del message, buffers  # do not keep the last payload alive until the next one
        except ChannelClosed:
            pass
        except BaseException:  # pragma: no cover - the reader must never die silently
            traceback.print_exc()
        # The driver is gone: nobody can receive results any more.
        _flush_std()
        os._exit(1)

    def on_cancel(self, task_id, force):
        future = self.async_calls.get(task_id)
        if future is not None:  # a call running on an async actor's loop
            future.cancel()
            return
        if self.running_task != task_id:
            # Queued here, or running on a threaded actor's pool (a thread cannot be
            # interrupted): either way the call is answered as cancelled.
            self.cancelled.add(task_id)
            return
        if force:
            _flush_std()
            os._exit(1)
        self.cancel_requested = task_id
        signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)

    def _on_sigusr1(self, signum, frame):
        if self.cancel_requested is not None and self.cancel_requested == self.running_task:
            self.cancel_requested = None
            raise _Cancelled()

    # -- main loop ---------------------------------------------------------------------------
    def run(self):
        signal.signal(signal.SIGUSR1, self._on_sigusr1)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        threading.Thread(target=self.reader, name="ray-adapter-reader", daemon=True).start()
        while True:
            item = self.exec_queue.get()
            if item is None:
                break
            message, buffers = item
            kind = message[0]
            if kind == "init":
                self.on_init(message)
            elif kind == "task":
                self.run_task(message, buffers)
            elif kind == "create_actor":
                self.create_actor(message, buffers)
            elif kind == "call":
                self.run_actor_call(message, buffers)
        _flush_std()

    def on_init(self, message):
        _, self.job_id, self.node_id, self.worker_id, self.namespace, log_to_driver = message
        if log_to_driver:
            sys.stdout = _PrefixWriter(sys.stdout, self)
            sys.stderr = _PrefixWriter(sys.stderr, self)

    # -- executing ---------------------------------------------------------------------------
    def load_function(self, key, blob):
        fn = self.functions.get(key)
        if fn is None:
            fn = self.functions[key] = serialization.loads_plain(blob)
        return fn

    @staticmethod
    def resolve_args(packed_args, deps, buffers):
        args, kwargs = serialization.loads(wire.unpack(packed_args, buffers))
        if deps:
            values = {oid: serialization.loads(wire.unpack(p, buffers)) for oid, p in deps.items()}
            args = tuple(values[a.object_id] if type(a) is ArgRef else a for a in args)
            kwargs = {k: values[v.object_id] if type(v) is ArgRef else v for k, v in kwargs.items()}
        return args, kwargs

    def run_task(self, message, buffers):
        (_, task_id, key, blob, packed_args, deps, num_returns, name, env_vars,
         resources, gpu_ids) = message
        if task_id in self.cancelled:
            self.cancelled.discard(task_id)
            if blob is not None:  # the driver sends a function once per worker: keep it
                self.load_function(key, blob)
            self.send_done(task_id, _pack_error(errors.TaskCancelled(task_id), name, num_returns))
            return
        self.assigned_resources, self.gpu_ids = resources, gpu_ids
        saved_env = apply_env(env_vars)
        token = _current_call.set((task_id, name, None))
        self.running_task = task_id
        try:
            try:
                fn = self.load_function(key, blob)
                args, kwargs = self.resolve_args(packed_args, deps, buffers)
                result = fn(*args, **kwargs)
            finally:
                self.running_task = None
                self.cancel_requested = None
            reply = _pack_results(result, num_returns)
        except (_Cancelled, KeyboardInterrupt) as exc:
            # Interrupted while running: Ray reports RayTaskError(TaskCancelledError).
            failure = task_failure(exc, name, None)
            failure.cause = errors.TaskCancelled(task_id)
            reply = _pack_error(failure, name, num_returns)
        except SystemExit:
            # sys.exit() in a task ends its worker, as in Ray: the driver sees the worker die
            # and retries the task (WorkerCrashedError once retries run out).
            _flush_std()
            os._exit(1)
        except BaseException as exc:  # noqa: BLE001 - everything a task raises goes to the caller
            reply = _pack_error(task_failure(exc, name, None), name, num_returns)
        finally:
            _current_call.reset(token)
            restore_env(saved_env)
        self.send_done(task_id, reply)

    def send_done(self, task_id, reply):
        kind, results, bufs = reply
        self.channel.send(("done", task_id, kind, results), bufs)

    def create_actor(self, message, buffers):
        (_, actor_id, key, blob, packed_args, deps, opts) = message
        self.actor_id = actor_id
        self.actor_name = opts.get("name")
        self.actor_class_name = opts["class_name"]
        self.actor_handle_meta = opts.get("handle_meta")
        self.runtime_env = opts.get("runtime_env")
        self.restart_count = opts.get("restart_count", 0)
        self.assigned_resources, self.gpu_ids = opts.get("resources", {}), opts.get("gpu_ids", [])
        apply_env(opts.get("env_vars"))
        token = _current_call.set((None, opts["class_name"] + ".__init__", actor_id))
        try:
            cls = self.load_function(key, blob)
            args, kwargs = self.resolve_args(packed_args, deps, buffers)
            self.actor_instance = cls(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001
            _, results, bufs = _pack_error(task_failure(exc, opts["class_name"] + ".__init__", None), "", 1)
            self.channel.send(("actor_failed", actor_id, results[0]), bufs)
            return
        finally:
            _current_call.reset(token)
        self.actor_ready.set()
        if self.actor_loop is not None:
            self.actor_loop.call_soon_threadsafe(self.actor_ready_async.set)
        self.channel.send(("actor_ready", actor_id))

    def _make_actor_executor(self, opts):
        is_async = opts.get("is_async")
        concurrency = opts.get("max_concurrency")
        if is_async:
            loop = asyncio.new_event_loop()
            limit = asyncio.Semaphore(concurrency or 1000)
            ready = self.actor_ready_async = asyncio.Event()
            threading.Thread(target=loop.run_forever, name="ray-adapter-actor-loop", daemon=True).start()
            self.actor_loop = loop

            async def run(message, buffers):
                await ready.wait()
                async with limit:
                    await self.run_actor_call_async(message, buffers)

            def submit(message, buffers):
                task_id = message[1]
                future = asyncio.run_coroutine_threadsafe(run(message, buffers), loop)
                self.async_calls[task_id] = future
                future.add_done_callback(lambda f, t=task_id, n=message[6]: self._async_call_done(t, n, f))

            return submit
        if concurrency and concurrency > 1:
            from concurrent.futures import ThreadPoolExecutor

            pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="ray-adapter-actor")

            def run_when_ready(message, buffers):
                self.actor_ready.wait()
                self.run_actor_call(message, buffers, in_main_thread=False)

            return lambda message, buffers: pool.submit(run_when_ready, message, buffers)
        return None  # ordered execution in the main thread (the reader queues the calls)

    def _call_target(self, message, buffers):
        (_, task_id, actor_id, method_name, packed_args, deps, num_returns, name) = message
        args, kwargs = self.resolve_args(packed_args, deps, buffers)
        method = getattr(self.actor_instance, method_name)
        return task_id, method, args, kwargs, num_returns, name

    def run_actor_call(self, message, buffers, in_main_thread=True):
        task_id, name, num_returns = message[1], message[7], message[6]
        if task_id in self.cancelled:
            self.cancelled.discard(task_id)
            self._finish_call(task_id, _pack_error(errors.TaskCancelled(task_id), name, num_returns))
            return
        token = _current_call.set((task_id, name, self.actor_id))
        if in_main_thread:  # only the main thread can be interrupted by a cancel
            self.running_task = task_id
        try:
            try:
                _, method, args, kwargs, num_returns, name = self._call_target(message, buffers)
                result = method(*args, **kwargs)
                if inspect.isawaitable(result):  # an async method on a non-async actor
                    result = asyncio.run(_await(result))
            finally:
                if in_main_thread:
                    self.running_task = None
                    self.cancel_requested = None
            reply = _pack_results(result, num_returns)
        except BaseException as exc:  # noqa: BLE001 - everything a method raises goes back
            reply = self._failed_call_reply(exc, task_id, name, num_returns)
        finally:
            _current_call.reset(token)
        if task_id in self.cancelled:  # cancelled while it ran on a pool thread
            self.cancelled.discard(task_id)
            reply = _pack_error(errors.TaskCancelled(task_id), name, num_returns)
        self._finish_call(task_id, reply)

    async def run_actor_call_async(self, message, buffers):
        task_id, name, num_returns = message[1], message[7], message[6]
        token = _current_call.set((task_id, name, self.actor_id))
        try:
            _, method, args, kwargs, num_returns, name = self._call_target(message, buffers)
            result = method(*args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
            reply = _pack_results(result, num_returns)
        except BaseException as exc:  # noqa: BLE001 - everything a method raises goes back
            reply = self._failed_call_reply(exc, task_id, name, num_returns)
        finally:
            _current_call.reset(token)
        self._finish_call(task_id, reply)

    def _async_call_done(self, task_id, num_returns, future):
        self.async_calls.pop(task_id, None)
        if future.cancelled():  # cancelled before its coroutine started: answer it here
            self.send_done(task_id, _pack_error(errors.TaskCancelled(task_id), "", num_returns))

    def _failed_call_reply(self, exc, task_id, name, num_returns):
        """The reply for a method that raised ``exc``."""
        if isinstance(exc, (_Cancelled, asyncio.CancelledError)):
            return _pack_error(errors.TaskCancelled(task_id), name, num_returns)
        if isinstance(exc, SystemExit):
            # exit_actor() or sys.exit(): the actor ends after this call, not restarted, and
            # the call itself reports the actor's death, as in Ray.
            self.exit_actor_after_call = True
            return _pack_error(errors.ActorDied(
                self.actor_id, "The actor is dead because it exited intentionally (exit_actor).",
                class_name=self.actor_class_name), name, num_returns)
        return _pack_error(task_failure(exc, name, self.actor_class_name), name, num_returns)

    def _finish_call(self, task_id, reply):
        self.send_done(task_id, reply)
        if self.exit_actor_after_call:
            self.exit_actor()

    def exit_actor(self):
        """``exit_actor()`` was called: tell the driver it was intended, then leave."""
        self.channel.send(("actor_exit", self.actor_id))
        _flush_std()
        os._exit(0)


async def _await(awaitable):
    return await awaitable


def _pack_results(result, num_returns):
    buffers = []
    packed = [wire.pack(serialization.dumps(v), buffers) for v in split_returns(result, num_returns)]
    return ("ok", packed, buffers)


def _pack_error(core_error, name, num_returns):
    buffers = []
    try:
        ser = serialization.dumps(core_error)
        serialization.loads(ser)  # an exception that pickles may still fail to rebuild
    except Exception:  # the user's exception cannot travel: keep its text
        if isinstance(core_error, errors.TaskFailed):
            core_error = errors.TaskFailed(None, core_error.traceback_str, core_error.function_name,
                                           core_error.pid, core_error.ip, core_error.actor_repr,
                                           core_error.cause_repr)
        ser = serialization.dumps(core_error)
    packed = wire.pack(ser, buffers)
    return ("err", [packed] * max(num_returns, 1), buffers)


def _flush_std():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    fd = int(argv[0])
    # Functions that reference ``ray`` must unpickle here: serve the proxy even if the
    # interpreter skipped .pth files.
    os.environ["RAY_BACKEND"] = "yuanrong"
    from ray_adapter import hook
    from ray_adapter.core import set_current

    hook.install()
    shm.raise_fd_limit()
    worker = Worker(fd)
    set_current(worker.core)
    import ray  # noqa: F401  - warm the proxy so the first task does not pay for it

    worker.run()
    os._exit(0)


if __name__ == "__main__":
    main()
