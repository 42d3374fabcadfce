"""Running user code in a worker: actors (sync, threaded, async), results and failures.

:class:`ActorHost` hosts one actor. Its constructor and the calls of a synchronous actor run in
the worker's main thread, in order; a threaded actor (``max_concurrency > 1``) runs calls on a
pool of that many threads; an async actor on one event loop thread, at most
``max_concurrency`` (default 1000) at once. Calls of concurrent actors wait until the
constructor has finished. Asyncio primitives are made on the loop's own thread (Python 3.9
binds them to the loop current where they are created).
"""
import asyncio
import inspect
import os
import pickle
import sys
import threading

from ray_adapter.core import errors, serialization
from ray_adapter.core.embedded import protocol
from ray_adapter.core.embedded.channel import flush_posted
from ray_adapter.core.embedded.protocol import from_payload, to_payload
from ray_adapter.core.embedded.worker_core import current_call
from ray_adapter.core.execution import apply_env, split_returns, task_failure
from ray_adapter.core.interface import ArgRef

loads_plain = pickle.loads


class Cancelled(BaseException):
    """Raised inside a running task by a non-force cancel (BaseException: user ``except
    Exception`` blocks do not swallow it, as with Ray's KeyboardInterrupt-based cancel)."""


# -- arguments, results, failures --------------------------------------------------------------
def resolve_args(payload, deps, buffers):
    """The call's ``(args, kwargs)``, top-level ref arguments replaced by their values."""
    args, kwargs = serialization.loads(from_payload(payload, buffers))
    if deps:
        values = {d.object_id: serialization.loads(from_payload(d.value, buffers)) for d in deps}
        args = tuple(values[a.object_id] if type(a) is ArgRef else a for a in args)
        if kwargs:
            kwargs = {k: values[v.object_id] if type(v) is ArgRef else v for k, v in kwargs.items()}
    return args, kwargs


def pack_results(result, num_returns):
    """``(ok, payloads, buffers)`` for a call's result (``num_returns`` values)."""
    buffers = []
    try:
        payloads = [to_payload(serialization.dumps(v), buffers) for v in split_returns(result, num_returns)]
    except Exception as exc:  # noqa: BLE001 - a result that cannot be serialized fails the call
        return pack_error(task_failure(exc, "", None))
    return True, payloads, buffers


def pack_error(core_error):
    """``(False, [payload], buffers)`` for a core error (the driver repeats it per return)."""
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
    return False, [to_payload(ser, buffers)], buffers


_retry_specs = {}


def should_retry(exc, blob):
    """Does the task's ``retry_exceptions`` (pickled in ``blob``) name ``exc``?"""
    if not blob or not isinstance(exc, Exception):
        return False
    spec = _retry_specs.get(blob)
    if spec is None:
        spec = _retry_specs[blob] = pickle.loads(blob)
    if spec is True:
        return True
    return bool(spec) and isinstance(exc, tuple(spec))


def flush_std():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


# -- actors --------------------------------------------------------------------------------------
class ActorHost:
    """One actor inside this worker (created by the reader on ``CreateActor``)."""

    def __init__(self, worker, message):
        self.worker = worker
        self.instance = None
        self.ready = threading.Event()
        self.is_async = message.is_async
        limit = message.max_concurrency
        self.concurrent = self.is_async or bool(limit and limit > 1)
        self.loop = None
        self._flush_scheduled = False
        self.async_calls = {}  # task id -> concurrent future of a call on the loop
        self._pool = None
        if self.is_async:
            self.loop = asyncio.new_event_loop()
            threading.Thread(target=self.loop.run_forever, name="ray-adapter-actor-loop", daemon=True).start()
            self._limits = asyncio.run_coroutine_threadsafe(
                _loop_primitives(limit or 1000), self.loop).result()
        elif self.concurrent:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(max_workers=limit, thread_name_prefix="ray-adapter-actor")

    # -- creation (main thread) --------------------------------------------------------------
    def create(self, message, buffers):
        w = self.worker
        w.actor_id, w.actor_name, w.actor_class_name = message.actor_id, message.name, message.class_name
        w.actor_handle_meta = pickle.loads(message.handle_meta)
        w.runtime_env = pickle.loads(message.runtime_env)
        w.restart_count = message.restart_count
        w.assigned_resources, w.gpu_ids = message.resources, message.gpu_ids
        apply_env(message.env)
        name = message.class_name + ".__init__"
        token = current_call.set((None, name, message.actor_id))
        try:
            cls = w.load(message.key)
            args, kwargs = resolve_args(message.args, message.deps, buffers)
            self.instance = cls(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001
            _, results, bufs = pack_error(task_failure(exc, name, None))
            w.post(protocol.ActorFailed(message.actor_id, results[0]), bufs)
            return
        finally:
            current_call.reset(token)
        self.ready.set()
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self._limits[1].set)
        w.post(protocol.ActorReady(message.actor_id))

    # -- calls -------------------------------------------------------------------------------
    def submit(self, message, buffers):
        """A call of a concurrent actor (reader thread): to its pool or loop."""
        if self.loop is not None:
            future = asyncio.run_coroutine_threadsafe(self._run_async(message, buffers), self.loop)
            self.async_calls[message.task_id] = future
            future.add_done_callback(lambda f, m=message: self._async_done(m, f))
        else:
            self._pool.submit(self._run_threaded, message, buffers)

    def _run_threaded(self, message, buffers):
        self.ready.wait()
        self.run_call(message, buffers, in_main_thread=False)

    def run_call(self, message, buffers, in_main_thread):
        w = self.worker
        task_id, name, num_returns = message.task_id, message.name, message.num_returns
        if task_id in w.cancelled:
            w.cancelled.discard(task_id)
            self._finish(task_id, pack_error(errors.TaskCancelled(task_id)))
            return
        token = current_call.set((task_id, name, w.actor_id))
        if in_main_thread:  # only the main thread can be interrupted by a cancel
            w.running_task = task_id
        try:
            try:
                method = getattr(self.instance, message.method)
                args, kwargs = resolve_args(message.args, message.deps, buffers)
                result = method(*args, **kwargs)
                if inspect.isawaitable(result):  # an async method on a non-async actor
                    result = asyncio.run(_await(result))
            finally:
                if in_main_thread:
                    w.running_task = None
                    w.cancel_requested = None
            reply = pack_results(result, num_returns)
        except BaseException as exc:  # noqa: BLE001 - everything a method raises goes back
            reply = self._failure(exc, task_id, name)
        finally:
            current_call.reset(token)
        if task_id in w.cancelled:  # cancelled while it ran on a pool thread
            w.cancelled.discard(task_id)
            reply = pack_error(errors.TaskCancelled(task_id))
        self._finish(task_id, reply, "main" if in_main_thread else "pool")

    async def _run_async(self, message, buffers):
        limit, ready = self._limits
        await ready.wait()
        async with limit:
            task_id, name = message.task_id, message.name
            token = current_call.set((task_id, name, self.worker.actor_id))
            try:
                method = getattr(self.instance, message.method)
                args, kwargs = resolve_args(message.args, message.deps, buffers)
                result = method(*args, **kwargs)
                if inspect.isawaitable(result):
                    result = await result
                reply = pack_results(result, message.num_returns)
            except BaseException as exc:  # noqa: BLE001 - everything a method raises goes back
                reply = self._failure(exc, task_id, name)
            finally:
                current_call.reset(token)
            self._finish(task_id, reply, "loop")

    def _async_done(self, message, future):
        self.async_calls.pop(message.task_id, None)
        if future.cancelled():  # cancelled before its coroutine started: answer it here
            self.worker.send_done(message.task_id, pack_error(errors.TaskCancelled(message.task_id)))
            flush_posted()

    def cancel(self, task_id):
        """Cancel a call running on the event loop; False if it is not one."""
        future = self.async_calls.get(task_id)
        if future is None:
            return False
        future.cancel()
        return True

    def _failure(self, exc, task_id, name):
        w = self.worker
        if isinstance(exc, (Cancelled, asyncio.CancelledError)):
            return pack_error(errors.TaskCancelled(task_id))
        if isinstance(exc, SystemExit):
            # exit_actor() or sys.exit(): the actor ends after this call, not restarted, and
            # the call itself reports the actor's death, as in Ray.
            w.exit_actor_after_call = True
            return pack_error(errors.ActorDied(w.actor_id, errors.ActorDeath.EXITED, w.actor_class_name))
        return pack_error(task_failure(exc, name, w.actor_class_name))

    def _finish(self, task_id, reply, where="main"):
        """Answer call ``task_id``. Results are posted: the main thread flushes when idle, the
        event loop once per turn (all calls that finished in it go in one write), a pool
        thread at once."""
        w = self.worker
        if w.exit_actor_after_call:
            w.exit_actor(task_id, reply)
        w.send_done(task_id, reply)
        if where == "loop":
            if not self._flush_scheduled:
                self._flush_scheduled = True
                self.loop.call_soon(self._flush_from_loop)
        elif where == "pool":
            flush_posted()

    def _flush_from_loop(self):
        self._flush_scheduled = False
        flush_posted()


async def _loop_primitives(limit):
    return asyncio.Semaphore(limit), asyncio.Event()


async def _await(awaitable):
    return await awaitable


class PrefixWriter:
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
        name = self._worker.actor_class_name or current_call.get()[1]
        # Outside any task (a setup hook at start), Ray tags lines with the pid alone.
        prefix = f"({name} pid={os.getpid()}) " if name else f"(pid={os.getpid()}) "
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
