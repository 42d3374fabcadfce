"""The actor shell: hosts one user actor inside a yr instance; every method call goes through
:meth:`ActorShell.call`.

- A constructor failure is kept and reported by every call (Ray's semantics: creation is
  asynchronous and calls fail with ActorDiedError), instead of failing the creation call. An
  ``async def __init__`` is awaited on the actor's loop.
- Concurrency groups: yr runs up to the actor's total concurrency (every group's size plus
  the default group's) calls at once; the shell admits at most a group's size of its calls,
  in arrival order (threads: :class:`_Limiter`; coroutines: a semaphore per group).
- An async actor has, as in Ray, one event loop per concurrency group, each on a thread of its
  own named ``AsyncIO Thread: <group>`` (``default`` for the default group): every method, sync
  ones too, runs on its group's loop, so a call blocking one loop does not hold up the other
  groups. The constructor runs on the default group's loop (a sync ``__init__`` sees it running).
- ``exit_actor()`` and ``sys.exit(0)`` end the actor for good; another ``SystemExit`` is a
  crash: with restarts left the shell builds a new instance (the call fails with
  ActorUnavailable, later calls are served), else the actor is dead.
- A method whose exception its ``retry_exceptions`` names runs again while retries last.
"""
import asyncio
import collections
import concurrent.futures
import contextvars
import inspect
import os
import threading
import weakref

from ray_adapter.core import errors
from ray_adapter.core.execution import (ActorLabel, actor_method, argument_failure, call_shutdown_hook,
                                        cancelled_failure,
                                        construct, construct_async, exit_status, function_descriptor,
                                        intended_exit, task_failure, with_thread_default)
from ray_adapter.core.embedded.task_support import device_env, seen_devices
from ray_adapter.core.yuanrong import thread_env
from ray_adapter.core.yuanrong.envs import setup_once, shared_environ
from ray_adapter.core.yuanrong.shell import (Box, _should_retry, cancel_requested, current_call,
                                             start_actor_call,
                                             current_devices, current_function, current_group, current_shell,
                                             local_resources, load_args, result_box, stream_items,
                                             stream_items_async, _forget_cancel)

DEFAULT_ASYNC_CONCURRENCY = 1000


class _Limiter:
    """At most ``size`` holders at once, admitted in arrival order (threads)."""

    def __init__(self, size):
        self._cond = threading.Condition(threading.Lock())
        self._size = size
        self._running = 0
        self._queue = collections.deque()

    def __enter__(self):
        ticket = object()
        with self._cond:
            self._queue.append(ticket)
            while self._queue[0] is not ticket or self._running >= self._size:
                self._cond.wait()
            self._queue.popleft()
            self._running += 1
            self._cond.notify_all()
        return self

    def __exit__(self, *exc):
        with self._cond:
            self._running -= 1
            self._cond.notify_all()
        return False


class ActorShell:
    """One user actor in a yr instance."""

    def __init__(self, cls, meta, packed_args, *deps):
        (actor_id, name, class_name, is_async, env_vars, resources, dep_indexes, groups,
         max_concurrency, max_restarts) = meta[:10]
        # (placement group id, capture child tasks) when the actor runs in a group's bundle
        self.group = meta[10] if len(meta) > 10 else None
        placement = meta[11] if len(meta) > 11 else None  # local mode: the adapter grants it
        self.devices = None  # local mode: the device ids granted to it ({"GPU": [0]})
        self.device_env = None  # and their visibility variables (see .thread_env)
        self.actor_id, self.name, self.class_name = actor_id, name, class_name
        self.label = ActorLabel(actor_id, class_name)  # what its calls' errors quote of it
        self.resources = resources
        self.init_error = None
        self.instance = None
        self.loops = None  # async actor: concurrency group ("" the default) -> _GroupLoop
        self.exited = False
        self._hooked = False  # its __ray_shutdown__ was called (shut_down)
        self.death = None
        self.restarts_left = max_restarts
        self.restart_count = 0
        self._cls = cls
        self._build_lock = threading.Lock()
        sizes = dict(groups or {})
        # (calls may run side by side: a call's sys.exit(N) then answers ActorUnavailableError)
        self._concurrent = bool(is_async or groups or (max_concurrency or 1) > 1)
        if is_async:
            sizes[""] = max_concurrency or DEFAULT_ASYNC_CONCURRENCY
            self.loops = self._limits = {g: _GroupLoop(g, n) for g, n in sizes.items()}
        else:
            sizes[""] = max_concurrency or 1
            self._limits = {g: _Limiter(n) for g, n in sizes.items()} if groups else {}
        # Its env_vars for its lifetime: let go when it exits for good, is killed (local mode:
        # the backend finds it in _local_shells) or at shutdown.
        self._env_held = shared_environ.acquire(env_vars)
        self._env_lock = threading.Lock()  # the exit of a call and a kill may let go at once
        if local_resources() is not None:
            _local_shells[actor_id] = self
        self._env_vars = {k: str(v) for k, v in (env_vars or {}).items()}
        hook_failure = setup_once(env_vars or {})  # runtime_env worker_process_setup_hook
        args, kwargs, failed = load_args(packed_args, dep_indexes, deps)
        if failed is not None:  # as Ray: the constructor fails, quoting the argument's error
            failed = Box(False, argument_failure(failed.value, f"{class_name}.__init__", self.label))
        if hook_failure is not None:
            failed = Box(False, errors.EnvSetupFailed(hook_failure))
        self._args = (args, kwargs)
        # Set once the instance is built (or failed). Local mode: an actor whose resources are
        # not free yet is built by _granted, later (yr's local mode runs this constructor in the
        # creating call, so it must not wait here); its calls wait for it in call().
        self._ready = threading.Event()
        if failed is None:
            gate = local_resources()
            try:
                grant, deferred = (None, False) if gate is None else gate.acquire(
                    actor_id, resources, placement, class_name, callback=self._granted, actor=True)
            except errors.CoreError as exc:  # unschedulable; shut down
                failed = Box(False, exc)
            else:
                if deferred:
                    return
                self._set_devices(grant)
        if failed is not None:
            self.init_error = failed.value
        else:
            self._build()
        self._ready.set()

    def _granted(self, grant, error):
        """Local mode: the resources this actor waited for are granted (or it was killed):
        build it on a thread of its own (this runs in the thread that freed them)."""
        if error is not None:
            self.init_error = error
            self._ready.set()
            return
        self._set_devices(grant)

        def build():
            self._build()
            self._ready.set()

        threading.Thread(target=build, daemon=True, name="ray-adapter-yr-actor-init").start()

    def _set_devices(self, grant):
        """Local mode: the devices granted at creation, and their variables (CUDA_VISIBLE_DEVICES
        unless RAY_EXPERIMENTAL_NOSET_... is set now, as Ray decides when the actor starts)."""
        if grant is not None and grant.devices:
            self.devices = seen_devices(grant.devices, self._env_vars, grant.node)
            self.device_env = device_env(self.devices, self._env_vars, shared_environ.original) or None

    def _call_env(self):
        """What Python code in its calls reads from os.environ over the process's (local mode):
        its env_vars, its devices' visibility variables and OMP_NUM_THREADS as Ray defaults it."""
        return with_thread_default({**self._env_vars, **(self.device_env or {})}, self.resources or {})

    def _build(self):
        """Make the instance (again, after a restart); a failure is kept as ``init_error``."""
        args, kwargs = self._args
        token = current_call.set((None, f"{self.class_name}.__init__", self.actor_id, self.name, self.resources))
        function_token = current_function.set(function_descriptor(self._cls, "__init__"))
        group_token = current_group.set(self.group)
        devices_token = current_devices.set(self.devices)
        env_token = thread_env.enter(self._call_env())
        try:
            if self.loops is None:
                self.instance = construct(self._cls, args, kwargs, asyncio.run)
            else:
                # On the default group's loop, as in Ray: a sync __init__ sees that loop running
                # and asyncio objects it makes bind to it.
                self.instance = self.loops[""].run(construct_async(self._cls, args, kwargs))
        except BaseException as exc:  # noqa: BLE001
            self.init_error = task_failure(exc, f"{self.class_name}.__init__")
            errors.report_creation_failure(errors.ActorDied(
                self.actor_id, errors.ActorDeath.CREATION_FAILED, self.class_name,
                creation_error=self.init_error))
        else:
            self.label.instance = self.instance
        finally:
            thread_env.leave(env_token)
            current_devices.reset(devices_token)
            current_group.reset(group_token)
            current_function.reset(function_token)
            current_call.reset(token)

    def call(self, meta, packed_args, *deps):
        (method_name, task_id, name, num_returns, dep_indexes, streaming, group, retry_on, retries,
         crash_retries) = meta
        if not self._ready.is_set():  # local mode: still waiting for its resources
            self._ready.wait()  # set by _granted's build, or when it is aborted
        limit = self._limits.get(group or "") if self._limits else None
        if self._limits and limit is None:
            return Box(False, task_failure(ValueError(
                f"the concurrency group {group!r} is not defined for this actor"), name, self.label))
        try:
            if limit is None or self.loops is not None:
                return self._call(method_name, task_id, name, num_returns, dep_indexes, streaming,
                                  limit, retry_on, retries, crash_retries, packed_args, deps)
            with limit:
                return self._call(method_name, task_id, name, num_returns, dep_indexes, streaming,
                                  None, retry_on, retries, crash_retries, packed_args, deps)
        finally:
            _forget_cancel(task_id)

    def _call(self, method_name, task_id, name, num_returns, dep_indexes, streaming, group_loop,
              retry_on, retries, crash_retries, packed_args, deps):
        if self.exited:
            return Box(False, self.death or errors.ActorDied(self.actor_id, errors.ActorDeath.EXITED,
                                                             self.class_name))
        if isinstance(self.init_error, errors.ActorDied):  # never placed (local mode)
            return Box(False, self.init_error)
        if self.init_error is not None:
            return Box(False, errors.ActorDied(self.actor_id, errors.ActorDeath.CREATION_FAILED,
                                               self.class_name, creation_error=self.init_error))
        args, kwargs, failed = load_args(packed_args, dep_indexes, deps)
        if failed is not None:
            return Box(False, argument_failure(failed.value, name, self.label))
        token = current_call.set((task_id, name, self.actor_id, self.name, self.resources))
        function_token = current_function.set(function_descriptor(self._cls, method_name))
        shell_token = current_shell.set(self)
        group_token = current_group.set(self.group)
        devices_token = current_devices.set(self.devices)
        env_token = thread_env.enter(self._call_env())
        try:
            while True:
                try:
                    return self._run(method_name, task_id, name, num_returns, streaming, group_loop,
                                     args, kwargs)
                except SystemExit as exc:
                    box = self._exit(exc)
                    if (crash_retries != 0 and isinstance(box.value, errors.ActorUnavailable)
                            and self.init_error is None):
                        crash_retries -= 1  # max_task_retries: replayed on the restarted actor
                        continue
                    return box
                except BaseException as exc:  # noqa: BLE001
                    if retries != 0 and _should_retry(exc, retry_on):
                        retries -= 1
                        continue
                    return Box(False, task_failure(exc, name, self.label))
        finally:
            thread_env.leave(env_token)
            current_devices.reset(devices_token)
            current_group.reset(group_token)
            current_shell.reset(shell_token)
            current_function.reset(function_token)
            current_call.reset(token)

    def _run(self, method_name, task_id, name, num_returns, streaming, group_loop, args, kwargs):
        method = actor_method(self.instance, method_name)
        if group_loop is not None:  # an async actor: the whole call on its group's loop
            running = group_loop.submit(_guarded(group_loop.semaphore, method, args, kwargs,
                                                 streaming, task_id, name, self.label, num_returns))
            if not start_actor_call(task_id, running):  # cancelled before it started
                running.cancel()
                return Box(False, errors.TaskCancelled(task_id))
            try:
                return group_loop.wait(running)
            except concurrent.futures.CancelledError:  # ray.cancel interrupted it, as in Ray
                return _cancelled(task_id, name, self.label)
        if not start_actor_call(task_id):  # cancelled before it started: never runs
            return Box(False, errors.TaskCancelled(task_id))
        result = method(*args, **kwargs)
        if inspect.iscoroutine(result):  # an async method on a non-async actor
            result = asyncio.run(result)
        if streaming:
            return stream_items(task_id, name, result, lambda: Box(False, errors.TaskCancelled(task_id)),
                                self.label)
        box = result_box(result, num_returns, inspect.isgeneratorfunction(method), name, self.label)
        if cancel_requested(task_id):  # cancelled while it ran: reported so, as in Ray
            return Box(False, errors.TaskCancelled(task_id))
        return box

    def _exit(self, exc):
        """A method raised SystemExit: the actor ends on purpose, restarts or dies (crash)."""
        if self.exited or intended_exit(exc):
            by_exit_actor = self.exited  # (exit_actor() set it before it raised)
            self.exited = True  # exit_actor() or sys.exit(0): this call reports the death
            self.shut_down()
            self._let_env_go()
            self.death = errors.ActorDied(self.actor_id, errors.ActorDeath.EXITED, self.class_name,
                                          detail=errors.EXITED_BY_EXIT_ACTOR if by_exit_actor else "")
            return Box(False, self.death)
        code = exit_status(exc)
        with self._build_lock:
            if self.restarts_left != 0:
                if self.restarts_left > 0:
                    self.restarts_left -= 1
                self.restart_count += 1
                self._build()
                return Box(False, errors.ActorUnavailable(self.actor_id, os.getpid(), code,
                                                          by_sys_exit=True))
        self.exited = True
        self._let_env_go()
        self.death = errors.ActorDied(self.actor_id, errors.ActorDeath.CRASHED, self.class_name,
                                      exit_code=code)
        if self._concurrent:  # as Ray's threaded and group actors answer the exiting call
            return Box(False, errors.ActorUnavailable(self.actor_id, os.getpid(), code,
                                                      by_sys_exit=True))
        return Box(False, self.death)

    def shut_down(self):
        """The actor ends gracefully (``exit_actor()``, or out of scope: called by the backend
        before it terminates the instance): its ``__ray_shutdown__`` runs, once."""
        with self._build_lock:
            instance, self._hooked = (None, True) if self._hooked else (self.instance, True)
        if instance is not None:
            call_shutdown_hook(instance)

    def ended_by_kill(self):
        """Local mode: this actor was killed (``ray.kill``, or out of scope): its env_vars go
        now, as its process would have ended with them."""
        self._let_env_go()

    def _let_env_go(self):
        with self._env_lock:
            held, self._env_held = self._env_held, None
        shared_environ.release(held)


#: Local mode (the shells are objects of this process): actor id -> its shell, while it lives
#: (weak: yr drops the instance when it ends it).
_local_shells = weakref.WeakValueDictionary()


def take_local_shell(actor_id):
    """Local mode: the shell of the live actor ``actor_id``, taken out of the registry (None if
    it has ended)."""
    return _local_shells.pop(actor_id, None)


async def _guarded(semaphore, method, args, kwargs, streaming, task_id, name, actor, num_returns):
    """A call of an async actor on its group's loop, inside the group's semaphore."""
    async def run():
        value = method(*args, **kwargs)
        if streaming:
            if inspect.isasyncgen(value):
                return await stream_items_async(task_id, name, value,
                                                lambda: _cancelled(task_id, name, actor), actor)
            return stream_items(task_id, name, value, lambda: Box(False, errors.TaskCancelled(task_id)),
                                actor)
        if inspect.iscoroutine(value):  # not any awaitable: an ObjectRef is one
            value = await value
        return result_box(value, num_returns, inspect.isgeneratorfunction(method), name, actor)

    async with semaphore:
        return await run()


def _cancelled(task_id, name, actor=None):
    """A cancelled async call (a stream too) reports RayTaskError(TaskCancelledError), as in Ray."""
    return Box(False, cancelled_failure(task_id, name, actor))


class _GroupLoop:
    """One concurrency group of an async actor: an event loop on a thread of its own, named as
    Ray names it (``AsyncIO Thread: <group>``, ``default`` for the default group), and the
    group's semaphore (made on, and used only by, the loop's thread). One thread per declared
    group, for the actor's life."""

    def __init__(self, group, size):
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True,
                         name=f"AsyncIO Thread: {group or 'default'}").start()
        self.semaphore = asyncio.run_coroutine_threadsafe(_semaphore(size), self.loop).result()

    def run(self, coro):
        """Run ``coro`` on this loop in the caller's context (contextvars) and wait for its
        result; a SystemExit it raises is raised here, in the calling thread."""
        return self.wait(self.submit(coro))

    def submit(self, coro):
        """Start ``coro`` on this loop in the caller's context: its concurrent future."""
        return asyncio.run_coroutine_threadsafe(_in_context(contextvars.copy_context(), coro),
                                                self.loop)

    @staticmethod
    def wait(running):
        """The result of a :meth:`submit`-ted coroutine; a SystemExit it raised is raised here,
        in the calling thread (``concurrent.futures.CancelledError`` if it was cancelled)."""
        value = running.result()
        if isinstance(value, _Exited):
            raise value.exc
        return value


async def _semaphore(size):
    return asyncio.Semaphore(size)


class _Exited:
    """An async method raised SystemExit (exit_actor(), sys.exit()): carried back to the
    calling thread, since raised on the loop it would stop the actor's event loop itself."""

    __slots__ = ("exc",)

    def __init__(self, exc):
        self.exc = exc


async def _in_context(ctx, awaitable):
    for var, value in ctx.items():
        var.set(value)
    try:
        return await awaitable
    except SystemExit as exc:
        return _Exited(exc)
