"""Running an actor's calls in a worker: sync, threaded and async actors, concurrency groups.

:class:`ActorHost` hosts one actor. Its constructor (an ``async def __init__`` is awaited on
the actor's loop) and the calls of a plain synchronous actor run in the worker's main thread, in
order. A threaded actor (``max_concurrency > 1``, or one with concurrency groups) runs calls on
one thread pool per concurrency group, as many threads as the group allows (the default group:
``max_concurrency``, default 1). An async actor, as in Ray, has one event loop per concurrency
group, each on a thread of its own named ``AsyncIO Thread: <group>`` (the default group's:
``AsyncIO Thread: default``), so a call that blocks its group's loop (``time.sleep`` in an
``async def``, or a sync method) does not hold up the other groups; at most as many calls of a
group run at once as its semaphore allows (default group: ``max_concurrency``, default 1000). The
constructor of an async actor runs on the default group's loop (a sync ``__init__`` too: it
sees a running loop, as in Ray). Calls of concurrent actors wait until the constructor has
finished. Asyncio primitives are made on their loop's own thread (Python 3.9 binds them to the
loop current where they are created).

Cancelling a running call of a sync or threaded actor does not interrupt it, as in Ray: the
call sees ``is_canceled()`` turn true (a streaming call stops at its next item) and is answered
as cancelled. A call of an async actor is cancelled on its loop.

``sys.exit(0)`` and ``exit_actor()`` end the actor on purpose (no restart); any other
``SystemExit`` ends the process like a crash, so the driver restarts the actor if it may. In a
concurrent actor the calls running beside the exiting one finish first, as in Ray; those that had
not begun fail with ``ActorDiedError``.
"""
import asyncio
import gc
import inspect
import os
import pickle
import threading

from ray_adapter.core import errors
from ray_adapter.core.embedded import protocol, streaming
from ray_adapter.core.embedded.posts import flush_posted
from ray_adapter.core.embedded.results import (ArgumentFailed, Cancelled, flush_std,
                                                from_generator_function, pack_error, pack_results,
                                                resolve_args, should_retry)
from ray_adapter.core.embedded.worker_core import current_call, current_function
from ray_adapter.core.execution import (ActorLabel, actor_method, apply_env, call_shutdown_hook,
                                        argument_failure, cancelled_failure, construct,
                                        construct_async, exit_status,
                                        function_descriptor, intended_exit, sync_torch_threads,
                                        task_failure, with_thread_default)

DEFAULT_ASYNC_CONCURRENCY = 1000


def _constructed_instance(exc, cls):
    """The instance of ``cls`` whose ``__init__`` raised ``exc`` (from the traceback's frames),
    or None (the class never loaded, the error came before ``__init__``)."""
    tb = exc.__traceback__
    while tb is not None and cls is not None:
        frame = tb.tb_frame
        candidate = frame.f_locals.get("self") if frame.f_code.co_name == "__init__" else None
        if isinstance(candidate, cls):
            return candidate
        tb = tb.tb_next
    return None


class ActorHost:
    """One actor inside this worker (created by the reader on ``CreateActor``)."""

    def __init__(self, worker, message):
        self.worker = worker
        self.instance = None
        self.actor_cls = None  # the user's class (its calls' function descriptors)
        self.ready = threading.Event()
        self.is_async = message.is_async
        limit = message.max_concurrency
        self.groups = dict(message.concurrency_groups or {})
        self.concurrent = self.is_async or bool(limit and limit > 1) or bool(self.groups)
        self.budget = streaming.Budget(message.backpressure)
        self.cancel_flags = set()  # calls asked to cancel: skipped if queued, flagged if running
        self.loops = None  # async actor: concurrency group ("" the default) -> _GroupLoop
        self.async_calls = {}  # task id -> (concurrent future of a call on a loop, its _GroupLoop)
        self.running_async = set()  # ids of the calls on a loop whose method has begun
        self._pools = None
        # A concurrent actor's calls run on several threads. When one calls exit_actor(), the
        # calls running beside it finish first (as in Ray) and the last one to end takes the
        # process down; calls that had not begun by then are answered ActorDiedError.
        # ``_running`` and ``_exiting`` are guarded by ``_exit_lock`` (any call's thread; a
        # leaf lock: nothing is sent under it).
        # A call that raised SystemExit(N) (not exit_actor()) sets ``_crash_code``: as in Ray,
        # the calls running beside it are answered, then the process exits N (a crash);
        # calls that had not begun stay unanswered (the driver fails or replays them then).
        self._exit_lock = threading.Lock()
        self._running = 0
        self._exiting = False
        self._crash_code = None
        sizes = dict(self.groups)
        if self.is_async:
            sizes[""] = limit or DEFAULT_ASYNC_CONCURRENCY
            self.loops = {group: _GroupLoop(group, n) for group, n in sizes.items()}
        elif self.concurrent:
            from concurrent.futures import ThreadPoolExecutor

            sizes[""] = limit or 1
            self._pools = {group: ThreadPoolExecutor(max_workers=n, thread_name_prefix="ray-adapter-actor")
                           for group, n in sizes.items()}

    # -- creation (main thread) --------------------------------------------------------------
    def create(self, message, buffers):
        w = self.worker
        w.actor_id, w.actor_name, w.actor_class_name = message.actor_id, message.name, message.class_name
        w.actor_label = ActorLabel(message.actor_id, message.class_name)
        w.runtime_env = pickle.loads(message.runtime_env)
        w.restart_count = message.restart_count
        w.assigned_resources, w.gpu_ids = message.resources, message.gpu_ids
        apply_env(with_thread_default(message.env, message.resources))
        sync_torch_threads()
        name = message.class_name + ".__init__"
        token = current_call.set((None, name, message.actor_id))
        function_token = None
        try:
            cls = w.load(message.key)
            self.actor_cls = cls
            function_token = current_function.set(function_descriptor(cls, "__init__"))
            # (cloudpickled: method options may name classes of the driver's __main__)
            w.actor_handle_meta = pickle.loads(message.handle_meta)
            args, kwargs = resolve_args(message.args, message.deps, buffers)
            if self.loops is None:
                self.instance = construct(cls, args, kwargs, asyncio.run)
            else:
                # On the default group's loop, as in Ray: a sync __init__ sees that loop running
                # (asyncio.get_running_loop(), create_task) and asyncio objects bind to it.
                outcome = asyncio.run_coroutine_threadsafe(
                    _construct_on_loop(cls, args, kwargs, (None, name, message.actor_id)),
                    self.loops[""].loop).result()
                if isinstance(outcome, _Raised):
                    raise outcome.exc
                self.instance = outcome
        except BaseException as exc:  # noqa: BLE001
            if w.exit_actor_after_call or isinstance(exc, SystemExit):
                self._leave_from_constructor(message.actor_id, exc)  # does not return
            # Ray's creation-task error names the actor and quotes the instance __init__ ran on.
            if isinstance(exc, ArgumentFailed):
                failure = argument_failure(exc.inner, name, w.actor_label)
            else:
                w.actor_label.instance = _constructed_instance(exc, self.actor_cls)
                failure = task_failure(exc, name, w.actor_label)
                errors.report_creation_failure(errors.ActorDied(
                    message.actor_id, errors.ActorDeath.CREATION_FAILED, message.class_name,
                    creation_error=failure))
            _, results, bufs = pack_error(failure)
            w.post(protocol.ActorFailed(message.actor_id, results[0]), bufs)
            return
        finally:
            if function_token is not None:
                current_function.reset(function_token)
            current_call.reset(token)
        w.actor_log_name = _log_name(self.instance)
        w.actor_label.instance = self.instance
        self.ready.set()
        for group_loop in (self.loops or {}).values():
            group_loop.loop.call_soon_threadsafe(group_loop.ready.set)
        w.post(protocol.ActorReady(message.actor_id))

    def shut_down(self):
        """The actor ends gracefully: its ``__ray_shutdown__`` runs (see
        :func:`~ray_adapter.core.execution.call_shutdown_hook`), then the instance is let go
        of, so its ``__del__`` runs next, as in Ray (before the process's ``atexit``
        handlers). A ``SystemExit`` raised in the hook ends the hook and skips ``__del__``
        (the ``atexit`` handlers still run), as Ray's worker then exits through Python's."""
        if not call_shutdown_hook(self.instance):
            flush_std()
            return
        self.instance = self.worker.actor_label.instance = None
        gc.collect()  # an instance in a reference cycle too
        flush_std()

    # -- calls -------------------------------------------------------------------------------
    def accept(self, message, buffers):
        """A call arrived (reader thread): to the main thread, its group's pool or the loop."""
        if message.streaming:  # before any ack for it can arrive
            self.budget.open(message.task_id, message.backpressure)
        if not self.concurrent:
            self.worker.exec_queue.put((message, buffers))
        elif self.loops is not None:
            group_loop = self.loops.get(message.group)
            if group_loop is None:
                self._answer(message.task_id, pack_error(task_failure(
                    _unknown_group(message.group), message.name, self.worker.actor_label)), "pool")
                return
            group_loop.arrive(message.task_id)
            future = asyncio.run_coroutine_threadsafe(self._run_async(message, buffers, group_loop),
                                                      group_loop.loop)
            self.async_calls[message.task_id] = future, group_loop
            future.add_done_callback(lambda f, m=message, g=group_loop: self._async_done(m, g, f))
        else:
            pool = self._pools.get(message.group)
            if pool is None:
                self._answer(message.task_id, pack_error(task_failure(
                    _unknown_group(message.group), message.name, self.worker.actor_label)), "pool")
                return
            pool.submit(self._run_threaded, message, buffers)

    def _run_threaded(self, message, buffers):
        self.ready.wait()
        self.run_call(message, buffers, in_main_thread=False)

    def run_call(self, message, buffers, in_main_thread):
        """Run one call in this thread (the main thread or a pool thread) and answer it."""
        w = self.worker
        task_id, name = message.task_id, message.name
        where = "main" if in_main_thread else "pool"
        if task_id in self.cancel_flags:  # cancelled before it started
            self.cancel_flags.discard(task_id)
            self.budget.close(task_id)
            self._answer(task_id, pack_error(errors.TaskCancelled(task_id)), where)
            return
        if not self._begin(message, where):
            return
        token = current_call.set((task_id, name, w.actor_id))
        function_token = current_function.set(function_descriptor(self.actor_cls, message.method))
        retryable = False
        try:
            method = actor_method(self.instance, message.method)
            args, kwargs = resolve_args(message.args, message.deps, buffers)
            result = method(*args, **kwargs)
            if inspect.iscoroutine(result):  # an async method on a non-async actor
                result = asyncio.run(result)
            if message.streaming:
                reply = streaming.produce(w, task_id, name, result, self.budget,
                                          lambda: task_id in self.cancel_flags, w.actor_label)
            else:
                reply = pack_results(result, message.num_returns,
                                     from_generator_function(result, method), name, w.actor_label)
        except BaseException as exc:  # noqa: BLE001 - everything a method raises goes back
            reply, retryable = self._failure(exc, message)
        finally:
            current_function.reset(function_token)
            current_call.reset(token)
            if message.streaming:
                self.budget.close(task_id)
        method = None  # (bound to the instance: an actor that exits now lets go of it)
        if task_id in self.cancel_flags:  # cancelled while it ran: reported so, as in Ray
            self.cancel_flags.discard(task_id)
            reply, retryable = pack_error(errors.TaskCancelled(task_id)), False
        self._finish(task_id, reply, where, retryable)

    async def _run_async(self, message, buffers, group_loop):
        """One call on its group's loop (``group_loop``), within the group's limit. The slot is
        taken first, at the call's first step, and only then the constructor waited for: the
        tasks start in arrival order, so slots go in arrival order (waiting for the constructor
        first let a call that arrived after it finished overtake one that arrived before, and
        a ``max_concurrency=1`` actor ran its second call first)."""
        task_id, name = message.task_id, message.name
        async with group_loop.limit:
            await group_loop.ready.wait()
            if not self._begin(message, group_loop):
                return
            token = current_call.set((task_id, name, self.worker.actor_id))
            function_token = current_function.set(function_descriptor(self.actor_cls, message.method))
            retryable = started = False
            try:
                method = actor_method(self.instance, message.method)
                args, kwargs = resolve_args(message.args, message.deps, buffers)
                started = True
                self.running_async.add(task_id)
                result = method(*args, **kwargs)
                if inspect.iscoroutine(result):  # not any awaitable: an ObjectRef is one
                    result = await result
                if message.streaming:
                    reply = await streaming.produce_async(
                        self.worker, task_id, name, result, self.budget,
                        lambda: task_id in self.cancel_flags, self.worker.actor_label,
                        flush=group_loop.schedule_flush)
                else:
                    reply = pack_results(result, message.num_returns,
                                         from_generator_function(result, method), name,
                                         self.worker.actor_label)
            except asyncio.CancelledError as exc:
                # Raised in its method (it awaited something cancelled), or the call was
                # cancelled (then _async_done has answered already: this answer is ignored).
                reply = pack_error(cancelled_failure(task_id, name, self.worker.actor_label, exc)
                                   if message.streaming or started else errors.TaskCancelled(task_id))
            except BaseException as exc:  # noqa: BLE001 - everything a method raises goes back
                reply, retryable = self._failure(exc, message)
            finally:
                current_function.reset(function_token)
                current_call.reset(token)
                self.running_async.discard(task_id)
                if message.streaming:
                    self.budget.close(task_id)
            self.cancel_flags.discard(task_id)
            self._finish(task_id, reply, group_loop, retryable)

    def _async_done(self, message, group_loop, future):
        """A call on a loop ended (its loop's thread), or was cancelled (the thread that
        cancelled it, in :meth:`cancel`: answered here, before its coroutine sees it; the
        coroutine's own answer comes second and is ignored)."""
        task_id = message.task_id
        self.async_calls.pop(task_id, None)
        cancelled = future.cancelled()
        # Ray hands an async actor's call to its event loop once the actor is constructed
        # and the call's group has a slot for it; a call cancelled after that (even one
        # whose coroutine has not run a step: the loop is busy) is a RayTaskError(
        # TaskCancelledError), as its coroutine raised CancelledError; one cancelled before
        # (waiting for a slot or the constructor) is a plain TaskCancelledError.
        dispatched = cancelled and self.ready.is_set() and group_loop.has_slot(task_id)
        group_loop.leave(task_id)
        if cancelled:
            self.cancel_flags.discard(task_id)
            self.budget.close(task_id)
            error = errors.TaskCancelled(task_id)
            if dispatched or task_id in self.running_async:  # (a stream too, as in Ray)
                error = cancelled_failure(task_id, message.name, self.worker.actor_label)
            self.worker.send_done(task_id, pack_error(error))
            flush_posted()

    def cancel(self, task_id):
        """Cancel call ``task_id``: on the loop it is cancelled there; elsewhere it is flagged
        (skipped if it has not started, answered as cancelled when it ends if it has)."""
        future, _ = self.async_calls.get(task_id, (None, None))
        if future is not None:
            self.cancel_flags.add(task_id)
            future.cancel()
            return
        self.cancel_flags.add(task_id)
        self.budget.wake()  # a stream paused by backpressure stops now

    def _failure(self, exc, message):
        """``(reply, retryable)`` for what call ``message`` raised."""
        w = self.worker
        if isinstance(exc, (Cancelled, asyncio.CancelledError)):
            return pack_error(errors.TaskCancelled(message.task_id)), False
        if message.task_id == w.exit_call:  # exit_actor() (an asyncio actor's AsyncioActorExit)
            return self._exited(), False
        if isinstance(exc, SystemExit):
            if not (w.exit_actor_after_call or intended_exit(exc)):
                # sys.exit(1) and the like: the process dies as from a crash; the driver then
                # restarts the actor if it may (ActorUnavailableError meanwhile). A sync actor's
                # call is left unanswered; a concurrent actor's is ActorUnavailableError, and
                # the process leaves when the calls running beside it end, as in Ray.
                code = exit_status(exc)
                if self.concurrent:
                    with self._exit_lock:
                        self._exiting = True
                        if self._crash_code is None:
                            self._crash_code = code
                    return pack_error(errors.ActorUnavailable(w.actor_id, os.getpid(), code,
                                                              by_sys_exit=True)), False
                leaving(w, code)
                end_process(code)
            # exit_actor() or sys.exit(0): the actor ends after this call, not restarted, and
            # the call itself reports the actor's death, as in Ray.
            w.exit_actor_after_call = True
            w.exit_call = message.task_id
            return self._exited(), False
        if isinstance(exc, ArgumentFailed):  # as Ray: the call fails itself, in the actor
            return pack_error(argument_failure(exc.inner, message.name, w.actor_label)), False
        retryable = should_retry(exc, message.retry_exceptions)
        return pack_error(task_failure(exc, message.name, w.actor_label)), retryable

    def _begin(self, message, where):
        """A concurrent actor's call is about to begin on this thread: True, counted as running;
        False once the actor is exiting: it is answered ``ActorDiedError`` instead, as Ray fails
        the calls that had not begun when ``exit_actor()`` was called. (A sync actor's calls
        run one after the other: none is waiting when it exits.)"""
        if not self.concurrent:
            return True
        with self._exit_lock:
            if not self._exiting:
                self._running += 1
                return True
            crashing = self._crash_code is not None
        self.budget.close(message.task_id)
        if not crashing:  # (a crash leaves it to the driver: failed, or replayed on a restart)
            self._answer(message.task_id, self._exited(), where)
        return False

    def _leave_from_constructor(self, actor_id, exc):
        """The constructor called ``exit_actor()`` or ``sys.exit()``: as in Ray, not a creation
        failure but the process's end, intended (``exit_actor()``, ``sys.exit(0)``: the actor
        is dead, its atexit handlers run) or not (``sys.exit(1)``: as a crash, restarted if it
        may be). Does not return."""
        w = self.worker
        if w.exit_actor_after_call or intended_exit(exc):
            w.post(protocol.ActorExiting(actor_id, by_exit_actor=w.exit_by_call))
            w.leave()
        code = exit_status(exc)
        leaving(w, code)
        end_process(code)

    def _exited(self):
        """The reply of a call ended by the actor's own exit (``ActorDiedError``, EXITED)."""
        w = self.worker
        return pack_error(errors.ActorDied(w.actor_id, errors.ActorDeath.EXITED, w.actor_class_name,
                                           detail=errors.EXITED_BY_EXIT_ACTOR if w.exit_by_call else ""))

    def _finish(self, task_id, reply, where="main", retryable=False):
        """Call ``task_id``, begun (:meth:`_begin`), ended with ``reply``: answer it. After the
        call that asked the actor to exit (``exit_actor()``, ``sys.exit(0)``) the driver is told
        first; the process then ends once no call runs any more (at once in a sync actor)."""
        w = self.worker
        if not self.concurrent:
            if w.exit_actor_after_call:
                w.exit_actor(task_id, reply)  # does not return
            self._answer(task_id, reply, where, retryable)
            return
        with self._exit_lock:
            self._running -= 1
            crash_code = self._crash_code
            announce = task_id == w.exit_call and not self._exiting and crash_code is None
            self._exiting = self._exiting or announce
            last = self._exiting and not self._running
        if announce:  # before its answer: the driver sends nothing more and fails this call
            w.post(protocol.ActorExiting(w.actor_id, draining=True, task_id=task_id,
                                         by_exit_actor=w.exit_by_call))
        self._answer(task_id, reply, where, retryable)
        if last and crash_code is not None:  # a call's sys.exit(N): the process ends as a crash
            leaving(w, crash_code)
            end_process(crash_code)  # (flushes what was posted, this answer too)
        elif last:  # atexit handlers run where no event loop runs (asyncio.run works in them)
            threading.Thread(target=w.leave, name="ray-adapter-actor-exit").start()

    def _answer(self, task_id, reply, where="main", retryable=False):
        """Send call ``task_id``'s ``reply``. Results are posted: the main thread flushes when
        idle, a group's event loop (``where`` is its :class:`_GroupLoop`) once per turn (all
        calls that finished in it go in one write), a pool thread at once."""
        self.worker.send_done(task_id, reply, retryable)
        if isinstance(where, _GroupLoop):
            where.schedule_flush()
        elif where == "pool":
            flush_posted()


class _GroupLoop:
    """One concurrency group of an async actor: an event loop running on a thread of its own,
    named as Ray names it (``AsyncIO Thread: <group>``, ``default`` for the default group),
    the group's semaphore and the gate its calls wait at until the constructor has finished.
    ``limit``, ``ready`` and the flush flag belong to the loop's thread; other threads reach
    the loop only through its thread-safe calls. One thread per declared group, for the
    actor's life.

    ``_arrived`` lists the group's unfinished calls in arrival order (the order they take the
    semaphore's slots in: the first ``size`` hold one, or will as soon as the loop runs); it is
    guarded by ``_arrived_lock``, a leaf lock, taken by the reader thread (a call arrives, or
    is cancelled) and by the thread that ends a call."""

    def __init__(self, group, size):
        self.size = size
        self._arrived = {}  # task id -> None, in arrival order
        self._arrived_lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name=f"AsyncIO Thread: {group or 'default'}",
                         daemon=True).start()
        self.limit, self.ready = asyncio.run_coroutine_threadsafe(_loop_primitives(size), self.loop).result()
        self._flush_scheduled = False

    def arrive(self, task_id):
        with self._arrived_lock:
            self._arrived[task_id] = None

    def leave(self, task_id):
        with self._arrived_lock:
            self._arrived.pop(task_id, None)

    def has_slot(self, task_id):
        """Whether unfinished call ``task_id`` is among the first ``size`` to have arrived."""
        with self._arrived_lock:
            for index, arrived in enumerate(self._arrived):
                if arrived == task_id:
                    return True
                if index + 1 >= self.size:
                    return False
        return False

    def schedule_flush(self):
        """On the loop: flush what this turn posted at the end of the turn."""
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self):
        self._flush_scheduled = False
        flush_posted()


class _Raised:
    """What the constructor raised on the loop, carried back to the thread that waits for it
    (a SystemExit raised out of a task would stop the loop itself)."""

    __slots__ = ("exc",)

    def __init__(self, exc):
        self.exc = exc


async def _construct_on_loop(cls, args, kwargs, call):
    """The actor's instance, made on the running loop (``call``: the current_call value for
    its output and runtime context); what it raises is returned as :class:`_Raised`."""
    current_call.set(call)
    try:
        return await construct_async(cls, args, kwargs)
    except BaseException as exc:  # noqa: BLE001 - carried back to the caller
        return _Raised(exc)


def _unknown_group(group):
    return ValueError(f"the concurrency group {group!r} is not defined for this actor")


def _log_name(instance):
    """The name Ray prefixes an actor's output with: ``repr(instance)`` when its class
    defines ``__repr__``, else the class name."""
    if type(instance).__repr__ is object.__repr__:
        return None
    try:
        return repr(instance)
    except Exception:  # noqa: BLE001 - a broken __repr__: the class name then
        return None


async def _loop_primitives(size):
    return asyncio.Semaphore(size), asyncio.Event()


_RESET = "\x1b[0m"
_CYAN = "\x1b[36m"
#: RAY_COLOR_PREFIX=1: one colour per worker, chosen by pid (magenta, cyan, green, light black,
#: light blue, light magenta), as Ray's driver colours forwarded lines.
_PID_COLORS = ("\x1b[35m", "\x1b[36m", "\x1b[32m", "\x1b[90m", "\x1b[94m", "\x1b[95m")


def _prefix_color():
    """The ANSI colour Ray's driver wraps a worker line's prefix in, whether or not the stream is
    a terminal: cyan; none with ``RAY_COLOR_PREFIX=0``; one per worker with ``=1``."""
    setting = os.environ.get("RAY_COLOR_PREFIX")
    if setting == "0":
        return ""
    if setting == "1":
        return _PID_COLORS[os.getpid() % len(_PID_COLORS)]
    return _CYAN


class PrefixWriter:
    """Prefixes each line written to stdout/stderr with ``(name pid=N)`` (in cyan, see
    :func:`_prefix_color`), as Ray's log forwarding does, and writes straight to the driver's inherited stream. Only whole lines
    are written (one write each batch; a partial line waits for its end or :meth:`finish_line`), so
    lines of several workers never interleave, even with unbuffered streams
    (``PYTHONUNBUFFERED``)."""

    def __init__(self, stream, worker, relay_fd=0):
        """``relay_fd`` 1 or 2: the lines go to the driver as :class:`protocol.Output` of that
        stream (a worker of an attached driver's job) instead of to ``stream``."""
        self._stream = stream
        self._worker = worker
        self._relay_fd = relay_fd
        self._at_line_start = True
        self._partial = ""
        self._partial_prefix = ""
        self._lock = threading.Lock()

    def _prefix(self):
        w = self._worker
        name = w.actor_log_name or w.actor_class_name or current_call.get()[1]
        # Outside any task (a setup hook at start), Ray tags lines with the pid alone.
        tag = f"({name} pid={os.getpid()})" if name else f"(pid={os.getpid()})"
        color = _prefix_color()
        return f"{color}{tag}{_RESET} " if color else f"{tag} "

    def write(self, text):
        if not text:
            return 0
        with self._lock:
            if not self._partial:
                self._partial_prefix = self._prefix()  # the line's owner: who began it
            data = self._partial + text
            cut = data.rfind("\n") + 1
            self._partial = data[cut:]
            if cut:
                prefix = self._partial_prefix
                if self._partial:
                    self._partial_prefix = self._prefix()
                out = []
                for line in data[:cut - 1].split("\n"):
                    if self._at_line_start:
                        out.append(prefix)
                    out.append(line)
                    out.append("\n")
                    self._at_line_start = True
                self._emit("".join(out))
        return len(text)

    def _emit(self, text):
        if self._relay_fd and not self._worker.forked_child:  # a fork's child never speaks
            self._worker.post(protocol.Output(self._relay_fd, text))
            return
        try:
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError):  # the driver's stdout is gone (e.g. `| head`)
            pass

    def reset_after_fork(self):
        """In a forked child: a new lock (another thread of the parent may have held it)."""
        self._lock = threading.Lock()

    def finish_line(self):
        """Write a pending partial line as a line of its own (the work ended: Ray's log
        forwarding shows a last line without its newline the same way)."""
        with self._lock:
            if self._partial:
                text = (self._partial_prefix if self._at_line_start else "") + self._partial + "\n"
                self._partial = ""
                self._at_line_start = True
                self._emit(text)

    def flush(self):
        try:
            self._stream.flush()
        except (OSError, ValueError):
            pass

    def __getattr__(self, name):
        return getattr(self._stream, name)


def leaving(worker, code):
    """Tell the runtime that this process leaves by ``sys.exit(code)`` (not a crash: Ray
    words its death so), before :func:`end_process`. Not from a forked child (the channel is
    the worker's)."""
    if not worker.forked_child:
        worker.post(protocol.Leaving(code))


def end_process(code):
    """Flush output, kill every process the tasks started (descendants, re-parented here as
    a subreaper), and exit now with ``code``."""
    flush_posted()  # results and messages queued by this thread go out first
    flush_std()
    try:
        import psutil

        for child in psutil.Process().children(recursive=True):
            try:
                child.kill()
            except psutil.Error:
                pass
    except Exception:  # psutil unavailable: the driver still kills the process group
        pass
    os._exit(code)
