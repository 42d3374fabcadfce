"""Mapping from the runtime core's neutral errors to the Ray exceptions users catch."""
from ray_adapter.core import errors as core_errors
from ray_adapter.ray.exceptions import (ActorAlreadyExistsError, ActorDiedError, GetTimeoutError,
                                        ObjectFreedError, RaySystemError, RayTaskError,
                                        TaskCancelledError, UnserializableException,
                                        WorkerCrashedError)


def _task_error(err):
    cause = err.cause
    if cause is None:
        cause = UnserializableException(err.traceback_str)
    if isinstance(cause, core_errors.TaskCancelled):
        cause = TaskCancelledError(cause.task_id.hex() if cause.task_id else None)
    elif isinstance(cause, core_errors.CoreError):
        cause = from_core_error(cause)
    if isinstance(cause, RayTaskError):
        # A nested task's failure re-raised here: this task's traceback (which quotes the
        # inner error) on top, the original exception as the cause.
        cause = cause.cause
    exc = RayTaskError(err.function_name, err.traceback_str, cause, pid=err.pid, ip=err.ip,
                       actor_repr=err.actor_repr)
    return exc.as_instanceof_cause()


def name_taken_error(name, namespace_option):
    """Ray's message quotes the ``namespace`` option as given (None when defaulted)."""
    return ActorAlreadyExistsError(
        f"The name {name} (namespace={namespace_option}) is already taken. Please use a different "
        f"name or get the existing actor using ray.get_actor('{name}', namespace='{namespace_option}')")


def from_core_error(err):
    """The Ray exception for a :class:`ray_adapter.core.errors.CoreError`."""
    if isinstance(err, core_errors.TaskFailed):
        return _task_error(err)
    if isinstance(err, core_errors.GetTimeout):
        return GetTimeoutError(str(err))
    if isinstance(err, core_errors.TaskCancelled):
        return TaskCancelledError(err.task_id.hex() if err.task_id else None)
    if isinstance(err, core_errors.WorkerDied):
        return WorkerCrashedError(err.message)
    if isinstance(err, core_errors.ActorDied):
        if err.creation_error is not None:
            exc = ActorDiedError(from_core_error(err.creation_error))
        else:
            exc = ActorDiedError(err.message)
        exc.actor_id = err.actor_id.hex() if isinstance(err.actor_id, bytes) else err.actor_id
        return exc
    if isinstance(err, core_errors.ActorNameTaken):
        return name_taken_error(err.name, err.namespace)
    if isinstance(err, core_errors.ActorNotFound):
        return ValueError(f"Failed to look up actor with name '{err.name}'. This could because "
                          "1. You are trying to look up a named actor you didn't create. 2. The "
                          "named actor died. 3. You did not use a namespace matching the "
                          f"namespace of the actor (namespace={err.namespace}).")
    if isinstance(err, core_errors.ObjectFreed):
        return ObjectFreedError(err.object_id.hex() if isinstance(err.object_id, bytes) else err.object_id)
    if isinstance(err, core_errors.NotInitialized):
        return RaySystemError(str(err))
    return RaySystemError(repr(err))
