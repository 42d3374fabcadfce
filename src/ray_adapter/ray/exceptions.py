"""``ray.exceptions``: Ray 2.x's exception classes, with Ray's names, bases and constructors.

Mirrors :mod:`ray.exceptions`. The runtime core raises backend-neutral errors
(:mod:`ray_adapter.core.errors`); :mod:`ray_adapter.ray._private.errors` maps them onto these.
"""
import functools

from ray_adapter import gaps
from ray_adapter.core.errors import task_failure_text


class RayError(Exception):
    """Base of every Ray exception (``ray.exceptions.RayError``)."""

    @staticmethod
    def from_bytes(data):
        import pickle

        return pickle.loads(data)

    def to_bytes(self):
        import cloudpickle

        return cloudpickle.dumps(self)


class CrossLanguageError(RayError):
    """A failure raised by a task written in another language (never raised here)."""

    def __init__(self, ray_exception):
        super().__init__(f"An exception raised from another language: {ray_exception}")


class TaskCancelledError(RayError):
    """The task was cancelled with ``ray.cancel``."""

    def __init__(self, task_id=None, error_message=None):
        self.task_id = task_id
        self.error_message = error_message
        super().__init__(task_id, error_message)

    def __str__(self):
        if self.error_message:
            return self.error_message
        return f"Task: {self.task_id} was cancelled." if self.task_id else ""


class RayTaskError(RayError):
    """A task or actor method raised; ``cause`` is the original exception.

    ``ray.get`` raises an instance of a class deriving from both this class and the cause's
    class (see :meth:`as_instanceof_cause`), so ``except ValueError`` still catches it.
    """

    def __init__(self, function_name, traceback_str, cause, proctitle=None, pid=None, ip=None,
                 actor_repr=None, actor_id=None):
        self.function_name = function_name
        self.traceback_str = traceback_str
        self.cause = cause
        self.proctitle = proctitle or f"ray::{function_name}"
        self.pid = pid
        self.ip = ip
        self.actor_repr = actor_repr
        self.actor_id = actor_id
        # Not super(): in a dual class the next base is the user's exception class, whose
        # constructor takes the user's arguments.
        Exception.__init__(self, function_name, traceback_str, cause, proctitle, pid, ip,
                           actor_repr, actor_id)

    def make_dual_exception_instance(self):
        return self.as_instanceof_cause()

    def as_instanceof_cause(self):
        """This error as an instance of ``RayTaskError(<cause class>)``, which subclasses both
        ``RayTaskError`` and the cause's class. Returns ``self`` if that class cannot be made."""
        cause_cls = type(self.cause)
        if self.cause is None or issubclass(cause_cls, RayTaskError):
            return self
        dual = _dual_class(cause_cls)
        if dual is None:
            return self
        return dual(self.function_name, self.traceback_str, self.cause, self.proctitle, self.pid,
                    self.ip, self.actor_repr, self.actor_id)

    def __str__(self):
        return task_failure_text(self.function_name, self.traceback_str, self.pid, self.ip,
                                 self.actor_id, self.actor_repr, self.proctitle)


@functools.lru_cache(maxsize=None)
def _dual_class(cause_cls):
    """``RayTaskError(cause_cls)``: a class deriving from RayTaskError and ``cause_cls``."""

    def __init__(self, *args):
        RayTaskError.__init__(self, *args)
        self.args = (self.cause,)  # as Ray: the args are the original exception

    def __getattr__(self, name):
        if name.startswith("__") or name == "cause":
            raise AttributeError(name)
        return getattr(self.cause, name)

    def __reduce__(self):
        return _rebuild_task_error, (self.function_name, self.traceback_str, self.cause,
                                     self.proctitle, self.pid, self.ip, self.actor_repr, self.actor_id)

    name = f"RayTaskError({cause_cls.__name__})"
    try:
        return type(name, (RayTaskError, cause_cls), {
            "__init__": __init__, "__getattr__": __getattr__, "__reduce__": __reduce__,
            # Ray's name in tracebacks (pickled through __reduce__, never by this name).
            "__str__": RayTaskError.__str__, "__module__": "ray.exceptions", "__qualname__": name,
        })
    except TypeError:  # e.g. a cause class with an incompatible instance layout
        return None


def _rebuild_task_error(*args):
    return RayTaskError(*args).as_instanceof_cause()


class LocalRayletDiedError(RayError):
    """The local node manager died (never raised by the embedded runtime)."""

    def __str__(self):
        return "The task's local raylet died. Check raylet.out for more information."


class WorkerCrashedError(RayError):
    """The worker process died while running the task and no retry was left."""

    def __str__(self):
        if self.args and self.args[0]:  # (no worker could be started: the runtime says why)
            return str(self.args[0])
        return ("The worker died unexpectedly while executing this task. Check "
                "python-core-worker-*.log files for more information.")


class RayActorError(RayError):
    """An actor call could not complete because the actor is dead or unreachable."""

    def __init__(self, actor_id=None, error_msg="The actor experienced an error before finishing this task.",
                 actor_init_failed=False, preempted=False):
        self.actor_id = actor_id
        self.error_msg = error_msg
        self._actor_init_failed = actor_init_failed
        self._preempted = preempted
        # No Exception.__init__ call, as in Ray: ``args`` stay what the error was made with
        # (an ActorDiedError's cause, the creation task's RayTaskError), pickled as such.

    @property
    def actor_init_failed(self):
        return self._actor_init_failed

    @property
    def preempted(self):
        return self._preempted

    def __str__(self):
        return self.error_msg


class ActorDiedError(RayActorError):
    """The actor is dead: killed, crashed, exited, or its constructor raised."""

    BASE_ERROR_MSG = "The actor died unexpectedly before finishing this task."

    def __init__(self, cause=None):
        actor_id = None
        init_failed = False
        if isinstance(cause, RayTaskError):
            init_failed = True
            actor_id = getattr(cause, "actor_id", None)
            msg = ("The actor died because of an error raised in its creation task, "
                   f"{cause}")
        elif isinstance(cause, str):
            msg = cause
        else:
            msg = self.BASE_ERROR_MSG
        super().__init__(actor_id, msg, init_failed)  # no .cause attribute, as in Ray


class ActorUnavailableError(RayActorError):
    """The actor is temporarily unreachable (restarting); the call may or may not have run."""

    def __init__(self, error_message, actor_id):
        hex_id = actor_id.hex() if isinstance(actor_id, bytes) else actor_id
        super().__init__(hex_id, f"The actor {hex_id} is unavailable: {error_message}. "
                                 "The task may or may not have been executed on the actor.")


class RaySystemError(RayError):
    """An internal failure of the runtime."""

    def __init__(self, client_exc, traceback_str=None):
        self.client_exc = client_exc
        self.traceback_str = traceback_str
        super().__init__(client_exc, traceback_str)

    def __str__(self):
        out = f"System error: {self.client_exc}"
        if self.traceback_str:
            out += f"\ntraceback: {self.traceback_str}"
        return out


class UserCodeException(RayError):
    """Raised for errors in user code run by the runtime (wrapping only)."""


class OutOfMemoryError(RayError):
    """The node ran out of memory and killed the task's worker."""

    def __init__(self, message):
        self.message = message
        super().__init__(message)

    def __str__(self):
        return self.message


class NodeDiedError(RayError):
    """The node running the task or actor died."""

    def __init__(self, message):
        self.message = message
        super().__init__(message)

    def __str__(self):
        return self.message


class GetTimeoutError(RayError, TimeoutError):
    """``ray.get`` (or ``ray.wait``-based helpers) timed out; also a builtin ``TimeoutError``."""


class AsyncioActorExit(RayError):
    """Raised inside an async actor to exit it (``ray.actor.exit_actor``)."""


class RuntimeEnvSetupError(RayError):
    """The runtime environment of a task or actor could not be set up."""

    def __init__(self, error_message=None):
        self.error_message = error_message
        super().__init__(error_message)

    def __str__(self):
        out = "Failed to set up runtime environment."
        return out + (f"\n{self.error_message}" if self.error_message else "")


class TaskPlacementGroupRemoved(RayError):
    """The task's placement group was removed."""

    def __str__(self):
        return "The placement group corresponding to this task has been removed."


class ActorPlacementGroupRemoved(RayError):
    """The actor's placement group was removed."""

    def __str__(self):
        return "The placement group corresponding to this Actor has been removed."


class PendingCallsLimitExceeded(RayError):
    """Too many calls are queued for the actor (``max_pending_calls``)."""


class TaskUnschedulableError(RayError):
    """The task can never be scheduled (e.g. its node-affinity target is gone)."""

    def __init__(self, error_message):
        self.error_message = error_message
        super().__init__(error_message)

    def __str__(self):
        return f"The task is not schedulable: {self.error_message}"


class ActorUnschedulableError(RayError):
    """The actor can never be scheduled."""

    def __init__(self, error_message):
        self.error_message = error_message
        super().__init__(error_message)

    def __str__(self):
        return f"The actor is not schedulable: {self.error_message}"


class RpcError(RayError):
    """A control-plane RPC failed."""

    def __init__(self, message, rpc_code=None):
        self.rpc_code = rpc_code
        super().__init__(message)


class AuthenticationError(RayError):
    """The cluster rejected the driver's credentials."""

    def __init__(self, message):
        self.message = message
        super().__init__(message)


class ActorAlreadyExistsError(ValueError, RayError):
    """An actor with that name already exists in the namespace (raised at ``.remote()``)."""

    def __init__(self, error_message):
        self.error_message = error_message
        super().__init__(error_message)


class ActorHandleNotFoundError(ValueError, RayError):
    """The actor handle refers to an actor unknown to the runtime."""

    def __init__(self, error_message):
        self.error_message = error_message
        super().__init__(error_message)


class UnserializableException(RayError):
    """A task raised an exception that pickled but could not be rebuilt where it was read; its
    text is kept (``_original_stack_trace``, Ray's attribute, and ``original_stack_trace``)."""

    def __init__(self, original_stack_trace):
        self.original_stack_trace = self._original_stack_trace = original_stack_trace
        super().__init__(original_stack_trace)

    def __str__(self):
        return ("Failed to deserialize exception. Refer to https://docs.ray.io/en/latest/ray-core/"
                "objects/serialization.html#custom-serializers-for-exceptions for more information.\n"
                f"Original exception:\n{self.original_stack_trace}")


# -- values in transit: an object lost, freed or not stored, a stream ended, a compiled-graph
# channel or a direct transport failed --------------------------------------------------------
class ObjectStoreFullError(RayError):
    """The object store has no room for a new object."""

    def __str__(self):
        return (super().__str__() + "\nThe local object store is full of objects that are still "
                "in scope and cannot be evicted. Tip: Use the `ray memory` command to list active "
                "objects in the cluster.")


class OutOfDiskError(RayError):
    """The local disk is full."""


class ObjectLostError(RayError):
    """The object's value cannot be retrieved."""

    reason = "All copies of the object have been lost."

    def __init__(self, object_ref_hex, owner_address=None, call_site=""):
        self.object_ref_hex = object_ref_hex
        self.owner_address = owner_address
        self.call_site = call_site
        super().__init__(object_ref_hex, owner_address, call_site)

    def __str__(self):
        return f"Failed to retrieve object {self.object_ref_hex}.\n\n{self.reason}"


class ObjectFetchTimedOutError(ObjectLostError):
    reason = "Fetch for the object timed out because no locations were found for it."


class ObjectFreedError(ObjectLostError):
    reason = "The object was freed and its value is no longer available."


class ReferenceCountingAssertionError(ObjectLostError, AssertionError):
    reason = "The object has already been deleted by the reference counting protocol."


class OwnerDiedError(ObjectLostError):
    reason = ("The object's owner has exited. This is the Python worker that first created the "
              "ObjectRef via `.remote()` or `ray.put()`.")


class ObjectReconstructionFailedError(ObjectLostError):
    reason = "The object cannot be reconstructed."

    def __init__(self, object_ref_hex, reason=None, reason_message=None, owner_address=None, call_site=""):
        super().__init__(object_ref_hex, owner_address, call_site)
        if reason_message:
            self.reason = reason_message


class PlasmaObjectNotAvailable(RayError):
    """The object is not yet available in the local object store."""


class ObjectRefStreamEndOfStreamError(RayError):
    """A streaming generator has no more items."""


class OufOfBandObjectRefSerializationException(RayError):
    """An ObjectRef was serialized out of band (e.g. with plain pickle) where not allowed."""


class RayChannelError(RaySystemError):
    """A compiled-graph channel failed."""


class RayChannelTimeoutError(RayChannelError, TimeoutError):
    """A compiled-graph channel operation timed out."""


class RayCgraphCapacityExceeded(RaySystemError):
    """A compiled graph exceeded its buffer capacity."""


class RayDirectTransportError(RaySystemError):
    """A direct (device-to-device) object transfer failed."""


class StreamingGeneratorReplayInconsistentError(RaySystemError):
    """A retried streaming generator yielded different items than before."""


#: Every exception class ``ray.exceptions`` exports, as Ray's ``RAY_EXCEPTION_TYPES`` list.
RAY_EXCEPTION_TYPES = [
    PlasmaObjectNotAvailable, RayError, RayTaskError, WorkerCrashedError, RayActorError,
    ObjectStoreFullError, ObjectLostError, ObjectFetchTimedOutError, ReferenceCountingAssertionError,
    ObjectReconstructionFailedError, OwnerDiedError, GetTimeoutError, AsyncioActorExit,
    RuntimeEnvSetupError, TaskPlacementGroupRemoved, ActorPlacementGroupRemoved,
    PendingCallsLimitExceeded, LocalRayletDiedError, TaskUnschedulableError, ActorDiedError,
    ActorUnschedulableError, ActorUnavailableError, RayChannelError, RayChannelTimeoutError,
    OufOfBandObjectRefSerializationException, RayCgraphCapacityExceeded, UnserializableException,
    ObjectRefStreamEndOfStreamError, ObjectFreedError, AuthenticationError, RpcError,
    NodeDiedError, OutOfMemoryError, OutOfDiskError,
]


__getattr__ = gaps.module_getattr(__name__.replace("ray_adapter.", "", 1))
