"""Helpers shared by every place that runs user code for the core (embedded workers, the
Yuanrong task runner and actor shell): per-call environment variables, the failure record of a
raised exception, and the split of a multi-value return."""
import os
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


def restore_env(saved):
    """Undo :func:`apply_env`."""
    for k, v in (saved or {}).items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def task_failure(exc, name, actor_repr=None):
    """The :class:`errors.TaskFailed` for ``exc`` raised by the call ``name``: the exception
    itself as the cause and its traceback without the runner's own frame."""
    tb = exc.__traceback__.tb_next if exc.__traceback__ else None
    text = "".join(traceback.format_exception(type(exc), exc, tb))
    return errors.TaskFailed(exc, text, name, os.getpid(), NODE_IP, actor_repr=actor_repr,
                             cause_repr=repr(exc))


def split_returns(result, num_returns):
    """``(result,)`` for one return, else the ``num_returns`` values of ``result``; raises
    ``ValueError`` (as Ray) when the count differs."""
    if num_returns == 1:
        return (result,)
    try:
        values = tuple(result)
    except TypeError:
        values = None
    if values is None or len(values) != num_returns:
        got = len(values) if values is not None else "a non-sequence"
        raise ValueError(f"Task returned {got} objects, but num_returns={num_returns}.")
    return values
