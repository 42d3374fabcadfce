"""``ray._private.worker.global_worker``: the attributes of Ray's global worker that libraries read.

``mode`` (``SCRIPT_MODE`` in the driver, ``WORKER_MODE`` in tasks and actors), ``connected``,
``namespace``, ``current_job_id``, ``worker_id``, ``gcs_client.address``,
``node.node_ip_address``, ``placement_group_id``, ``core_worker.object_exists``; all answered
by the runtime core.
"""
from ray_adapter import core as _core
from ray_adapter.ray._private.core_access import context_if_started
from ray_adapter.ray._private.core_access import core as _ensure_core
from ray_adapter.ray._private import session as _session

SCRIPT_MODE = 0
WORKER_MODE = 1


class _GcsClient:
    """``global_worker.gcs_client``: its ``address`` (what ``ray.init`` returned)."""

    @property
    def address(self):
        return _ensure_core().context().gcs_address or (_session._context or {}).get("gcs_address", "")


class _Node:
    """``global_worker.node``: the caller's node (``node_ip_address``, ``node_id``)."""

    @property
    def node_ip_address(self):
        return _ensure_core().context().node_ip_address

    @property
    def address_info(self):
        return dict(_session._context or {})

    @property
    def node_id(self):
        return _ensure_core().context().node_id.hex()

    @property
    def unique_id(self):
        return self.node_id


class _CoreWorker:
    """``global_worker.core_worker``: what tests, libraries and the streaming generator ask
    of Ray's core worker: :meth:`object_exists` and a stream's calls
    (:meth:`try_read_next_object_ref_stream`, :meth:`peek_object_ref_stream`,
    :meth:`async_delete_object_ref_stream`). Stateless: each call goes to the core that made
    the ref."""

    @staticmethod
    def _core_of(ref):
        return ref._core if ref._core is not None else _ensure_core()

    def try_read_next_object_ref_stream(self, generator_ref):
        """The ObjectRef of the stream's next item if it is there now, taken (the caller owns
        it; a producer paused by backpressure goes on); the nil ref if not yet. Raises
        ``ObjectRefStreamEndOfStreamError`` once the stream ended with every item taken."""
        from ray_adapter.ray._private.core_access import translated
        from ray_adapter.ray._private.object_refs import ObjectRef
        from ray_adapter.ray.exceptions import GetTimeoutError, ObjectRefStreamEndOfStreamError

        core = self._core_of(generator_ref)
        try:
            with translated:
                taken = core.stream_next(generator_ref._id, 0)
        except GetTimeoutError:
            return ObjectRef.nil()
        if taken is None:
            raise ObjectRefStreamEndOfStreamError("")
        return ObjectRef(taken, core, _add_ref=False)  # the take passed its reference

    def peek_object_ref_stream(self, generator_ref):
        """``(ref, is_ready)``: a ref that is ready once the stream's next item exists (for
        ``ray.wait``; it holds no reference) and whether it is ready now (also True once the
        stream ended). Takes nothing."""
        from ray_adapter.ray._private.core_access import translated
        from ray_adapter.ray._private.object_refs import ObjectRef

        core = self._core_of(generator_ref)
        with translated:
            peek, finished = core.stream_peek(generator_ref._id)
            if finished:
                return ObjectRef(peek), True
            ready, _ = core.wait([peek], 1, 0)
        return ObjectRef(peek), bool(ready)

    def async_delete_object_ref_stream(self, generator_ref):
        """The consumer dropped the stream (its untaken items are freed); safe in finalizers."""
        core = generator_ref._core
        if core is not None:
            core.stream_close(generator_ref._id)

    def object_exists(self, object_ref, memory_store_only=False):
        """True once ``object_ref``'s object is stored and readable here without waiting
        (mirrors ``CoreWorker.object_exists``): False while its task runs, for a freed object
        and for an id the runtime never made. ``memory_store_only`` (only values kept in the
        owner's own memory, not the shared store) has no counterpart: every value here lives
        in the runtime's one store, so it must be False."""
        if memory_store_only:
            raise ValueError("core_worker.object_exists(memory_store_only=True) has no "
                             "counterpart in ray-adapter: every object lives in one store.")
        ready, _ = _ensure_core().wait([object_ref._id], 1, 0)
        return bool(ready)


_CORE_WORKER = _CoreWorker()  # stateless: one serves every call (the generator asks per item)


class _GlobalWorker:
    """``ray._private.worker.global_worker``: the attributes libraries read (``mode``,
    ``connected``, ``namespace``, ``current_job_id``, ``worker_id``, ``gcs_client.address``,
    ``node.node_ip_address``, ``placement_group_id``)."""

    gcs_client = _GcsClient()

    @property
    def node(self):
        return _Node() if _core.is_started() else None

    @property
    def core_worker(self):
        if not _core.is_started():
            raise AttributeError("'Worker' object has no attribute 'core_worker'")
        return _CORE_WORKER

    @property
    def worker_id(self):
        return _ensure_core().context().worker_id

    @property
    def placement_group_id(self):
        from ray_adapter.ray._private.object_refs import PlacementGroupID

        group = _ensure_core().context().placement_group_id
        return PlacementGroupID(group) if group else PlacementGroupID.nil()

    @property
    def should_capture_child_tasks_in_placement_group(self):
        return bool(_ensure_core().context().capture_child_tasks)

    def check_connected(self):
        if not _core.is_started():
            from ray_adapter.ray.exceptions import RaySystemError

            raise RaySystemError("Ray has not been started yet. You can start Ray with 'ray.init()'.")

    @property
    def mode(self):
        ctx = context_if_started()
        if ctx is None:
            return None
        return SCRIPT_MODE if ctx.is_driver else WORKER_MODE

    @property
    def connected(self):
        return _core.is_started()

    @property
    def namespace(self):
        return _ensure_core().context().namespace

    @property
    def current_job_id(self):
        from ray_adapter.ray._private.object_refs import JobID

        return JobID(_ensure_core().context().job_id)


global_worker = _GlobalWorker()
