"""What the task manager and the actor manager share: device-visibility variables for a grant,
the wire form of a grant's placement (``protocol.Assignment``), errors of work the scheduler can
never place, and Ray's ``(raylet)`` notices on the driver's stderr. Stateless: safe anywhere."""
import os
import sys

from ray_adapter.core import errors, serialization
from ray_adapter.core.embedded import protocol
from ray_adapter.core.embedded.resources import split_visible


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


def assignment(grant, placement, devices=None):
    """The protocol.Assignment of a grant: its device ids (``devices``: as the worker sees
    them, see :func:`seen_devices`; default the grant's) and, in a group, its bundle."""
    bundle = grant.bundle
    devices = grant.devices if devices is None else devices
    if bundle is None and not devices:
        return None
    return protocol.Assignment(
        {k: list(v) for k, v in devices.items()},
        placement.group_id if bundle is not None else b"",
        bundle.index if bundle is not None else -1,
        bool(bundle is not None and placement.capture))


def unschedulable_error(name, reason, group_id):
    if reason == "group_removed":
        return errors.PlacementGroupRemoved(group_id)
    return errors.Unschedulable(name, errors.UnschedulableReason.NODE_AFFINITY)


def seen_devices(devices, env_vars, node):
    """The device ids a task or actor granted ``devices`` on ``node`` sees (its
    ``ray.get_gpu_ids()``, accelerator ids and ``CUDA_VISIBLE_DEVICES``). When its runtime
    env's ``env_vars`` set ``CUDA_VISIBLE_DEVICES``, Ray's worker, started with that variable,
    maps each granted slot through the list, as strs (the whole list when a slot is beyond
    it): slot 0 under ``"40,41"`` is ``"40"``. Otherwise ``devices`` as granted."""
    listed = (env_vars or {}).get("CUDA_VISIBLE_DEVICES")
    gpus = devices.get("GPU") if devices else None
    if listed is None or not gpus:
        return devices
    entries = split_visible(listed)
    node_ids = list(node.resources.device_ids.get("GPU") or ()) if node is not None else []
    slots = [i if isinstance(i, int) or i not in node_ids else node_ids.index(i) for i in gpus]
    if all(isinstance(s, int) and s < len(entries) for s in slots):
        mapped = [entries[s] for s in slots]
    else:
        mapped = list(entries)
    return dict(devices, GPU=mapped)


def device_env(devices, env_vars=None, process_get=os.environ.get):
    """Device-visibility variables for granted device ids, unless the user asked Ray not to
    set them (``RAY_EXPERIMENTAL_NOSET_*`` "1" or "true"): in the environment the worker gets,
    its runtime env's ``env_vars`` (as NeMo-RL's Megatron and vLLM workers set it) over this
    process's (``process_get``: how to read it; yr's local mode reads it past the variables
    other calls and actors hold there), as Ray's worker reads it in its own environment."""
    env = {}
    if not devices:
        return env

    def noset(name):  # (Ray: "1" or "true", any case; "0" in env_vars undoes the process's)
        value = (env_vars or {}).get(name, process_get(name))
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
