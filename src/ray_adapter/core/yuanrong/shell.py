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
from ray_adapter.core.execution import (GeneratorFailed, argument_failure, cancelled_failure,
                                        function_descriptor, split_returns, task_failure,
                                        with_thread_default)
from ray_adapter.core.interface import ArgRef
from ray_adapter.core.embedded.task_support import device_env, seen_devices
from ray_adapter.core.yuanrong import thread_env
from ray_adapter.core.yuanrong.envs import setup_once, shared_environ

# (task_id, task_name, actor_id, actor_name, resources) of the call running in this thread.
current_call = contextvars.ContextVar("ray_adapter_yr_call", default=(None, "", None, None, {}))
#: The running call's function descriptor (``execution.function_descriptor``); "" outside one.
current_function = contextvars.ContextVar("ray_adapter_yr_function", default="")
# The ActorShell whose method is running in this thread / coroutine.
current_shell = contextvars.ContextVar("ray_adapter_yr_shell", default=None)
# (placement group id, capture) of the task or actor running in this thread, or None.
current_group = contextvars.ContextVar("ray_adapter_yr_group", default=None)
# Local mode: the device ids granted to the running task or actor ({"GPU": [0]}).
current_devices = contextvars.ContextVar("ray_adapter_yr_devices", default=None)
# Local mode: the Grant of the running task (its CPUs are lent back while it waits in get).
current_grant = contextvars.ContextVar("ray_adapter_yr_grant", default=None)


def local_resources():
    """The LocalResources of the running local-mode backend (None on a cluster)."""
    if not core.is_started():
        return None
    return getattr(core.current(), "local_resources", None)


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
    stands for. Returns ``(args, kwargs, failed_box)``: an argument that failed, or that cannot
    be rebuilt (:class:`errors.Undeserializable`, as Ray's system error), fails the call. Each
    place a ref is passed gets a value of its own, as Ray reads each argument."""
    try:
        args, kwargs = _unpack_args(packed_args)
        if not deps:
            return args, kwargs, None
        refs = [a for a in args if type(a) is ArgRef] + [v for v in kwargs.values() if type(v) is ArgRef]
        values = {}
        for ref, index, box in zip(refs, dep_indexes, deps):
            if not box.ok:
                return None, None, box
            value = box.value if index is None else box.value[index]
            if type(value) is Box:  # a return a failed generator did not give
                return None, None, value
            values[ref.object_id] = value
        args = tuple(_unpack(values[a.object_id]) if type(a) is ArgRef else a for a in args)
        kwargs = {k: _unpack(values[v.object_id]) if type(v) is ArgRef else v for k, v in kwargs.items()}
    except errors.Undeserializable as failed:
        return None, None, Box(False, failed)
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
        return serialization.loads_value(packed)
    return packed, {}


def _unpack(packed):
    """A value as a reader gets it; raises :class:`errors.Undeserializable` for one that cannot
    be rebuilt."""
    return serialization.loads_value(packed) if type(packed) is serialization.Serialized else packed


unpack = _unpack


def result_box(result, num_returns, generator_function=False, name="", actor=None):
    """A successful call's Box, split into ``num_returns`` packed values when more than one
    (the generator of a generator function gives its first values). A generator that gave
    only its first k values (then raised, or ended) fails the remaining returns, as in Ray:
    their elements are failed Boxes (none given: the whole Box failed)."""
    if num_returns == 1 and not generator_function:
        return Box(True, pack(result))
    try:
        values = split_returns(result, num_returns, generator_function)
    except GeneratorFailed as failed:
        error = task_failure(failed.error, name, actor)
        if not failed.values:
            return Box(False, error)
        return Box(True, [pack(v) for v in failed.values]
                   + [Box(False, error)] * (num_returns - len(failed.values)))
    if num_returns == 1:
        return Box(True, pack(values[0]))
    return Box(True, [pack(v) for v in values])


# Local mode (tasks are threads of the driver): tasks cancelled before they started, and
# running calls asked to cancel (a thread cannot be interrupted: they see is_canceled(), and a
# streaming call stops at its next item).
_cancel_lock = threading.Lock()
_cancelled_local = set()
_started_local = set()
_cancel_requested = set()


def cancel_local(task_id):
    """Local mode: skip task ``task_id`` when it comes to run (True if it had not started);
    a running one is flagged instead."""
    with _cancel_lock:
        if task_id in _started_local:
            _cancel_requested.add(task_id)
            return False
        _cancelled_local.add(task_id)
        return True


def request_cancel(task_id):
    """Flag a running call as cancelled (it sees ``is_canceled()``)."""
    with _cancel_lock:
        _cancel_requested.add(task_id)


#: Local mode: actor calls whose method has been entered -> the concurrent future of an async
#: call on its event loop (None: a sync call, which a thread cannot interrupt).
_started_calls = {}


def cancel_actor_call(task_id):
    """Local mode, ``ray.cancel`` of actor call ``task_id``: True if its method has started --
    it then ends as Ray ends it (a sync call runs on and answers TaskCancelledError when it
    returns; an async one is interrupted now: RayTaskError(TaskCancelledError)); False if not
    (it will never run: :func:`start_actor_call` refuses it)."""
    with _cancel_lock:
        _cancel_requested.add(task_id)
        if task_id not in _started_calls:
            return False
        running = _started_calls[task_id]
    if running is not None:
        running.cancel()  # (thread-safe: the loop cancels the coroutine)
    return True


def start_actor_call(task_id, running=None):
    """Record that actor call ``task_id``'s method starts (``running``: its async call's
    concurrent future); False if it was cancelled before (it must not run)."""
    with _cancel_lock:
        if task_id in _cancel_requested:
            return False
        _started_calls[task_id] = running
        return True


def cancel_requested(task_id):
    return task_id is not None and task_id in _cancel_requested


def _forget_cancel(task_id):
    with _cancel_lock:
        _cancel_requested.discard(task_id)
        _started_calls.pop(task_id, None)


# -- streaming generators ------------------------------------------------------------------------
#: task id -> the driver's stream of a streaming call running in this process (local mode);
#: see :mod:`.streams`. A call that finds none (a cluster runtime) returns its items at once.
SINKS = {}


class Collected:
    """A generator's items (Boxes), returned at once by a call that could not stream."""

    __slots__ = ("boxes",)

    def __init__(self, boxes):
        self.boxes = boxes

    def __reduce__(self):
        return Collected, (self.boxes,)


def stream_items(task_id, name, result, cancelled_box, actor=None):
    """Run the generator ``result`` of streaming call ``task_id``: each value to the call's
    stream as it is yielded (or collected when there is none); an exception it raises is its
    last item. Returns the call's Box (None; ``cancelled_box()`` once it was cancelled)."""
    sink = SINKS.get(task_id)
    boxes = [] if sink is None else None
    try:
        if not inspect.isgenerator(result):
            raise TypeError(f"the streaming call {name} returned {type(result).__name__}, not a "
                            "generator; num_returns='streaming' needs a generator function")
        for value in result:
            if cancel_requested(task_id):
                result.close()
                return cancelled_box()
            if sink is None:
                boxes.append(Box(True, pack(value)))
            elif not sink.put(Box(True, pack(value))) and cancel_requested(task_id):
                result.close()
                return cancelled_box()
            if cancel_requested(task_id):
                result.close()
                return cancelled_box()
    except Exception as exc:  # noqa: BLE001 - the generator's error is its last item
        box = Box(False, task_failure(exc, name, actor))
        if sink is None:
            boxes.append(box)
        else:
            sink.put(box, block=False)
    return Box(True, Collected(boxes) if boxes is not None else None)


async def stream_items_async(task_id, name, agen, cancelled_box, actor=None):
    """:func:`stream_items` for an async generator, on the actor's loop (a paused stream
    waits in the loop's executor, so the loop keeps serving other calls)."""
    sink = SINKS.get(task_id)
    boxes = [] if sink is None else None
    loop = asyncio.get_running_loop()
    try:
        async for value in agen:
            if sink is None:
                boxes.append(Box(True, pack(value)))
            elif sink.limit > 0:
                await loop.run_in_executor(None, sink.put, Box(True, pack(value)))
            else:
                sink.put(Box(True, pack(value)))
            if cancel_requested(task_id):
                await agen.aclose()
                return cancelled_box()
    except Exception as exc:  # noqa: BLE001
        box = Box(False, task_failure(exc, name, actor))
        if sink is None:
            boxes.append(box)
        else:
            sink.put(box, block=False)
    return Box(True, Collected(boxes) if boxes is not None else None)


def run_task(function, meta, packed_args, deps):
    """Run one task inside Yuanrong; returns its Box. Exceptions named by the task's
    ``retry_exceptions`` are retried here, up to ``max_retries`` times."""
    task_id = meta[0]
    group = meta[9] if len(meta) > 9 else None  # (placement group id, capture child tasks)
    with _cancel_lock:
        if task_id in _cancelled_local:
            _cancelled_local.discard(task_id)
            return Box(False, errors.TaskCancelled(task_id))
        _started_local.add(task_id)
    placement = meta[10] if len(meta) > 10 else None
    gate = local_resources()
    try:
        grant = None if gate is None else gate.acquire(task_id, meta[4], placement, meta[1])
    except errors.CoreError as exc:  # cancelled or unschedulable while it waited; shut down
        with _cancel_lock:
            _started_local.discard(task_id)
            _cancel_requested.discard(task_id)
        return Box(False, exc)
    group_token = current_group.set(group)
    grant_token = current_grant.set(grant)
    # Python code in the call reads its own env_vars and devices (local mode's overlay on
    # os.environ); the process environment has them too, for native code (see SharedEnviron).
    # OMP_NUM_THREADS as Ray defaults it (the variable only: torch's threads are the process's).
    env_vars = {k: str(v) for k, v in (meta[3] or {}).items()}
    devices = seen_devices(grant.devices, env_vars, grant.node) if grant is not None else None
    devices_token = current_devices.set(devices)
    env_token = thread_env.enter(with_thread_default(
        {**env_vars, **device_env(devices, env_vars, shared_environ.original)},
        meta[4] or {}))
    try:
        return _run_task(function, meta, packed_args, deps)
    finally:
        thread_env.leave(env_token)
        current_devices.reset(devices_token)
        current_grant.reset(grant_token)
        current_group.reset(group_token)
        if grant is not None:
            gate.release(task_id)
        with _cancel_lock:
            _started_local.discard(task_id)
            _cancel_requested.discard(task_id)


def _run_task(function, meta, packed_args, deps):
    task_id, name, num_returns, env_vars, resources, retry_on, retries, dep_indexes, streaming = meta[:9]
    args, kwargs, failed = load_args(packed_args, dep_indexes, deps)
    if failed is not None:
        return Box(False, argument_failure(failed.value, name))
    hook_failure = setup_once(env_vars or {})
    if hook_failure is not None:
        return Box(False, errors.EnvSetupFailed(hook_failure))
    token = current_call.set((task_id, name, None, None, resources))
    function_token = current_function.set(function_descriptor(function))
    held = shared_environ.acquire(env_vars)
    try:
        while True:
            try:
                result = function(*args, **kwargs)
                if streaming:
                    return stream_items(task_id, name, result, lambda: _cancelled_task(task_id, name))
                return result_box(result, num_returns, inspect.isgeneratorfunction(function), name)
            except BaseException as exc:  # noqa: BLE001 - the caller gets every failure
                if retries != 0 and _should_retry(exc, retry_on):
                    retries -= 1
                    continue
                return Box(False, task_failure(exc, name))
    finally:
        shared_environ.release(held)
        current_function.reset(function_token)
        current_call.reset(token)


def _cancelled_task(task_id, name):
    """A task stopped by a cancel while it ran: RayTaskError(TaskCancelledError), as in Ray."""
    return Box(False, cancelled_failure(task_id, name))


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
