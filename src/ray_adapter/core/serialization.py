"""Value serialization for the runtime core: cloudpickle, pickle protocol 5.

Contiguous buffers (numpy arrays, bytearrays) travel out of band as separate buffers, so readers
get read-only views over them, as from Ray's object store; large ones are copied once into
shared memory (:mod:`.shm`) and never again on their way between processes.

Torch CPU tensors: torch pickles a tensor as its metadata plus its storage (a TypedStorage for
every dtype but float8 and bits), and a storage by ``torch.save`` into bytes (in band: a
serialization, a copy into the pickle, and a ``torch.load`` per reader). Here a CPU storage's
bytes travel out of band instead (tensors keep torch's own reduce: shape, strides, offset,
``requires_grad``). As from Ray, a reader gets a
writable tensor of its own: where the bytes were received in shared memory, over a private
copy-on-write mapping made for that storage alone (no copy; what it writes is seen by no other
read and freed with it: :func:`.shm.own_array`), elsewhere (the driver reading its own put;
small storages sent in band) over a copy.
"""
import collections
import errno
import io
import pickle
import sys
import types

import cloudpickle

from ray_adapter.core import contained, errors, shm
from ray_adapter.hook import PUBLISHED as _PUBLISHED
from ray_adapter.hook import canonical_class

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


def _storage_bytes(untyped):
    """A uint8 numpy array viewing a CPU UntypedStorage's bytes (no copy)."""
    import torch

    return torch.empty(0, dtype=torch.uint8).set_(untyped).numpy()


def _reduce_storage(storage):
    """A CPU TypedStorage (what torch pickles a tensor's data as, for every dtype but the
    float8/bits ones) with its bytes out of band; any other (a device's, a fake one) as torch
    pickles it."""
    untyped = storage._untyped_storage
    if untyped.device.type != "cpu" or getattr(storage, "_fake_device", None) is not None:
        return storage.__reduce__()
    data = _storage_bytes(untyped) if untyped.nbytes() else b""
    return _rebuild_storage, (pickle.PickleBuffer(data), storage.dtype)


def _rebuild_storage(buffer, dtype):
    """The TypedStorage :func:`_reduce_storage` sent: writable and the reader's own (see the
    module's docstring)."""
    import numpy
    import torch

    array = shm.own_array(buffer)  # received shared memory, mapped for this storage: no copy
    if array is None:
        array = numpy.frombuffer(bytearray(buffer), dtype=numpy.uint8)
    untyped = torch.from_numpy(array).untyped_storage() if array.nbytes else torch.UntypedStorage(0)
    return torch.storage.TypedStorage(wrap_storage=untyped, dtype=dtype, _internal=True)


#: Reducers added once torch is imported in this process (see :func:`_torch_reducers`).
_LATE_REDUCERS = {}


def _torch_reducers():
    """Register the storage reducers the first time a value is pickled with torch imported."""
    torch = sys.modules.get("torch")
    if torch is None or _LATE_REDUCERS:
        return
    storage = getattr(torch, "storage", None)
    if storage is None or not hasattr(storage, "TypedStorage"):
        return  # torch is still being imported
    _LATE_REDUCERS[storage.TypedStorage] = _reduce_storage


class _Pickler(cloudpickle.Pickler):
    """cloudpickle, except that functions pickled by value keep their source file name, CPU
    torch storages travel out of band, and a proxy class the import hook gave its Ray name
    (``hook.publish``: ``ray.exceptions.GetTimeoutError``) is named by the module that defines
    it, so the value loads in a process without the hook too."""

    dispatch_table = collections.ChainMap(
        {types.CodeType: _code_reduce_keeping_filename}, _LATE_REDUCERS, cloudpickle.Pickler.dispatch_table)

    def reducer_override(self, obj):
        if isinstance(obj, type):
            home = _PUBLISHED.get(obj)
            if home is not None:
                return canonical_class, (home, obj.__qualname__)
        return cloudpickle.Pickler.reducer_override(self, obj)


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
    if not _LATE_REDUCERS:
        _torch_reducers()
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


def dumps_for_channel(value):
    """``value`` pickled as :func:`dumps` pickles it, for a pipe that carries its buffers itself
    (:mod:`.pipes`): ``(pickle bytes, [raw out-of-band buffers])``, the buffers views of the
    value's own memory (no copy). Refs and handles inside travel as escaped ones (kept alive).
    Raises what pickling raises."""
    if _is_plain(value):
        return pickle.dumps(value, protocol=5), ()
    if not _LATE_REDUCERS:
        _torch_reducers()
    buffers = []

    def out_of_band(buf):
        buffers.append(buf.raw())
        return False

    return _cloudpickle_dumps(value, out_of_band), buffers


def dumps_error(core_error):
    """A core error serialized (:func:`dumps`); a user exception in it that cannot travel (it
    does not pickle, or does not rebuild from its pickle) is replaced by its text, and
    ``cause_lost`` says which."""
    lost = None
    try:
        ser = dumps(core_error)
    except Exception:
        lost = "pickle"
    else:
        try:
            loads(ser)  # an exception that pickles may still fail to rebuild
        except Exception:
            lost = "rebuild"
    if lost is not None and isinstance(core_error, errors.TaskFailed):
        core_error = errors.TaskFailed(None, core_error.traceback_str, core_error.function_name,
                                       core_error.pid, core_error.ip, core_error.actor_repr,
                                       core_error.cause_repr, cause_lost=lost,
                                       actor_id=core_error.actor_id)
    return ser if lost is None else dumps(core_error)


def loads(serialized):
    """Deserialize a :class:`Serialized`; out-of-band arrays come back as read-only views."""
    if serialized.buffers:
        return pickle.loads(serialized.data, buffers=[shm.as_buffer(b) for b in serialized.buffers])
    return pickle.loads(serialized.data)


def loads_value(serialized):
    """:func:`loads` of a value a user reads (``ray.get``, a call's arguments): one that cannot
    be rebuilt raises :class:`errors.Undeserializable` (Ray's ``RaySystemError``), with the
    exception its unpickling raised and that exception's traceback."""
    try:
        return loads(serialized)
    except Exception as exc:  # noqa: BLE001 - whatever a value's own reducer raises
        import traceback

        raise errors.Undeserializable(exc, traceback.format_exc()) from None


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
