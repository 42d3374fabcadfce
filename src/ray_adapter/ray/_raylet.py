"""``ray._raylet``: the names Ray's compiled core module gives user code, libraries and Ray's
tests -- :class:`ObjectRef`, the id classes, ``ObjectRefGenerator``, and the ``ray.exceptions``
classes Ray binds here too (``from ray._raylet import ObjectRefStreamEndOfStreamError``).

A surface: every name is defined in an implementation module (:mod:`._private.object_refs`,
:mod:`._private.object_ref_generator`, :mod:`.exceptions`) and only re-exported here, so no
implementation module imports this one.
"""
from ray_adapter.ray import exceptions as _exceptions
from ray_adapter.ray._private.object_ref_generator import (  # noqa: F401
    DynamicObjectRefGenerator, ObjectRefGenerator)
from ray_adapter.ray._private.object_refs import (  # noqa: F401
    UNKNOWN_OWNER_ADVICE, ActorID, JobID, NodeID, ObjectRef, PlacementGroupID, TaskID, WorkerID,
    _BaseID, _rebuild, from_old_sessions, unknown_owner_error)

# The ``ray.exceptions`` classes Ray's ``_raylet`` binds too (the same objects).
_EXCEPTIONS = frozenset((
    "ActorAlreadyExistsError", "ActorDiedError", "ActorHandleNotFoundError", "AsyncioActorExit",
    "AuthenticationError", "GetTimeoutError", "ObjectRefStreamEndOfStreamError",
    "ObjectStoreFullError", "OutOfDiskError", "PendingCallsLimitExceeded", "RayActorError",
    "RayChannelError", "RayChannelTimeoutError", "RayError", "RaySystemError", "RayTaskError",
    "RpcError", "TaskCancelledError"))


def __getattr__(name):
    if name in _EXCEPTIONS:
        return getattr(_exceptions, name)
    raise AttributeError(f"module 'ray._raylet' has no attribute '{name}'")
