"""What the task manager and the actor manager share: device-visibility variables for a grant,
the wire form of a grant's placement (``protocol.Assignment``), errors of work the scheduler can
never place, and Ray's ``(raylet)`` notices on the driver's stderr. Stateless: safe anywhere."""
import os
import sys

from ray_adapter.core import errors, serialization
from ray_adapter.core.embedded import protocol


class SerializedRetry(bytes):
    """A ``retry_exceptions`` a worker submitted, still serialized (:func:`retry_blob`'s
    form): the driver passes it on to the worker that runs the call, never unpickling the
    user's exception classes itself."""


def retry_blob(spec):
    """``retry_exceptions`` as it travels to a worker: False / True / a tuple of exception
    classes, serialized as functions are (cloudpickle: a class defined in the driver's
    ``__main__`` travels by value and is the very class the task's own code raises); b"" for
    none."""
    if isinstance(spec, SerializedRetry):
        return bytes(spec)
    if not spec:
        return b""
    return serialization.dumps_plain(tuple(spec) if isinstance(spec, list) else spec)


def assignment(grant, placement):
    """The protocol.Assignment of a grant: its device ids and, in a group, its bundle."""
    bundle = grant.bundle
    if bundle is None and not grant.devices:
        return None
    return protocol.Assignment(
        {k: list(v) for k, v in grant.devices.items()},
        placement.group_id if bundle is not None else b"",
        bundle.index if bundle is not None else -1,
        bool(bundle is not None and placement.capture))


def unschedulable_error(name, reason, group_id):
    if reason == "group_removed":
        return errors.PlacementGroupRemoved(group_id)
    return errors.Unschedulable(name, errors.UnschedulableReason.NODE_AFFINITY)


def device_env(devices, env_vars=None):
    """Device-visibility variables for granted device ids, unless the user asked Ray not to
    set them (``RAY_EXPERIMENTAL_NOSET_*``, non-empty): in the environment the worker gets,
    its runtime env's ``env_vars`` (as NeMo-RL's Megatron and vLLM workers set it) over this
    process's, as Ray's worker reads it in its own environment."""
    env = {}
    if not devices:
        return env

    def noset(name):  # (Ray: "1" or "true", any case; "0" in env_vars undoes the process's)
        value = (env_vars or {}).get(name, os.environ.get(name))
        return str(value or "").lower() in ("1", "true")

    if "GPU" in devices and not noset("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"):
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in devices["GPU"])
    if "NPU" in devices and not noset("RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"):
        env["ASCEND_RT_VISIBLE_DEVICES"] = ",".join(str(i) for i in devices["NPU"])
    return env


def notice_retry(name, retries_left, error_data, pid=None, exit_code=None):
    """Tell the user a failed task is retried, as Ray's "Task ... failed. There are N retries
    remaining" line: ``error_data`` is the stored error it raised (None: its worker died with
    ``exit_code``); ``retries_left`` < 0 means infinite."""
    if error_data is not None:
        try:
            err = serialization.loads(error_data)
            detail = "User exception:\n" + errors.task_failure_text(
                err.function_name, err.traceback_str, err.pid, err.ip,
                getattr(err, "actor_id", None), err.actor_repr)
        except Exception:  # noqa: BLE001 - a notice never fails the retry
            detail = "the task raised an exception"
    else:
        detail = f"the worker running it died (pid={pid}, exit code {exit_code})"
    left = "infinite" if retries_left < 0 else retries_left
    notice(f"Task {name} failed. There are {left} retries remaining, so the task will be "
           f"retried. Error: {detail}")


def notice_worker_died(pid, exit_code):
    """Ray's notice when a worker process dies unexpectedly (on stderr here: Ray's goes to
    stdout at a timing-dependent place, which no program can rely on)."""
    notice("A worker died or was killed while executing a task by an unexpected system error. "
           f"Worker PID: {pid} Worker exit type: SYSTEM_ERROR Worker exit detail: the worker "
           f"process exited unexpectedly with exit code {exit_code}.")


def notice(text):
    """A runtime notice on the driver's stderr, tagged as Ray tags its system notices."""
    try:
        sys.stderr.write(f"\x1b[33m(raylet)\x1b[0m {text}\n")  # (yellow, as Ray's tag)
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
