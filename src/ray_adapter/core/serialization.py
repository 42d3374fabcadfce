"""Value serialization for the runtime core: cloudpickle, pickle protocol 5.

Large contiguous buffers (numpy arrays, torch CPU tensors, bytearrays) travel out of band as
separate buffers, so the object store can keep them without a copy and readers get read-only
views over them, as Ray's object store does.
"""
import pickle

import cloudpickle

#: Buffers at least this large (bytes) are kept out of band. Zero: every array buffer is, so
#: every array read back from the store is read-only, as in Ray.
OUT_OF_BAND_MIN_BYTES = 0


class Serialized:
    """A serialized value: ``data`` (pickle bytes) and out-of-band ``buffers``.

    ``buffers`` are bytes-like objects; ``nbytes`` is the total payload size in bytes.
    """

    __slots__ = ("data", "buffers")

    def __init__(self, data, buffers=()):
        self.data = data
        self.buffers = list(buffers)

    @property
    def nbytes(self):
        return len(self.data) + sum(memoryview(b).nbytes for b in self.buffers)

    def __reduce_ex__(self, protocol):
        # Nested in another pickle (a reply carrying objects), the buffers stay out of band.
        return Serialized, (self.data, [pickle.PickleBuffer(b) for b in self.buffers])


def dumps(value):
    """Serialize ``value``; returns :class:`Serialized`. Raises what cloudpickle raises."""
    buffers = []

    def keep_in_band(buf):
        raw = buf.raw()
        if raw.nbytes < OUT_OF_BAND_MIN_BYTES:
            return True
        # Copy now: the caller may mutate its array right after ``put`` returns.
        buffers.append(bytes(raw))
        return False

    data = cloudpickle.dumps(value, protocol=5, buffer_callback=keep_in_band)
    return Serialized(data, buffers)


def loads(serialized):
    """Deserialize a :class:`Serialized`; out-of-band arrays come back as read-only views."""
    if serialized.buffers:
        return pickle.loads(serialized.data, buffers=serialized.buffers)
    return pickle.loads(serialized.data)


def dumps_plain(value):
    """Serialize a value for a message body (no out-of-band buffers)."""
    return cloudpickle.dumps(value, protocol=5)


loads_plain = pickle.loads
