"""Code that runs inside Yuanrong: the task runner and the actor shell.

Every task and method result comes back wrapped in a :class:`Box`, so the backend can tell a
real ``None`` result from yr's "not ready / cancelled" ``None`` and carry failures as the
core's own errors (with the user's exception class and traceback), independent of how yr
reports them.
"""
import asyncio
import contextvars
import inspect
import threading

from ray_adapter import core
from ray_adapter.core import errors, serialization
from ray_adapter.core.execution import apply_env, restore_env, split_returns, task_failure
from ray_adapter.core.interface import ArgRef
from ray_adapter.core.yuanrong.envs import setup_once

# (task_id, task_name, actor_id, actor_name, resources) of the call running in this thread.
current_call = contextvars.ContextVar("ray_adapter_yr_call", default=(None, "", None, None, {}))
# The ActorShell whose method is running in this thread / coroutine.
current_shell = contextvars.ContextVar("ray_adapter_yr_shell", default=None)


class Box:
    """A task or method outcome: ``ok`` and the value, or the core error when not ok."""

    __slots__ = ("ok", "value")

    def __init__(self, ok, value):
        self.ok = ok
        self.value = value

    def __reduce__(self):
        return Box, (self.ok, self.value)


def load_args(packed_args, dep_indexes, deps):
    """The call's ``(args, kwargs)``. ``packed_args`` is their Serialized form with
    :class:`ArgRef` placeholders at top level; ``deps`` are the Boxes yr resolved for those refs
    (args first, then kwargs, in order) and ``dep_indexes`` the element of a multi-return each
    stands for. Returns ``(args, kwargs, failed_box)``."""
    args, kwargs = _unpack_args(packed_args)
    if not deps:
        return args, kwargs, None
    refs = [a for a in args if type(a) is ArgRef] + [v for v in kwargs.values() if type(v) is ArgRef]
    values = {}
    for ref, index, box in zip(refs, dep_indexes, deps):
        if not box.ok:
            return None, None, box
        values[ref.object_id] = _unpack(box.value if index is None else box.value[index])
    args = tuple(values[a.object_id] if type(a) is ArgRef else a for a in args)
    kwargs = {k: values[v.object_id] if type(v) is ArgRef else v for k, v in kwargs.items()}
    return args, kwargs, None


def _dumps(value):
    """Serialize ``value``. The refs and handles inside it are held by the value (local mode:
    see :mod:`.holders`); on a cluster they escape this backend's tracking (the value may be
    read in another process) and are kept until shutdown."""
    ser = serialization.dumps(value)
    if (ser.refs or ser.handles) and core.is_started():
        current = core.current()
        if getattr(current, "local_mode", False):
            current.hold_contained(ser.refs, ser.handles)
        else:
            for object_id in ser.refs:
                current.object_escaped(object_id)
            for actor_id in ser.handles:
                current.actor_handle_escaped(actor_id)
    return ser


def pack(value):
    """A value as it crosses yr: serialized by the adapter (so readers get copies and
    read-only arrays, as in Ray) unless it is immutable and needs no copy."""
    return value if serialization.is_immutable(value) else _dumps(value)


def pack_args(args, kwargs):
    """``(args, kwargs)`` as they cross yr; top-level ArgRef placeholders need no copy."""
    if kwargs or not all(type(a) is ArgRef or serialization.is_immutable(a) for a in args):
        return _dumps((args, kwargs))
    return args


def _unpack_args(packed):
    if type(packed) is serialization.Serialized:
        return serialization.loads(packed)
    return packed, {}


def _unpack(packed):
    return serialization.loads(packed) if type(packed) is serialization.Serialized else packed


unpack = _unpack


def result_box(result, num_returns):
    """A successful call's Box, split into ``num_returns`` packed values when more than one."""
    if num_returns == 1:
        return Box(True, pack(result))
    return Box(True, [pack(v) for v in split_returns(result, num_returns)])


# Local mode (tasks are threads of the driver): tasks cancelled before they started.
_cancel_lock = threading.Lock()
_cancelled_local = set()
_started_local = set()


def cancel_local(task_id):
    """Local mode: skip task ``task_id`` when it comes to run (True if it had not started)."""
    with _cancel_lock:
        if task_id in _started_local:
            return False
        _cancelled_local.add(task_id)
        return True


def run_task(function, meta, packed_args, deps):
    """Run one task inside Yuanrong; returns its Box. Exceptions named by the task's
    ``retry_exceptions`` are retried here, up to ``max_retries`` times."""
    task_id, name, num_returns, env_vars, resources, retry_on, retries, dep_indexes = meta
    with _cancel_lock:
        if task_id in _cancelled_local:
            _cancelled_local.discard(task_id)
            return Box(False, errors.TaskCancelled(task_id))
        _started_local.add(task_id)
    try:
        return _run_task(function, task_id, name, num_returns, env_vars, resources, retry_on,
                         retries, dep_indexes, packed_args, deps)
    finally:
        with _cancel_lock:
            _started_local.discard(task_id)


def _run_task(function, task_id, name, num_returns, env_vars, resources, retry_on, retries,
              dep_indexes, packed_args, deps):
    args, kwargs, failed = load_args(packed_args, dep_indexes, deps)
    if failed is not None:
        return failed
    hook_failure = setup_once(env_vars or {})
    if hook_failure is not None:
        return Box(False, errors.EnvSetupFailed(hook_failure))
    token = current_call.set((task_id, name, None, None, resources))
    saved = apply_env(env_vars)
    try:
        while True:
            try:
                return result_box(function(*args, **kwargs), num_returns)
            except BaseException as exc:  # noqa: BLE001 - the caller gets every failure
                if retries != 0 and _should_retry(exc, retry_on):
                    retries -= 1
                    continue
                return Box(False, task_failure(exc, name))
    finally:
        restore_env(saved)
        current_call.reset(token)


def _should_retry(exc, retry_on):
    if not retry_on or not isinstance(exc, Exception):
        return False
    return retry_on is True or isinstance(exc, tuple(retry_on))


#: Functions by key, in the process that runs them. In local mode the driver fills it; in a
#: cluster, runtimes fill it from the pickled function the first call for a key carries.
FUNCTIONS = {}


def run_keyed(key, blob, meta, packed_args, *deps):
    """The one function the adapter registers with yr (importable, so yr pickles it by
    reference on every call instead of pickling a user closure by value)."""
    function = FUNCTIONS.get(key)
    if function is None:
        function = FUNCTIONS[key] = serialization.loads_plain(blob)
    return run_task(function, meta, packed_args, deps)


class ActorShell:
    """Hosts one user actor inside a yr instance; every method call goes through :meth:`call`.

    A constructor failure is kept and reported by every call (Ray's semantics: creation is
    asynchronous and calls fail with ActorDiedError), instead of failing the creation call.
    """

    def __init__(self, cls, meta, packed_args, *deps):
        actor_id, name, class_name, is_async, env_vars, resources, dep_indexes = meta
        self.actor_id, self.name, self.class_name = actor_id, name, class_name
        self.resources = resources
        self.init_error = None
        self.instance = None
        self.loop = None
        self.exited = False
        apply_env(env_vars)
        hook_failure = setup_once(env_vars or {})
        args, kwargs, failed = load_args(packed_args, dep_indexes, deps)
        if hook_failure is not None:
            failed = Box(False, errors.EnvSetupFailed(hook_failure))
        token = current_call.set((None, f"{class_name}.__init__", actor_id, name, resources))
        try:
            if failed is not None:
                self.init_error = failed.value
            else:
                self.instance = cls(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001
            self.init_error = task_failure(exc, f"{class_name}.__init__")
        finally:
            current_call.reset(token)
        if is_async and self.init_error is None:
            self.loop = asyncio.new_event_loop()
            threading.Thread(target=self.loop.run_forever, daemon=True,
                             name="ray-adapter-yr-actor-loop").start()

    def call(self, meta, packed_args, *deps):
        method_name, task_id, name, num_returns, dep_indexes = meta
        if self.exited:
            return Box(False, errors.ActorDied(self.actor_id, errors.ActorDeath.EXITED, self.class_name))
        if self.init_error is not None:
            return Box(False, errors.ActorDied(self.actor_id, errors.ActorDeath.CREATION_FAILED,
                                               self.class_name, creation_error=self.init_error))
        args, kwargs, failed = load_args(packed_args, dep_indexes, deps)
        if failed is not None:
            return failed
        token = current_call.set((task_id, name, self.actor_id, self.name, self.resources))
        shell_token = current_shell.set(self)
        try:
            result = getattr(self.instance, method_name)(*args, **kwargs)
            if inspect.isawaitable(result):
                if self.loop is not None:
                    ctx = contextvars.copy_context()
                    result = asyncio.run_coroutine_threadsafe(
                        _in_context(ctx, result), self.loop).result()
                    if result is _EXITED:
                        raise SystemExit(0)
                else:
                    result = asyncio.run(_await(result))
            return result_box(result, num_returns)
        except SystemExit:
            self.exited = True  # exit_actor() or sys.exit(): this call reports the death
            return Box(False, errors.ActorDied(self.actor_id, errors.ActorDeath.EXITED, self.class_name))
        except BaseException as exc:  # noqa: BLE001
            return Box(False, task_failure(exc, name, self.class_name))
        finally:
            current_shell.reset(shell_token)
            current_call.reset(token)


async def _await(awaitable):
    return await awaitable


_EXITED = object()  # an async method called exit_actor() / sys.exit()


async def _in_context(ctx, awaitable):
    for var, value in ctx.items():
        var.set(value)
    try:
        return await awaitable
    except SystemExit:  # would stop the actor's event loop itself: report it to the caller
        return _EXITED
