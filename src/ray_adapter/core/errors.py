"""Backend-neutral failures raised by the runtime core.

The proxy ``ray`` package maps each onto the Ray exception a Ray user expects; backends raise
only these, so they never depend on Ray's public surface.
"""


class CoreError(Exception):
    """Base of every runtime-core failure."""

    def __reduce__(self):
        # Constructors differ per class; rebuild from the instance state instead.
        return _rebuild, (type(self), self.args, dict(self.__dict__))


def _rebuild(cls, args, state):
    err = cls.__new__(cls)
    err.args = args
    err.__dict__.update(state)
    return err


class GetTimeout(CoreError):
    """``get`` did not find every object ready within the timeout."""


class TaskFailed(CoreError):
    """A task or actor method raised; ``cause`` is the user's exception (or None if it could
    not be transported, then ``cause_repr`` describes it)."""

    def __init__(self, cause, traceback_str, function_name, pid, ip, actor_repr=None, cause_repr=None):
        super().__init__(function_name, traceback_str)
        self.cause = cause
        self.traceback_str = traceback_str
        self.function_name = function_name
        self.pid = pid
        self.ip = ip
        self.actor_repr = actor_repr
        self.cause_repr = cause_repr if cause_repr is not None else repr(cause)


class TaskCancelled(CoreError):
    """The task was cancelled (``cancel``) before or while running."""

    def __init__(self, task_id=None):
        super().__init__(task_id)
        self.task_id = task_id


class WorkerDied(CoreError):
    """The worker process running a task exited unexpectedly and no retry was left."""

    def __init__(self, message):
        super().__init__(message)
        self.message = message


class ActorDied(CoreError):
    """The actor is dead (killed, crashed, exited, or its constructor failed).

    ``creation_error`` is the :class:`TaskFailed` of a failed constructor, if that is why."""

    def __init__(self, actor_id, message, creation_error=None, class_name=None):
        super().__init__(message)
        self.actor_id = actor_id
        self.message = message
        self.creation_error = creation_error
        self.class_name = class_name


class ActorNameTaken(CoreError):
    """An actor with that name already exists in the namespace."""

    def __init__(self, name, namespace):
        super().__init__(name, namespace)
        self.name, self.namespace = name, namespace


class ActorNotFound(CoreError):
    """No live actor has that name in the namespace."""

    def __init__(self, name, namespace):
        super().__init__(name, namespace)
        self.name, self.namespace = name, namespace


class ObjectFreed(CoreError):
    """The object's value is gone (freed, or its owner died)."""

    def __init__(self, object_id):
        super().__init__(object_id)
        self.object_id = object_id


class NotInitialized(CoreError):
    """A core call was made before the runtime was started."""
