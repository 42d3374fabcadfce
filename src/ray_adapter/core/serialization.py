"""Value serialization for the runtime core: cloudpickle, pickle protocol 5.

Contiguous buffers (numpy arrays, torch CPU tensors, bytearrays) travel out of band as separate
buffers, so readers get read-only views over them, as from Ray's object store; large ones are
copied once into shared memory (:mod:`.shm`) and never again on their way between processes.
"""
import collections
import errno
import io
import pickle
import types

import cloudpickle

from ray_adapter.core import contained, errors, shm

#: Buffers at least this large (bytes) are kept out of band. Zero: every array buffer is, so
#: every array read back from the store is read-only, as in Ray.
OUT_OF_BAND_MIN_BYTES = 0


class Serialized:
    """A serialized value: ``data`` (pickle bytes) and out-of-band ``buffers``.

    ``buffers`` are bytes or shared buffers (:mod:`.shm`); ``nbytes`` is the payload size in bytes.
    ``refs`` / ``handles`` are the ids of the object refs and actor handles pickled inside the
    value (see :func:`record_ref`), in the order met.
    """

    __slots__ = ("data", "buffers", "refs", "handles")

    def __init__(self, data, buffers=(), refs=(), handles=()):
        self.data = data
        # Empty ones are a shared tuple: a plain value then costs the GC one object, not four.
        self.buffers = list(buffers) if buffers else ()
        self.refs = list(refs) if refs else ()
        self.handles = list(handles) if handles else ()

    @property
    def nbytes(self):
        return len(self.data) + sum(memoryview(shm.as_buffer(b)).nbytes for b in self.buffers)

    def __reduce_ex__(self, protocol):
        # Nested in another pickle (a reply carrying objects), the buffers stay out of band.
        return Serialized, (self.data, [pickle.PickleBuffer(shm.as_buffer(b)) for b in self.buffers],
                            self.refs, self.handles)


def _code_reduce_keeping_filename(code):
    # cloudpickle >= 3.1 replaces co_filename with "<dynamic-code>" for reproducible payloads;
    # a task's traceback must name the user's file, as Ray's does.
    ctor, args = cloudpickle.cloudpickle._code_reduce(code)
    return ctor, tuple(code.co_filename if a == "<dynamic-code>" else a for a in args)


class _Pickler(cloudpickle.Pickler):
    """cloudpickle, except that functions pickled by value keep their source file name."""

    dispatch_table = collections.ChainMap(
        {types.CodeType: _code_reduce_keeping_filename}, cloudpickle.Pickler.dispatch_table)


def _cloudpickle_dumps(value, buffer_callback=None):
    out = io.BytesIO()
    _Pickler(out, protocol=5, buffer_callback=buffer_callback).dump(value)
    return out.getvalue()


_FAST_TYPES = frozenset((type(None), bool, int, float, str, bytes))


def _is_plain(value, depth=0):
    """True for values plain ``pickle`` handles exactly as cloudpickle would (builtins only),
    so the much cheaper C pickler can serialize them (most task arguments are such). Loops,
    not generator expressions: it runs for every argument tuple submitted."""
    kind = type(value)
    if kind in _FAST_TYPES:
        return True
    if depth > 2:
        return False
    if kind is tuple or kind is list:
        if len(value) > 16:
            return False
        for item in value:
            if type(item) not in _FAST_TYPES and not _is_plain(item, depth + 1):
                return False
        return True
    if kind is dict:
        if len(value) > 16:
            return False
        for key, item in value.items():
            if type(key) is not str or (type(item) not in _FAST_TYPES and not _is_plain(item, depth + 1)):
                return False
        return True
    return False


#: The arguments of a call without any, ``((), {})``, serialized once (a Serialized is never
#: changed once made: every call without arguments shares this one).
NO_ARGS = Serialized(pickle.dumps(((), {}), protocol=5))


# Where large buffers go in this process (set by a runtime that has a shared arena): a function
# ``(raw memoryview) -> shared buffer or None``; None (or a full arena): a memfd of their own.
_allocator = None


def set_allocator(allocate):
    """Install (or, with None, remove) this process's allocator for large buffers."""
    global _allocator
    _allocator = allocate


_NO_ROOM = frozenset((errno.ENOMEM, errno.ENOSPC))


def _store_copy(raw):
    """A shared buffer holding a copy of ``raw``: the allocator's, else a memfd of its own.
    Raises :class:`~ray_adapter.core.errors.StoreFull` when no memory can be had for it."""
    try:
        shared = _allocator(raw) if _allocator is not None else None
        return shared if shared is not None else shm.ShmBuffer.copy_of(raw)
    except MemoryError as exc:
        raise errors.StoreFull(raw.nbytes, f"MemoryError: {exc}") from None
    except OSError as exc:
        if exc.errno not in _NO_ROOM:
            raise
        raise errors.StoreFull(raw.nbytes, f"{type(exc).__name__}: {exc}") from None


def dumps(value):
    """Serialize ``value``; returns :class:`Serialized`. Raises what cloudpickle raises, and
    :class:`~ray_adapter.core.errors.StoreFull` when there is no memory to store a large
    buffer of it."""
    if _is_plain(value):
        return Serialized(pickle.dumps(value, protocol=5))
    buffers = []

    def keep_in_band(buf):
        raw = buf.raw()
        if raw.nbytes < OUT_OF_BAND_MIN_BYTES:
            return True
        # Copy now: the caller may mutate its array right after ``put`` returns.
        if raw.nbytes >= shm.MIN_BYTES and shm.AVAILABLE:
            shared = shm.shared_source(raw)  # already a whole shared buffer: no copy
            buffers.append(shared if shared is not None else _store_copy(raw))
        else:
            buffers.append(bytes(raw))
        return False

    found, token = contained.collecting()
    try:
        data = _cloudpickle_dumps(value, keep_in_band)
    finally:
        contained.done(token)
    return Serialized(data, buffers, found[0], found[1])


def loads(serialized):
    """Deserialize a :class:`Serialized`; out-of-band arrays come back as read-only views."""
    if serialized.buffers:
        return pickle.loads(serialized.data, buffers=[shm.as_buffer(b) for b in serialized.buffers])
    return pickle.loads(serialized.data)


_IMMUTABLE_TYPES = frozenset((type(None), bool, int, float, complex, str, bytes))


def is_immutable(value):
    """True for values that need no copy to keep Ray's by-value semantics: None, bool, numbers,
    str, bytes, and tuples/frozensets of those (one level deep keeps the check cheap)."""
    kind = type(value)
    if kind in _IMMUTABLE_TYPES:
        return True
    if kind is tuple or kind is frozenset:
        return all(type(v) in _IMMUTABLE_TYPES for v in value)
    return False


def dumps_plain(value):
    """Serialize a value for a message body (no out-of-band buffers)."""
    return _cloudpickle_dumps(value)


loads_plain = pickle.loads
