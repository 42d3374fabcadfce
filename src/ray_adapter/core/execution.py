"""Helpers shared by every place that runs user code for the core (embedded workers, the
Yuanrong task runner and actor shell): per-call environment variables, the failure record of a
raised exception, the split of a multi-value return, building an actor instance (``async def
__init__`` too) and finding its methods, and serializing call arguments."""
import inspect
import os
import sys
import threading
import traceback

from ray_adapter.core import errors

NODE_IP = "127.0.0.1"


def wait_seconds(timeout):
    """A timeout threading accepts: Ray allows any finite value (1e10) and inf for "no limit"."""
    if timeout is None or timeout != timeout:  # None, or NaN
        return None
    return None if timeout >= threading.TIMEOUT_MAX else timeout


def apply_env(env_vars):
    """Set ``env_vars`` in ``os.environ``; returns what :func:`restore_env` needs to undo it."""
    if not env_vars:
        return None
    saved = {k: os.environ.get(k) for k in env_vars}
    os.environ.update({k: str(v) for k, v in env_vars.items()})
    return saved


def with_thread_default(env_vars, resources):
    """``env_vars`` of a call, plus Ray's default ``OMP_NUM_THREADS`` when neither they nor
    the process's environment set it: the CPUs assigned to the call (``resources``, a
    ``{name: amount}`` dict) rounded down, at least 1 (an actor without ``num_cpus``: 1).
    Mirrors what Ray's workers do before running a call."""
    if "OMP_NUM_THREADS" in os.environ or (env_vars and "OMP_NUM_THREADS" in env_vars):
        return env_vars
    merged = dict(env_vars or {})
    merged["OMP_NUM_THREADS"] = str(max(int(resources.get("CPU") or 1), 1))
    return merged


def sync_torch_threads():
    """torch reads OMP_NUM_THREADS when it is imported: one imported before the variable was
    set for this call (a worker forked from a template that imported it) is told now."""
    torch = sys.modules.get("torch")
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if torch is not None and threads.isdigit() and int(threads) > 0:
        try:
            if torch.get_num_threads() != int(threads):
                torch.set_num_threads(int(threads))
        except Exception:  # noqa: BLE001 - torch half-imported, or an odd build: left as is
            pass


def restore_env(saved):
    """Undo :func:`apply_env`."""
    for k, v in (saved or {}).items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def exit_grace_seconds(default):
    """How long calls still running at interpreter exit may finish (seconds):
    ``RAY_ADAPTER_EXIT_GRACE_S`` when set to a number, else ``default``."""
    try:
        return max(0.0, float(os.environ["RAY_ADAPTER_EXIT_GRACE_S"]))
    except (KeyError, ValueError):
        return default


#: Environment variable giving worker processes the driver script's module name.
MAIN_MODULE_ENV = "RAY_ADAPTER_DRIVER_MAIN_MODULE"


def main_module_name():
    """The module name Ray gives code of the driver's script (``__main__``): the script's file
    name without ``.py`` (in a worker process, the driver's, from :data:`MAIN_MODULE_ENV`)."""
    name = os.environ.get(MAIN_MODULE_ENV)
    if name:
        return name
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    return os.path.splitext(os.path.basename(path))[0] if path else "__main__"


def function_descriptor(obj, method=None):
    """What ``get_task_function_name()`` answers in a task or actor call, as Ray's function
    descriptor reads: ``module.function``, ``module.Class.method`` (``obj`` the class); an
    async method by its qualified name (``module.outer.<locals>.Class.method``), as Ray."""
    module = getattr(obj, "__module__", None) or "__main__"
    if module == "__main__":
        module = main_module_name()
    if method is not None:
        attr = getattr(obj, method, None)
        if inspect.iscoroutinefunction(attr) or inspect.isasyncgenfunction(attr):
            return f"{module}.{attr.__qualname__}"
    name = f"{module}.{getattr(obj, '__name__', type(obj).__name__)}"
    return f"{name}.{method}" if method else name


#: The adapter's own source tree: the frames of the runtime that called the user's code.
_ADAPTER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


class ActorLabel:
    """What a failed actor call's error quotes of its actor, as Ray's ``RayTaskError`` header
    does (``actor_id=<hex>, repr=<repr(instance)>``). ``instance`` is set once the
    constructor returned; before that (and when the instance's ``__repr__`` raises) the class
    name stands in for the repr."""

    __slots__ = ("actor_id", "class_name", "instance")

    def __init__(self, actor_id, class_name, instance=None):
        self.actor_id = actor_id
        self.class_name = class_name
        self.instance = instance

    def describe(self):
        """``(actor id hex or None, repr)``; called only when a call failed."""
        text = self.class_name
        if self.instance is not None:
            try:
                text = repr(self.instance)
            except Exception:  # noqa: BLE001 - a user's __repr__ that raises
                pass
        actor_id = self.actor_id
        return (actor_id.hex() if isinstance(actor_id, bytes) else actor_id), text


def actor_fields(actor):
    """``{"actor_repr": ..., "actor_id": ...}`` for a :class:`TaskFailed` of a call on
    ``actor`` (an :class:`ActorLabel`, a plain repr string, or None for a task)."""
    if actor is None:
        return {}
    if isinstance(actor, ActorLabel):
        actor_id, text = actor.describe()
        return {"actor_repr": text, "actor_id": actor_id}
    return {"actor_repr": actor}


def task_failure(exc, name, actor=None):
    """The :class:`errors.TaskFailed` for ``exc`` raised by the call ``name`` (on ``actor``,
    see :func:`actor_fields`): the exception itself as the cause and its traceback from the
    user's first frame (the runtime's frames that called it left out, as Ray's traceback
    starts in the user's code)."""
    tb = exc.__traceback__.tb_next if exc.__traceback__ else None
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_ADAPTER_DIR):
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(exc), exc, tb))
    return errors.TaskFailed(exc, text, name, os.getpid(), NODE_IP, cause_repr=repr(exc),
                             **actor_fields(actor))


def cancelled_failure(task_id, name, actor=None, exc=None):
    """A call interrupted while it ran (or handed to an async actor's loop): Ray reports
    ``RayTaskError(TaskCancelledError)``, its text the user's frames of ``exc`` (the
    CancelledError that interrupted it, if any) and ``ray.exceptions.TaskCancelledError:
    Task: TaskID(...) was cancelled.`` (the runtime's frames that raised it are left out)."""
    tb = exc.__traceback__.tb_next if exc is not None and exc.__traceback__ else None
    frames = [f for f in traceback.extract_tb(tb) if not f.filename.startswith(_ADAPTER_DIR)]
    text = ("Traceback (most recent call last):\n" + "".join(traceback.format_list(frames))
            + f"ray.exceptions.TaskCancelledError: Task: TaskID({task_id.hex()}) was cancelled.\n")
    return errors.TaskFailed(errors.TaskCancelled(task_id), text, name, os.getpid(), NODE_IP,
                             cause_repr="TaskCancelledError()", **actor_fields(actor))


def argument_failure(inner, name, actor=None, pid=None):
    """The :class:`errors.TaskFailed` of the call ``name`` whose argument failed with the core
    error ``inner``: Ray fails the call itself, its error quoting the argument's ("At least one
    of the input arguments for this task could not be computed"). ``pid`` is the process
    that found it (default: this one).

    A chain of such calls stays flat: ``cause`` is the root failure (never itself an argument
    failure) and ``argument_chain`` the calls between, nearest first, as
    ``(function_name, pid, ip, actor_repr, actor_id)`` -- a chain hundreds of calls long
    pickles without nesting hundreds of objects."""
    chain = []
    if isinstance(inner, errors.TaskFailed) and inner.failed_argument:
        chain = [(inner.function_name, inner.pid, inner.ip, inner.actor_repr, inner.actor_id)]
        chain.extend(inner.argument_chain)
        inner = inner.cause
    failure = errors.TaskFailed(inner, "", name, pid or os.getpid(), NODE_IP, cause_repr=repr(inner),
                                failed_argument=True, **actor_fields(actor))
    failure.argument_chain = chain
    return failure


class GeneratorFailed(Exception):
    """Raised by :func:`split_returns` when the generator of a generator function (an integer
    ``num_returns``) gave fewer than ``num_returns`` values: ``values`` are those it gave (the
    first returns, as in Ray), ``error`` fails the remaining returns: the exception the
    generator raised (``raised``: True) or the count's ``ValueError``. Ray does not retry such
    a task (its error comes while the returns are stored, not from the call)."""

    def __init__(self, values, error, raised):
        super().__init__(values, error, raised)
        self.values, self.error, self.raised = values, error, raised


def split_returns(result, num_returns, generator_function=False):
    """``(result,)`` for one return, else the ``num_returns`` values of ``result``. As Ray:
    ``TypeError`` for a result without a length, ``ValueError`` when the count differs. The
    generator of a generator function (called with an integer ``num_returns``) gives its
    first ``num_returns`` values (it is asked for one more: one more value, or an exception
    once all the returns exist, is reported on stderr, as Ray's "Unhandled error", and
    dropped); giving fewer raises :class:`GeneratorFailed`."""
    if generator_function and inspect.isgenerator(result):
        values = []
        try:
            for value in result:
                if len(values) == num_returns:
                    result.close()
                    _stderr(f"Unhandled error: Task returned more than num_returns={num_returns} "
                            "objects; the values after the first ones are dropped.")
                    break
                values.append(value)
        except Exception as exc:  # noqa: BLE001 - the generator's own exception
            if len(values) < num_returns:
                raise GeneratorFailed(values, exc, True) from None
            _stderr(f"Unhandled error: Task threw exception, but all {num_returns} return values "
                    f"already created: {type(exc).__name__}: {exc}")
        if len(values) != num_returns:
            raise GeneratorFailed(values, ValueError(
                f"Task returned {len(values)} objects, but num_returns={num_returns}."), False)
        return tuple(values)
    if num_returns == 1:
        return (result,)
    if inspect.isasyncgen(result):
        raise TypeError(f"'{type(result).__name__}' object is not iterable")  # as Ray says it
    count = len(result)  # TypeError ("object of type 'int' has no len()"), as in Ray
    if count != num_returns:
        raise ValueError(f"Task returned {count} objects, but num_returns={num_returns}.")
    return tuple(result)


def _stderr(text):
    import sys

    try:
        sys.stderr.write(text + "\n")
    except (OSError, ValueError):
        pass


def serialize_args(args, kwargs):
    """``serialization.dumps((args, kwargs))``; a ``TypeError`` of the pickler raises
    :class:`errors.Unserializable` naming the first argument that fails (anything else passes,
    as in :func:`serialize_value`)."""
    from ray_adapter.core import serialization

    if not args and not kwargs:
        return serialization.NO_ARGS
    try:
        return serialization.dumps((args, kwargs))
    except TypeError as exc:  # as Ray: other errors (PicklingError, StoreFull...) pass as they are
        culprit = _first_unserializable(list(args) + list((kwargs or {}).values()))
        raise errors.Unserializable("argument", f"{type(exc).__name__}: {exc}",
                                    repr(culprit) if culprit is not None else None) from None


def serialize_value(value):
    """``serialization.dumps(value)`` for ``put``; a ``TypeError`` of the pickler becomes
    :class:`errors.Unserializable`; anything else it raises (``PicklingError`` for a value
    nested too deep, a ``__reduce__``'s own error) and :class:`errors.StoreFull` pass as they
    are, as Ray lets them."""
    from ray_adapter.core import serialization

    try:
        return serialization.dumps(value)
    except TypeError as exc:
        raise errors.Unserializable("put value", f"{type(exc).__name__}: {exc}", _safe_repr(value)) from None


def _first_unserializable(values):
    from ray_adapter.core import serialization

    for value in values:
        try:
            serialization.dumps(value)
        except Exception:  # noqa: BLE001
            return _Repr(_safe_repr(value))
    return None


class _Repr:
    __slots__ = ("text",)

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


def _safe_repr(value):
    try:
        return repr(value)
    except Exception:  # noqa: BLE001 - a broken __repr__
        return f"<{type(value).__name__} object>"


def intended_exit(exc):
    """True if ``exc`` (a SystemExit raised by an actor method) ends the actor on purpose:
    ``exit_actor()`` and ``sys.exit(0)``. Any other exit code is a crash, as in Ray (the actor
    restarts if it may)."""
    return getattr(exc, "code", None) == 0


def exit_status(exc):
    """The process exit status Python itself gives ``SystemExit`` ``exc``: its code if an int,
    0 for None, else 1 after writing the code to stderr (``sys.exit("message")``). A worker
    that ends this way reports that status, as Ray's does ("exits with an exit code 3")."""
    code = getattr(exc, "code", None)
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    try:
        sys.stderr.write(f"{code}\n")
    except (OSError, ValueError):
        pass
    return 1


def construct(cls, args, kwargs, run_coroutine):
    """A new instance of ``cls``; an ``async def __init__`` is awaited with
    ``run_coroutine(coro)`` (it runs the coroutine to its end and returns its result)."""
    if inspect.iscoroutinefunction(getattr(cls, "__init__", None)):
        instance = cls.__new__(cls)
        result = run_coroutine(instance.__init__(*args, **kwargs))
        if result is not None:
            raise TypeError(f"__init__() should return None, not '{type(result).__name__}'")
        return instance
    return cls(*args, **kwargs)


async def construct_async(cls, args, kwargs):
    """A new instance of ``cls``, made on the running loop (an async actor's constructor, as
    in Ray: a sync ``__init__`` sees the loop running, an ``async def __init__`` is awaited)."""
    if inspect.iscoroutinefunction(getattr(cls, "__init__", None)):
        instance = cls.__new__(cls)
        result = await instance.__init__(*args, **kwargs)
        if result is not None:
            raise TypeError(f"__init__() should return None, not '{type(result).__name__}'")
        return instance
    return cls(*args, **kwargs)


def _ray_ready(self):
    return True


def _ray_call(self, fn, *args, **kwargs):
    return fn(self, *args, **kwargs)


def _ray_terminate(self):
    from ray_adapter import core

    core.current().exit_current_actor()
    raise SystemExit(0)  # (an asyncio actor's: raised in the call's own coroutine, not a task)


#: Methods every actor has, as Ray adds them to the actor's class, unless the class defines them.
BUILTIN_METHODS = {"__ray_ready__": _ray_ready, "__ray_call__": _ray_call,
                   "__ray_terminate__": _ray_terminate}


def call_shutdown_hook(instance):
    """An actor ends gracefully (out of scope, ``exit_actor()``, ``__ray_terminate__``): call
    its ``__ray_shutdown__()`` if its class defines one (mirrors Ray's actor cleanup; not on
    ``ray.kill`` nor ``ray.shutdown()``). As in Ray 2.60 it is called plainly, not awaited (an
    ``async def`` one only makes a coroutine), and what it raises is reported on stderr
    without stopping the exit. Returns False when the hook called ``sys.exit()`` (which ends
    the hook only: the exit goes on), else True."""
    hook = getattr(instance, "__ray_shutdown__", None)
    if hook is None or not callable(hook):
        return True
    try:
        hook()
    except SystemExit:
        return False
    except Exception:  # noqa: BLE001 - reported, and the actor leaves anyway
        sys.stderr.write("Error during actor __ray_shutdown__ method\n")
        traceback.print_exc()
    return True


def actor_method(instance, name):
    """The bound method ``name`` of an actor instance (``__ray_ready__``, ``__ray_call__`` and
    ``__ray_terminate__`` exist on every actor); raises AttributeError as ``getattr`` does."""
    try:
        return getattr(instance, name)
    except AttributeError:
        builtin = BUILTIN_METHODS.get(name)
        if builtin is None:
            raise
        return builtin.__get__(instance)
