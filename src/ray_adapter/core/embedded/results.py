"""Arguments in, results out, for the user code a worker runs: resolving a call's arguments,
packing its results or its failure into payloads, and the retry decision for an exception.

Pure functions of the message and the value; any thread may call them.
"""
import inspect
import os
import pickle
import sys
import traceback

from ray_adapter.core import errors, serialization
from ray_adapter.core.embedded.protocol import from_payload, to_payload
from ray_adapter.core.execution import (NODE_IP, GeneratorFailed, actor_fields, argument_failure, split_returns,
                                        task_failure)
from ray_adapter.core.interface import ArgRef

_NO_ARGS_DATA = serialization.NO_ARGS.data  # the payload of a call without arguments

loads_plain = pickle.loads


class Cancelled(KeyboardInterrupt):
    """Raised inside a running task by a non-force cancel: a ``KeyboardInterrupt``, as Ray's
    ``ray.cancel`` documents (user ``except Exception`` blocks do not swallow it; ``except
    KeyboardInterrupt`` cleanup runs)."""


class ArgumentFailed(Exception):
    """Raised by :func:`resolve_args` for a call one of whose arguments failed: ``inner`` is
    that argument's core error (the call answers with ``argument_failure``)."""

    def __init__(self, inner):
        super().__init__(inner)
        self.inner = inner


def resolve_args(payload, deps, buffers):
    """The call's ``(args, kwargs)``, top-level ref arguments replaced by their values.
    Raises :class:`ArgumentFailed` when one of them holds an error or cannot be rebuilt
    (then, as in Ray, a system error: :class:`errors.Undeserializable`)."""
    for dep in deps or ():
        if dep.failed:
            raise ArgumentFailed(serialization.loads(from_payload(dep.value, buffers)))
    if not deps and payload.data == _NO_ARGS_DATA:
        return (), {}
    try:
        args, kwargs = serialization.loads_value(from_payload(payload, buffers))
        if deps:
            # Each place a ref is passed gets a value of its own, as Ray reads each argument:
            # a torch tensor passed twice is two tensors (a numpy array, read-only, two views).
            values = {d.object_id: d.value for d in deps}

            def read(ref):
                return serialization.loads_value(from_payload(values[ref.object_id], buffers))

            args = tuple(read(a) if type(a) is ArgRef else a for a in args)
            if kwargs:
                kwargs = {k: read(v) if type(v) is ArgRef else v for k, v in kwargs.items()}
    except errors.Undeserializable as failed:
        raise ArgumentFailed(failed) from None
    return args, kwargs


def from_generator_function(result, function):
    """The ``generator_function`` flag :func:`pack_results` needs: only a generator result asks
    whether ``function`` is a generator function (a check that costs more than the call of a
    small function)."""
    return inspect.isgenerator(result) and inspect.isgeneratorfunction(function)


def pack_results(result, num_returns, generator_function=False, name="", actor=None):
    """``(ok, payloads, buffers)`` for a call's result (``num_returns`` values). A result that
    does not split into ``num_returns`` values or cannot be serialized fails call ``name``.
    A generator that gave only its first k values (then raised, or ended): not ok, the k
    values' payloads then the error's, which fails the remaining returns (as in Ray)."""
    buffers = []
    try:
        payloads = [to_payload(serialization.dumps(v), buffers)
                    for v in split_returns(result, num_returns, generator_function)]
    except GeneratorFailed as failed:
        error = (task_failure(failed.error, name, actor) if failed.raised
                 else result_failure(failed.error, name, actor))
        try:
            payloads = [to_payload(serialization.dumps(v), buffers) for v in failed.values]
        except Exception as exc:  # noqa: BLE001
            return pack_error(result_failure(exc, name, actor))
        return False, payloads + [to_payload(serialization.dumps_error(error), buffers)], buffers
    except Exception as exc:  # noqa: BLE001
        return pack_error(result_failure(exc, name, actor))
    return True, payloads, buffers


def result_failure(exc, name, actor=None):
    """The failure of a call whose *result* was wrong: Ray shows the exception without the
    runtime's own frames."""
    text = "".join(traceback.format_exception_only(type(exc), exc))
    return errors.TaskFailed(exc, text, name, os.getpid(), NODE_IP, cause_repr=repr(exc),
                                  **actor_fields(actor))


def error_data(core_error):
    """The stored form of a core error (:mod:`ray_adapter.core.errors`): what the object table
    seals as a failed object's data."""
    return serialization.dumps(core_error)


def argument_failure_data(data, name, actor=None, pid=None):
    """The stored error of the call ``name`` (on ``actor``: an ``execution.ActorLabel``) that
    does not run because an argument holds the stored error ``data``: Ray's call fails itself,
    quoting its argument's error (see ``execution.argument_failure``). ``pid`` is the process
    the call was bound for (an actor's), default the driver, which found the failed argument.
    An argument error that cannot be rebuilt here (its exception class is not importable in
    the driver) is passed on as it is."""
    try:
        inner = serialization.loads(data)
        return serialization.dumps(argument_failure(inner, name, actor, pid))
    except Exception:  # noqa: BLE001 - never leave the call unanswered
        return data


def pack_error(core_error):
    """``(False, [payload], buffers)`` for a core error (the driver repeats it per return)."""
    buffers = []
    return False, [to_payload(serialization.dumps_error(core_error), buffers)], buffers


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
    """Flush stdout and stderr, a pending partial line of output included (the work ended)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            finish = getattr(stream, "finish_line", None)
            if finish is not None:
                finish()
            stream.flush()
        except Exception:
            pass
