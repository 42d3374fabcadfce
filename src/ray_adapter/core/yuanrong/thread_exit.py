"""yr-local: a process exit called by a task or actor says what it ends before it ends it.

yr's local mode runs tasks and actors as threads of the driver process. ``os._exit(n)`` (or
``os.abort()``) in such a call therefore ends the driver itself, where Ray would end only the
worker process (its caller sees ``WorkerCrashedError`` / ``ActorDiedError``). That cannot be
previewed faithfully on threads; what the adapter does is say so: while the backend runs in
local mode, ``os._exit`` and ``os.abort`` are wrapped, and a call made from inside a task or
actor call (the shell's ``current_call`` context says which) first writes a message on stderr
naming the call, the exit, and the embedded runtime (worker processes) as the faithful
preview; then the process exits as asked. Calls from the driver's own code (no task or actor
call in the calling context) go straight to the original functions, untouched.

``sys.exit`` needs no wrapper: it raises ``SystemExit``, which the task and actor shells turn
into the call's failure or the actor's exit, as Ray does.

Thread-safety: :func:`install` / :func:`uninstall` are called by the backend's start and
shutdown (one backend at a time); the wrappers keep no state but the originals.
"""
import os
import sys

from ray_adapter.core.yuanrong import shell

_original = {}  # "_exit" / "abort" -> the function replaced (present while installed)


def _calling_call():
    """``(kind, name)`` of the task or actor call running in this context, or None."""
    task_id, task_name, actor_id, actor_name, _resources = shell.current_call.get()
    if task_id is None and actor_id is None:
        return None
    if actor_id is not None:
        label = f"actor {actor_name!r} " if actor_name else "actor "
        return "actor", f"{label}(call {task_name or '?'})"
    return "task", f"task {task_name or '?'}"


def message(what, call):
    """The stderr message for ``what`` (e.g. ``os._exit(3)``) called in ``call``."""
    kind, name = call
    return (f"ray-adapter (RAY_ADAPTER_RUNTIME=yr-local): {what} was called in the {name}. "
            f"yr-local runs tasks and actors as threads of the driver process, so it ends the "
            f"driver itself; Ray would end only the {kind}'s worker process (its callers would "
            f"get {'ActorDiedError' if kind == 'actor' else 'WorkerCrashedError'}). Run on the "
            "embedded runtime (unset RAY_ADAPTER_RUNTIME), whose workers are processes, to "
            "preview process exits faithfully.\n")


def _say(what, call):
    try:
        sys.stderr.write(message(what, call))
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - stderr closed: exit anyway
        pass


def _exit(status):
    """``os._exit`` while yr-local runs: a task's or actor's call first says what it ends."""
    call = _calling_call()
    if call is not None:
        _say(f"os._exit({status!r})", call)
    (_original.get("_exit") or _real_exit)(status)


def _abort():
    """``os.abort`` while yr-local runs: a task's or actor's call first says what it ends."""
    call = _calling_call()
    if call is not None:
        _say("os.abort()", call)
    (_original.get("abort") or _real_abort)()


_real_exit, _real_abort = os._exit, os.abort


def install():
    """Wrap ``os._exit`` and ``os.abort`` (once; idempotent)."""
    if os._exit is not _exit:
        _original["_exit"] = os._exit
        os._exit = _exit
    if os.abort is not _abort:
        _original["abort"] = os.abort
        os.abort = _abort


def uninstall():
    """Put back what :func:`install` replaced, unless someone replaced it again since."""
    if os._exit is _exit:
        os._exit = _original.pop("_exit", _real_exit)
    if os.abort is _abort:
        os.abort = _original.pop("abort", _real_abort)
