"""The exceptions of ``ray.exceptions`` about values in transit (Ray 2.x names, bases and
constructors): an object lost, freed or not stored, a stream ended, a compiled-graph channel or
a direct transport failed.

Part of :mod:`ray_adapter.ray.exceptions`, which re-exports every class here as its own
(their ``__module__`` is that module's: pickles and reprs name it); import them from there.
"""
from ray_adapter.ray.exceptions import RayError, RaySystemError

#: The classes defined here, re-exported by :mod:`ray_adapter.ray.exceptions`.
NAMES = ('ObjectStoreFullError', 'OutOfDiskError', 'ObjectLostError', 'ObjectFetchTimedOutError',
         'ObjectFreedError', 'ReferenceCountingAssertionError', 'OwnerDiedError',
         'ObjectReconstructionFailedError', 'PlasmaObjectNotAvailable',
         'ObjectRefStreamEndOfStreamError', 'OufOfBandObjectRefSerializationException',
         'RayChannelError', 'RayChannelTimeoutError', 'RayCgraphCapacityExceeded',
         'RayDirectTransportError', 'StreamingGeneratorReplayInconsistentError')


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
