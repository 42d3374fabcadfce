"""Helpers shared by both ends of the embedded protocol: packing serialized values into a
message plus its list of out-of-band buffer frames."""
from ray_adapter.core.serialization import Serialized


def pack(serialized, buffers):
    """``(data, first_buffer_index, buffer_count)``; appends the value's buffers to ``buffers``."""
    start = len(buffers)
    buffers.extend(serialized.buffers)
    return (serialized.data, start, len(serialized.buffers))


def unpack(packed, buffers):
    """Inverse of :func:`pack`: the :class:`Serialized` a packed triple describes."""
    data, start, count = packed
    return Serialized(data, buffers[start:start + count])
