"""Object references and Ray's id classes, as ``ray._raylet`` exposes them (:class:`ObjectRef`,
also ``ray.ObjectRef``; ``JobID``, ``ActorID``, ...). The proxy's refs layer: above the session,
below options, submission and the API.

An ObjectRef holds an object id of the runtime core and one local reference to it: when the
last ObjectRef of an id is garbage-collected in the driver, the core may free the value, as
Ray's reference counting does.
"""
from ray_adapter import core as _core
from ray_adapter.core import contained
from ray_adapter.ray._private import core_access as _core_access


class _BaseID:
    __slots__ = ("_id",)
    SIZE = 0  # bytes of the id (0: any)

    def __init__(self, binary):
        self._id = binary

    @classmethod
    def from_binary(cls, binary):
        return cls(binary)

    @classmethod
    def from_hex(cls, hex_id):
        """The id of ``hex_id``; raises ValueError for a string that is not hex (or of the
        wrong length for this id type)."""
        binary = bytes.fromhex(hex_id)
        if cls.SIZE and len(binary) != cls.SIZE:
            raise ValueError(f"{cls.__name__} must be {cls.SIZE} bytes, got {len(binary)}")
        return cls(binary)

    @classmethod
    def nil(cls):
        return cls(b"\xff" * (cls.SIZE or 28))

    @classmethod
    def size(cls):
        return cls.SIZE

    def __reduce__(self):
        return type(self), (self._id,)

    def binary(self):
        return self._id

    def hex(self):
        return self._id.hex()

    def is_nil(self):
        return not any(self._id) or self._id == b"\xff" * len(self._id)

    def __eq__(self, other):
        return type(other) is type(self) and other._id == self._id

    def __hash__(self):
        return hash(self._id)

    def __repr__(self):
        return f"{type(self).__name__}({self._id.hex()})"


class JobID(_BaseID):
    """A job id; ``hex()`` is 8 hex digits (``01000000`` for the first job: its number,
    4 bytes little-endian)."""

    @classmethod
    def from_int(cls, value):
        """The id of job number ``value`` (mirrors ``JobID.from_int``); as Ray's, raises
        AssertionError above ``2**32 - 1``, OverflowError below 0, TypeError for a non-number."""
        assert value < 2 ** 32, "Maximum JobID integer is 2**32 - 1."
        if value < 0:
            raise OverflowError("can't convert negative value to uint32_t")
        return cls(int(value).to_bytes(4, "little"))

    def int(self):
        """The job's number (mirrors ``JobID.int``)."""
        return int.from_bytes(self._id, "little")


class NodeID(_BaseID):
    """A node id; ``hex()`` is 56 hex digits."""

    SIZE = 28


class TaskID(_BaseID):
    """A task id; ``hex()`` is 48 hex digits."""


class WorkerID(_BaseID):
    """A worker id; ``hex()`` is 56 hex digits."""


class ActorID(_BaseID):
    """An actor id (``handle._actor_id``); ``hex()`` is 32 hex digits."""


class PlacementGroupID(_BaseID):
    """A placement group id (``pg.id``); ``hex()`` is 36 hex digits, the last 8 the job id."""

    SIZE = 18


#: The advice every one of Ray 2.60's "owner is unknown" errors ends with (a ref of an earlier
#: session: passed to a task, stored in a value, or given to ray.get / ray.wait).
UNKNOWN_OWNER_ADVICE = (
    "Please make sure that all Ray objects you are trying to access are part of the current Ray "
    "session. Note that object IDs generated randomly (ObjectID.from_random()) or out-of-band "
    "(ObjectID.from_binary(...)) cannot be passed as a task argument because Ray does not know "
    "which task created them. If this was not how your object ID was generated, please file an "
    "issue at https://github.com/ray-project/ray/issues/")


def unknown_owner_error(ref):
    """Ray's ValueError for a ref of a previous session (its owner is gone) passed to a task or
    stored in a value."""
    return ValueError("An application is trying to access a Ray object whose owner is "
                      f"unknown({ref.hex()}). {UNKNOWN_OWNER_ADVICE}")


def from_old_sessions(refs):
    """The refs among ``refs`` made by a runtime that was shut down since (as in Ray, nothing
    can reach their objects any more; a ref built from bytes by the user is not judged)."""
    current = _core._current
    return [r for r in refs if r._core is not None and r._core is not current]


_NIL_OBJECT_ID = b"\xff" * 28


class ObjectRef:
    """A reference to a (possibly not yet computed) object; mirrors ``ray.ObjectRef``.

    ``hex()`` is 56 hex digits (28 bytes). Picklable: an ObjectRef serialized into another
    value (an argument, a stored object) keeps its object alive until the runtime shuts down.
    """

    __slots__ = ("_id", "_core", "__weakref__")

    def __init__(self, object_id, _core_ref=None, _add_ref=True):
        self._core = None  # __del__ runs even when a check below raises
        if type(object_id) is not bytes or len(object_id) != 28:  # as Ray checks an id
            if not isinstance(object_id, bytes):
                raise TypeError(f"Unsupported type: {type(object_id)}, expected bytes")
            if len(object_id) != 28:
                raise ValueError(f"ID string needs to have length 28, got {len(object_id)}")
        self._id = object_id
        self._core = _core_ref
        if _add_ref and _core_ref is not None:
            _core_ref.add_local_reference(object_id)

    # -- identity ----------------------------------------------------------------------------
    def binary(self):
        """The id as 28 raw bytes."""
        return self._id

    def hex(self):
        """The id as 56 hex digits."""
        return self._id.hex()

    def task_id(self):
        """The :class:`TaskID` of the task that creates this object (the id's first 24 bytes),
        as Ray's ``ObjectRef.task_id()``."""
        return TaskID(self._id[:24])

    def is_nil(self):
        """True for :meth:`nil` (all bits set), as Ray's."""
        return self._id == _NIL_OBJECT_ID

    @classmethod
    def nil(cls):
        """The nil ObjectRef (what a generator's ``_next_sync`` returns when nothing is ready)."""
        return cls(_NIL_OBJECT_ID)

    @classmethod
    def from_random(cls):
        """An ObjectRef of a random id no object has (as Ray's ``ObjectRef.from_random``)."""
        import os

        return cls(os.urandom(24) + b"\x00" * 4)

    @classmethod
    def from_binary(cls, binary):
        """The ObjectRef of the 28-byte id ``binary`` (holds no reference to its object)."""
        return cls(binary)

    @classmethod
    def size(cls):
        """Bytes of an object id: 28."""
        return 28

    def job_id(self):
        """The :class:`JobID` of the job that created this object (as Ray's)."""
        return JobID(self._id[20:24])

    def __eq__(self, other):
        return type(other) is type(self) and other._id == self._id

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return hash(self._id)

    def __repr__(self):
        return f"ObjectRef({self._id.hex()})"

    # -- lifetime ----------------------------------------------------------------------------
    def __del__(self):
        core = self._core
        if core is not None:
            try:
                core.remove_local_reference(self._id)
            except Exception:  # interpreter shutdown: the runtime may be gone already
                pass

    def __reduce__(self):
        # Inside a value the runtime serializes, the runtime learns of it with the value;
        # pickled anywhere else (a user's own pickle), it escapes all tracking.
        if not contained.record_ref(self._id):
            if self._core is not None:
                self._core.object_escaped(self._id)
        elif self._core is not None and self._core is not _core._current:
            raise unknown_owner_error(self)  # a value the runtime serializes holds it
        return _rebuild, (self._id,)

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    # -- futures -----------------------------------------------------------------------------
    def future(self):
        """A ``concurrent.futures.Future`` resolving to the object's value, or failing with the
        Ray exception ``ray.get`` would raise (mirrors ``ObjectRef.future``). No thread is
        started: the runtime settles it when the object is sealed."""
        import concurrent.futures

        with _core_access.translated:
            inner = _core_access.core().object_future(self._id)
        outer = concurrent.futures.Future()

        def settle(done, ref=self):  # ``ref`` keeps the object alive until then
            if outer.done():  # cancelled by its holder (asyncio.wait_for timed out...): as Ray,
                return  # nothing to report
            exc = done.exception()
            try:
                if exc is None:
                    value = done.result()
                    raised = _core_access.stored_error(value)
                    if raised is None:
                        outer.set_result(value)
                    else:
                        outer.set_exception(raised)
                else:
                    outer.set_exception(_core_access.ray_error(exc) if isinstance(exc, _core.errors.CoreError) else exc)
            except concurrent.futures.InvalidStateError:  # cancelled just now
                pass

        inner.add_done_callback(settle)
        return outer

    def _on_completed(self, py_callback):
        """Ray's internal completion hook (``ObjectRef._on_completed``, which Ray Serve and Ray's
        tests use): once the object is ready, call ``py_callback(result)`` with its value, or
        with the exception object ``ray.get`` would raise. Called soon when it is ready
        already. The callback runs on the runtime thread that completes the object, so it must
        not block (as in Ray, where it runs on the core worker's thread). Returns ``self``."""

        def call(done):
            exc = done.exception()
            py_callback(done.result() if exc is None else exc)

        self.future().add_done_callback(call)
        return self

    def as_future(self):
        """An ``asyncio.Future`` on the running loop resolving to the object's value."""
        import asyncio

        return asyncio.wrap_future(self.future())

    def __await__(self):
        return self.as_future().__await__()


def put_object(value):
    """Store ``value`` with the running core (started if need be); its :class:`ObjectRef`,
    holding the one reference the core counted. What ``ray.put`` does after checking its
    argument (it refuses an ObjectRef; a generator's items and a placement group's own ready
    object may be anything). Core failures are raised as Ray's exceptions."""
    core = _core_access.core()
    with _core_access.translated:
        return ObjectRef(core.put(value), core, _add_ref=False)


def _rebuild(object_id):
    """Unpickle an ObjectRef in whichever process holds it now."""
    return ObjectRef(object_id, _core.current() if _core.is_started() else None)


# Ray's home of these classes is ``ray._raylet`` (the surface module re-exporting them): their
# repr, pickles and the compat matrix name them there; ObjectRef's ``__module__`` is ``ray``
# in Ray 2.60 (the hook publishes both under the Ray names: ``hook.publish``).
for _cls in (JobID, NodeID, TaskID, WorkerID, ActorID, PlacementGroupID):
    _cls.__module__ = "ray_adapter.ray._raylet"
del _cls
ObjectRef.__module__ = "ray_adapter.ray"
