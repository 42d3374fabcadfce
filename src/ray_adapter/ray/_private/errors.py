"""From the runtime core's neutral errors to the Ray exceptions users catch, with Ray's text.

Backends report *why* (an enum and facts: pid, exit code, retries); the messages are written
here, once, in Ray 2.60's shape.
"""
from ray_adapter.core import errors as core_errors, ids as core_ids
from ray_adapter.core.errors import ActorDeath, WorkerDeath
from ray_adapter.ray.exceptions import (ActorAlreadyExistsError, ActorDiedError,
                                        ActorUnavailableError, ActorUnschedulableError,
                                        GetTimeoutError, NodeDiedError, ObjectFreedError,
                                        PendingCallsLimitExceeded, RaySystemError, RayTaskError,
                                        TaskCancelledError, TaskPlacementGroupRemoved,
                                        TaskUnschedulableError, UnserializableException,
                                        WorkerCrashedError)

#: The worker exit detail of an actor's sys.exit(0), in its death text and its worker's record
#: (an exit_actor() adds _BY_EXIT_ACTOR).
_EXIT_ACTOR_DETAIL = "Worker exits by an user request. Worker exits with an exit code 0."
_BY_EXIT_ACTOR = " exit_actor() is called."
_ACTOR_DEATH_TEXT = {
    ActorDeath.KILLED: "The actor is dead because it was killed by `ray.kill`.",
    ActorDeath.OUT_OF_SCOPE: "The actor is dead because all references to the actor were removed.",
    ActorDeath.OWNER_DIED: "The actor is dead because its owner has died.",
    ActorDeath.EXITED: ("The actor is dead because its worker process has died. Worker exit type: "
                        f"INTENDED_USER_EXIT Worker exit detail: {_EXIT_ACTOR_DETAIL}"),
    ActorDeath.UNKNOWN: ("The actor is dead: it is not known to this runtime (it may belong to a "
                         "runtime that was shut down)."),
}


_ARGUMENT_FAILED = "  At least one of the input arguments for this task could not be computed:"


def _exception_line(exc):
    """``exc`` as the last line of a traceback names it, with Ray's module for Ray's classes
    (``ray.exceptions.RayTaskError: ...``; the class alone when its text is empty)."""
    cls = RayTaskError if isinstance(exc, RayTaskError) else type(exc)
    module = cls.__module__
    if module.startswith("ray_adapter.ray."):
        module = module[len("ray_adapter."):]
    name = cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"
    text = str(exc)
    return f"{name}: {text}" if text else name


def _argument_failure(err):
    """A call that did not run because an argument failed: Ray raises the call's own
    ``RayTaskError`` quoting the argument's error, an instance of the original cause's class
    (the user's exception, or the Ray error that ended the argument's task). Along a chain of
    such calls each quotes the next one's text, down to the root failure (built from the
    root up, without recursion)."""
    root = from_core_error(err.cause)
    cause = root.cause if isinstance(root, RayTaskError) else root
    text = _exception_line(root)
    for name, pid, ip, actor_repr, actor_id in reversed(getattr(err, "argument_chain", ())):
        level = RayTaskError(name, f"{_ARGUMENT_FAILED}\n{text}", cause, pid=pid, ip=ip,
                             actor_repr=actor_repr, actor_id=actor_id)
        text = _exception_line(level)
    exc = RayTaskError(err.function_name, f"{_ARGUMENT_FAILED}\n{text}", cause,
                       pid=err.pid, ip=err.ip, actor_repr=err.actor_repr,
                       actor_id=getattr(err, "actor_id", None))
    return exc.as_instanceof_cause()


def _task_error(err):
    if getattr(err, "failed_argument", False):
        return _argument_failure(err)
    cause = err.cause
    if cause is None:  # the task's exception could not travel; as Ray: one that could not be
        # rebuilt is an UnserializableException quoting the error, one that could not be
        # pickled a plain RayTaskError (its text is all there is)
        plain = RayTaskError(err.function_name, err.traceback_str, None, pid=err.pid, ip=err.ip,
                             actor_repr=err.actor_repr, actor_id=getattr(err, "actor_id", None))
        if getattr(err, "cause_lost", None) == "rebuild":
            return UnserializableException(f"ray.exceptions.RayTaskError: {plain}\n")
        return plain
    if isinstance(cause, core_errors.TaskCancelled):
        cause = TaskCancelledError(cause.task_id.hex() if cause.task_id else None)
    elif isinstance(cause, core_errors.CoreError):
        cause = from_core_error(cause)
    if isinstance(cause, RayTaskError):
        # A nested task's failure re-raised here: this task's traceback (which quotes the
        # inner error) on top, the original exception as the cause.
        cause = cause.cause
    exc = RayTaskError(err.function_name, err.traceback_str, cause, pid=err.pid, ip=err.ip,
                       actor_repr=err.actor_repr, actor_id=getattr(err, "actor_id", None))
    return exc.as_instanceof_cause()


def pending_calls_error(err, method_name, handle):
    """Ray's PendingCallsLimitExceeded for a refused call (names the method and the handle)."""
    return PendingCallsLimitExceeded(
        f"The task {method_name} could not be submitted to {handle!r} because more than "
        f"{err.limit} tasks are queued on the actor. This limit can be adjusted with the "
        "`max_pending_calls` actor option.")


def name_taken_error(name, namespace_option):
    """Ray's message quotes the ``namespace`` option as given (None when defaulted)."""
    return ActorAlreadyExistsError(
        f"The name {name} (namespace={namespace_option}) is already taken. Please use a different "
        f"name or get the existing actor using ray.get_actor('{name}', namespace='{namespace_option}')")


def _hex(value):
    return value.hex() if isinstance(value, bytes) else value


def _death_reason(err):
    """The line of Ray's ``ActorDiedError`` text that says why (its State API record's
    ``error_message``)."""
    if err.cause is ActorDeath.CRASHED:
        reason = ("The actor is dead because its worker process has died. Worker exit type: "
                  f"SYSTEM_ERROR Worker exit detail: {_crash_detail(err.detail, err.exit_code)}")
    elif err.cause is ActorDeath.SPAWN_FAILED:
        reason = f"The actor is dead because no worker process could be started for it: {err.detail}"
    elif err.cause is ActorDeath.TERMINATED:
        reason = f"The actor is dead: {err.detail}" if err.detail else "The actor is dead."
    elif err.cause is ActorDeath.NODE_DIED:
        reason = (f"The actor died because its node has died. Node Id: {err.node_id}\n"
                  "\tthe actor's node was terminated expectedly: received SIGTERM")
    elif err.cause is ActorDeath.OWNER_DIED and err.owner is not None:
        owner = err.owner
        exit_type = ("INTENDED_SYSTEM_EXIT" if owner.by_runtime else
                     "INTENDED_USER_EXIT" if owner.intended else "SYSTEM_ERROR")
        reason = (f"The actor is dead because its owner has died. Owner Id: {owner.worker_id} "
                  f"Owner Ip address: {owner.ip} Owner worker exit type: {exit_type} Worker exit "
                  "detail: Owner's worker process has crashed.")
    elif err.cause is ActorDeath.KILLED and err.detail == core_errors.KILLED_PROCESS:
        reason = ("The actor is dead because its worker process has died. Worker exit type: "
                  "INTENDED_SYSTEM_EXIT Worker exit detail: Worker exits because the actor is "
                  "killed. " + _ACTOR_DEATH_TEXT[ActorDeath.KILLED])
    elif err.cause is ActorDeath.EXITED and err.detail == core_errors.EXITED_BY_EXIT_ACTOR:
        reason = _ACTOR_DEATH_TEXT[ActorDeath.EXITED] + _BY_EXIT_ACTOR
    elif err.cause is ActorDeath.PLACEMENT_GROUP_REMOVED:
        reason = ("The actor is dead because its worker process has died. Worker exit type: "
                  "INTENDED_SYSTEM_EXIT Worker exit detail: Destroying worker since its placement "
                  f"group was removed. Placement group id: {_hex(err.group_id)}")
    else:
        reason = _ACTOR_DEATH_TEXT.get(err.cause, "The actor is dead.")
    return reason


def actor_death_text(err):
    """Ray's ``ActorDiedError`` text for an :class:`ActorDied` (not a creation failure)."""
    reason = _death_reason(err)
    lines = [ActorDiedError.BASE_ERROR_MSG]
    if err.class_name:
        lines.append(f"\tclass_name: {err.class_name}")
    lines.append(f"\tactor_id: {_hex(err.actor_id)}")
    if err.pid is not None:
        lines.append(f"\tpid: {err.pid}")
    for label in ("name", "namespace", "ip"):  # where it lived, when the runtime knows
        value = getattr(err, label, None)
        if value:
            lines.append(f"\t{label}: {value}")
    lines.append(reason)
    if getattr(err, "never_ran", False):
        lines.append("The actor never ran - it was cancelled before it started running.")
    return "\n".join(lines)


#: Ray's ``ActorDiedErrorContext.Reason`` of each cause (those that are not a creation failure).
_DEATH_REASON = {ActorDeath.KILLED: "RAY_KILL", ActorDeath.OUT_OF_SCOPE: "OUT_OF_SCOPE",
                 ActorDeath.OWNER_DIED: "OWNER_DIED", ActorDeath.EXITED: "WORKER_DIED",
                 ActorDeath.CRASHED: "WORKER_DIED", ActorDeath.NODE_DIED: "NODE_DIED",
                 ActorDeath.PLACEMENT_GROUP_REMOVED: "WORKER_DIED"}


def actor_record(a):
    """A runtime actor record ``a`` as the State API lists it: its ``death_cause`` facts made
    Ray's ``death_cause`` (:func:`death_cause_record`), naming the actor where the death's
    facts do not; a record without a death is returned as it is."""
    death = a.get("death_cause")
    if death is None or "cause" not in death:
        return a
    facts = dict(death, name=death.get("name") or a.get("name"),  # where the death does not
                 namespace=death.get("namespace") or a.get("ray_namespace"),  # say it itself
                 class_name=death.get("class_name") or a.get("class_name"))
    return dict(a, death_cause=death_cause_record(a["actor_id"], facts))


def death_cause_record(actor_id_hex, facts):
    """Ray's ``death_cause`` of an actor's State API record (``ActorState.death_cause``) from
    the facts the runtime reports (:meth:`ActorDied.facts`): ``{"creation_task_failure_context":
    {...}}`` for a failed constructor or argument, else ``{"actor_died_error_context":
    {...}}`` with Ray's keys in Ray's order (``error_message``, ``owner_id`` and
    ``owner_ip_address`` where the owner is known, ``node_ip_address`` and ``pid`` where the
    actor was placed, ``name``, ``ray_namespace``, ``class_name``, ``actor_id``, ``reason``,
    ``never_started``), the message as ``ActorDiedError`` writes it."""
    cause = ActorDeath(facts["cause"])
    if cause in (ActorDeath.CREATION_FAILED, ActorDeath.ARGS_FAILED):
        return {"creation_task_failure_context": {
            "language": "PYTHON", "formatted_exception_string": facts.get("creation_error") or ""}}
    err = core_errors.ActorDied(bytes.fromhex(actor_id_hex), cause, facts.get("class_name"),
                                pid=facts.get("pid"), exit_code=facts.get("exit_code"),
                                detail=facts.get("detail") or "", node_id=facts.get("node_id"),
                                group_id=facts.get("group_id"), started=facts.get("started", True),
                                owner=core_errors.OwnerExit(*facts["owner"]) if facts.get("owner") else None)
    err.located(facts.get("name"), facts.get("namespace"), facts.get("ip"))
    if cause is ActorDeath.SPAWN_FAILED:
        return {"runtime_env_failed_context": {"error_message": _death_reason(err)}}
    context = {"error_message": _death_reason(err)}
    if err.owner is not None:
        context.update(owner_id=err.owner.worker_id, owner_ip_address=err.owner.ip)
    if facts.get("ip"):
        context["node_ip_address"] = facts["ip"]
    if facts.get("pid") is not None:
        context["pid"] = facts["pid"]
    context.update(name=facts.get("name") or "", ray_namespace=facts.get("namespace") or "",
                   class_name=facts.get("class_name") or "", actor_id=actor_id_hex,
                   reason=_DEATH_REASON.get(cause, "UNSPECIFIED"),
                   never_started=bool(facts.get("never_ran")) or not facts.get("started", True))
    return {"actor_died_error_context": context}


_CONNECTION_LOST = (
    "Worker unexpectedly exits with a connection error code 2. End of file. Some common causes "
    "include: (1) the process was killed by the OOM killer due to high memory usage, (2) ray "
    "stop --force was called, or (3) the worker crashed unexpectedly due to SIGSEGV or another "
    "unexpected error. If the process was killed by the kernel OOM killer (verifiable by "
    "checking for OOM in dmesg of the OOMing node), consider enabling resource isolation via "
    "--enable-resource-isolation to prevent node deaths by resource contention and significant "
    "loss of progress by uninformed kernel OOM killing.")
_CONSTRUCTOR_FAILED = (
    "Worker exits because there was an exception in the initialization method (e.g., "
    "__init__). Fix the exceptions from the initialization to resolve the issue. ")
_RETIRED = {
    "idle": ("Worker exits because it was idle (it doesn't have objects it owns while no task "
             "or actor has been scheduled) for a long time."),
    "job": "Worker exits because its job has finished.",
    "max_calls": "Worker exits because it reached max_calls.",
}


def _crash_detail(detail, exit_code):
    """Ray's exit detail of a worker process that ended unasked: its code called ``sys.exit``
    (the raylet is told the exit code), or it vanished (killed, ``os._exit``, a fault: Ray only
    sees its connection end)."""
    if detail == core_errors.LEFT_BY_SYS_EXIT:
        return f"Worker exits unexpectedly. Worker exits with an exit code {exit_code}."
    return _CONNECTION_LOST


def worker_exit(facts):
    """``(exit_type, exit_detail)`` of an ended worker or driver as Ray's State API lists it
    (``WorkerState``), from the facts the runtime reports (``WorkerHandle.exit_facts``)."""
    cause = facts["cause"]
    if cause == "driver":
        if facts.get("intended"):
            return "INTENDED_USER_EXIT", "Shutdown by ray.shutdown()."
        return "SYSTEM_ERROR", _CONNECTION_LOST
    if cause == "exit_actor":
        return "INTENDED_USER_EXIT", _EXIT_ACTOR_DETAIL + (_BY_EXIT_ACTOR if facts.get("call") else "")
    if cause == "retired":
        why = facts["why"]
        if not isinstance(why, dict):  # "idle", "job", "max_calls"
            return "INTENDED_SYSTEM_EXIT", _RETIRED.get(why, f"Worker exits ({why}).")
        if why["cause"] == ActorDeath.CREATION_FAILED.value:  # the actor it hosted died
            return "USER_ERROR", _CONSTRUCTOR_FAILED + (why.get("creation_error") or "")
        context = death_cause_record(why["actor_id"], why)
        message = next(iter(context.values())).get("error_message", "")
        return "INTENDED_SYSTEM_EXIT", f"Worker exits because the actor is killed. {message}"
    return "SYSTEM_ERROR", _crash_detail(core_errors.LEFT_BY_SYS_EXIT if facts.get("python") else "",
                                         facts.get("exit_code"))


def _worker_crash_text(err):
    """The text of the WorkerCrashedError of a task whose worker died: why, when no worker
    could be started; else None, Ray's fixed words (the pid and exit code are in the runtime's
    notice on the driver's stderr and in the State API's worker record, as in Ray)."""
    if err.cause is WorkerDeath.SPAWN_FAILED:
        return (f"The worker died unexpectedly while executing this task: no worker process could "
                f"be started for task {err.task_name!r} ({err.detail}).")
    return None


_NODE_AFFINITY_GONE = ("The node specified via NodeAffinitySchedulingStrategy doesn't exist any "
                       "more or is infeasible, and soft=False was specified.")


def _unschedulable_text(err):
    if err.cause is ActorDeath.PLACEMENT_GROUP_REMOVED:
        return ("Could not create the actor because its associated placement group was removed.\n"
                f"Required placement group {_hex(err.group_id)} is removed.")
    return _NODE_AFFINITY_GONE


def _cancelled_before_running(task_id):
    """Ray's plain TaskCancelledError (the work never ran, or a force cancel killed it): for a
    task no id and no text; for an actor call, the actor's words."""
    if task_id and core_ids.names_actor(task_id):
        return TaskCancelledError(error_message=f"The task {task_id.hex()} is canceled from an actor "
                                                f"{core_ids.actor_of(task_id).hex()} before it executes.")
    return TaskCancelledError()


def from_core_error(err):
    """The Ray exception for a :class:`ray_adapter.core.errors.CoreError`."""
    if isinstance(err, core_errors.TaskFailed):
        return _task_error(err)
    if isinstance(err, core_errors.GetTimeout):
        return GetTimeoutError("Get timed out: some object(s) not ready.")
    if isinstance(err, core_errors.TaskCancelled):
        return _cancelled_before_running(err.task_id)
    if isinstance(err, core_errors.WorkerDied):
        text = _worker_crash_text(err)
        return WorkerCrashedError(text) if text else WorkerCrashedError()
    if isinstance(err, core_errors.ActorDied):
        if err.cause is ActorDeath.ENV_SETUP_FAILED:  # as Ray: the calls raise this, not ActorDiedError
            from ray_adapter.ray.exceptions import RuntimeEnvSetupError

            return RuntimeEnvSetupError("Could not create the actor because its associated runtime "
                                        f"env failed to be created.\n{err.detail}")
        if err.cause is ActorDeath.UNSCHEDULABLE or (
                err.cause is ActorDeath.PLACEMENT_GROUP_REMOVED and not err.started):
            exc = ActorUnschedulableError(_unschedulable_text(err))
            exc.actor_id = _hex(err.actor_id)
            return exc
        if err.creation_error is not None:
            created = from_core_error(err.creation_error)
            if isinstance(created, UnserializableException):
                return created  # as Ray: the constructor's error, which could not be rebuilt
            if isinstance(created, RayTaskError) and type(created) is not RayTaskError:
                # Ray's ActorDiedError holds the creation task's error as a plain RayTaskError
                created = RayTaskError(created.function_name, created.traceback_str, created.cause,
                                       created.proctitle, created.pid, created.ip,
                                       created.actor_repr, created.actor_id)
            exc = ActorDiedError(created)
        else:
            exc = ActorDiedError(actor_death_text(err))
        exc.actor_id = _hex(err.actor_id)
        return exc
    if isinstance(err, core_errors.ActorUnavailable):
        if getattr(err, "while_restarting", False):
            detail = "IOError: The actor is restarting."
        elif getattr(err, "by_sys_exit", False):
            detail = f"UnexpectedSystemExit: Worker exits with an exit code {err.exit_code}."
        elif err.restarted_by_kill:
            detail = "IOError: the actor was restarted by ray.kill(no_restart=False)"
        else:
            detail = (f"IOError: the actor's worker process (pid={err.pid}) died with exit code "
                      f"{err.exit_code} and the actor is restarting")
        return ActorUnavailableError(f"The actor is temporarily unavailable: {detail}", err.actor_id)
    if isinstance(err, core_errors.NodeDied):
        return NodeDiedError(
            f"Task failed because the node it was running on is dead or unavailable. Node IP: "
            f"{err.ip}, node ID: {err.node_id}. This can happen if the node was preempted, had a "
            "hardware failure, or its raylet crashed unexpectedly. To see node death information, "
            f"use `ray list nodes --filter node_id={err.node_id}`, check the Ray dashboard cluster "
            f"page, search the node ID in the GCS logs, or use `ray logs raylet.out -ip {err.ip}`.")
    if isinstance(err, core_errors.Unschedulable):
        return TaskUnschedulableError(
            f"{_NODE_AFFINITY_GONE} name={err.task_name}")
    if isinstance(err, core_errors.PlacementGroupRemoved):
        return TaskPlacementGroupRemoved()
    if isinstance(err, core_errors.PlacementGroupNameTaken):
        return RaySystemError(f"Failed to create placement group '{_hex(err.group_id)}' because "
                              f"name '{err.name}' already exists.")
    if isinstance(err, core_errors.ActorNameTaken):
        return name_taken_error(err.name, err.namespace)
    if isinstance(err, core_errors.ActorNotFound):
        return ValueError(f"Failed to look up actor with name '{err.name}'. This could because "
                          "1. You are trying to look up a named actor you didn't create. 2. The "
                          "named actor died. 3. You did not use a namespace matching the "
                          f"namespace of the actor (namespace={err.namespace}).")
    if isinstance(err, core_errors.PendingCallsLimit):
        return PendingCallsLimitExceeded(
            f"The task {err.method} could not be submitted to Actor({err.class_name}, "
            f"{_hex(err.actor_id)}) because more than {err.limit} tasks are queued on the actor. "
            "This limit can be adjusted with the `max_pending_calls` actor option.")
    if isinstance(err, core_errors.StoreFull):
        from ray_adapter.ray.exceptions import ObjectStoreFullError

        # Ray's first line (without the object's id: none is made for a value not stored);
        # then why, where Ray shows the plasma store's status.
        return ObjectStoreFullError(
            f"Failed to put object in object store because it is full. Object size is "
            f"{err.nbytes} bytes.\nNo memory could be allocated for it: {err.reason}")
    if isinstance(err, core_errors.Unserializable):
        shown = err.value_repr if err.value_repr is not None else "(unknown)"
        return TypeError(f"Could not serialize the {err.what} {shown}:\n{err.error}")
    if isinstance(err, core_errors.ObjectFreed):
        return ObjectFreedError(_hex(err.object_id))
    if isinstance(err, core_errors.NotInitialized):
        return RaySystemError(str(err))
    if isinstance(err, core_errors.Undeserializable):
        return RaySystemError(err.error, err.traceback)
    if isinstance(err, core_errors.EnvSetupFailed):
        from ray_adapter.ray.exceptions import RuntimeEnvSetupError

        return RuntimeEnvSetupError(err.detail)
    return RaySystemError(repr(err))


def _report_creation_failure(death):
    """Ray's worker log line for an actor whose constructor raised (``core_errors.ActorDied``,
    ``CREATION_FAILED``), written on this process's stderr: in a worker, its output forwarding
    prefixes it with the actor (``(A pid=N)``) on the driver's stderr, as Ray's does."""
    import sys

    try:
        sys.stderr.write(f"Exception raised in creation task: {from_core_error(death)}\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # the process's stderr is gone
        pass


core_errors.creation_failure_reporter = _report_creation_failure
