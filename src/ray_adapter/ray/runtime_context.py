"""``ray.runtime_context``: :class:`RuntimeContext` and :func:`get_runtime_context`."""
import logging
import warnings

from ray_adapter import gaps
from ray_adapter.ray._private.core_access import context as _context
from ray_adapter.ray._private.global_worker import global_worker as _global_worker
from ray_adapter.ray._private.object_refs import ActorID, JobID, NodeID, PlacementGroupID, TaskID

logger = logging.getLogger("ray.runtime_context")  # Ray's name: on the "ray" logger

#: The accelerator resources Ray 2.60 reports in ``get_accelerator_ids()`` (all keys, always).
ACCELERATOR_KINDS = ("GPU", "neuron_cores", "NPU", "MBLT", "RBLN", "TPU", "HPU", "FURIOSA", "TTNPU")


_DEPRECATED = ("This API is deprecated and may be removed in future Ray releases. You could "
               "suppress this warning by setting env variable "
               'PYTHONWARNINGS="ignore::DeprecationWarning"')


def _deprecated(replacement):
    """Ray's notice for a deprecated RuntimeContext member (``@Deprecated(warning=True)``): a
    ``RayDeprecationWarning`` saying what to use instead."""
    from ray_adapter.ray.dag.dag_node import RayDeprecationWarning

    warnings.warn(f"{_DEPRECATED}\n{replacement}", RayDeprecationWarning, stacklevel=3)


def _in_driver(ctx):
    """True in a driver, after Ray's warning there (its task and actor getters are worker-only:
    ``Current mode: 0`` is Ray's SCRIPT_MODE)."""
    if not ctx.is_driver:
        return False
    logger.warning("This method is only available when the process is a worker. Current mode: 0")
    return True


class RuntimeContext:
    """The context of the calling driver, task or actor (mirrors ``ray.runtime_context.RuntimeContext``).

    ``get_*_id()`` return hex strings: job 8 digits, node 56, task 48, actor 32; task and actor
    ids are None where there is no task or actor (the driver has no task id).
    """

    def __init__(self, worker=None):
        self.worker = worker

    @staticmethod
    def _ctx():
        return _context()

    def get(self):
        """A dict of the context (``job_id``, ``node_id``, ``namespace``, and in a task or actor
        ``task_id`` / ``actor_id`` where they exist: a plain task has no ``actor_id`` key).
        Deprecated in Ray 2.60 (a ``RayDeprecationWarning``), as are the id properties it reads."""
        _deprecated("Use get_xxx_id() methods to get relevant ids instead")
        out = {"job_id": self.job_id, "node_id": self.node_id, "namespace": self.namespace}
        ctx = self._ctx()
        if not ctx.is_driver:
            task_id, actor_id = self.task_id, self.actor_id
            if task_id is not None:
                out["task_id"] = task_id
            if actor_id is not None:
                out["actor_id"] = actor_id
        return out

    # -- ids ---------------------------------------------------------------------------------
    def get_job_id(self):
        return self._ctx().job_id.hex()

    @property
    def job_id(self):
        _deprecated("Use get_job_id() instead")
        return JobID(self._ctx().job_id)

    def get_node_id(self):
        return self._ctx().node_id.hex()

    @property
    def node_id(self):
        _deprecated("Use get_node_id() instead")
        return NodeID(self._ctx().node_id)

    def get_task_id(self):
        """The running task's or actor call's id (hex); None in the driver, with Ray's warning."""
        ctx = self._ctx()
        if _in_driver(ctx) or ctx.task_id is None:
            return None
        return ctx.task_id.hex()

    @property
    def task_id(self):
        _deprecated("Use get_task_id() instead")
        ctx = self._ctx()
        return TaskID(ctx.task_id) if not ctx.is_driver and ctx.task_id else None

    def get_actor_id(self):
        actor_id = self._ctx().actor_id
        return actor_id.hex() if actor_id is not None else None

    @property
    def actor_id(self):
        _deprecated("Use get_actor_id() instead")
        actor_id = self._ctx().actor_id
        return ActorID(actor_id) if actor_id is not None else None

    def get_worker_id(self):
        worker_id = self._ctx().worker_id
        return worker_id.hex() if worker_id is not None else None

    def get_actor_name(self):
        """The name of the current actor: ``""`` for an unnamed actor, None outside an actor
        (Ray 2.60; in the driver with Ray's warning)."""
        ctx = self._ctx()
        if _in_driver(ctx) or ctx.actor_id is None:
            return None
        return ctx.actor_name or ""

    def get_task_name(self):
        """The running task's or actor call's name; None in the driver, with Ray's warning."""
        ctx = self._ctx()
        return None if _in_driver(ctx) else ctx.task_name or None

    def get_task_function_name(self):
        """The running task's or actor call's function as Ray names it (``module.function``,
        ``module.Class.method``; a script's module is its file name); None in the driver, with
        Ray's warning."""
        ctx = self._ctx()
        if _in_driver(ctx):
            return None
        return ctx.function_name or ctx.task_name or None

    @property
    def namespace(self):
        return self._ctx().namespace

    @property
    def current_actor(self):
        """A handle to the actor this code runs in; raises RuntimeError outside an actor."""
        from ray_adapter.ray.actor import ActorHandle

        ctx = self._ctx()
        if ctx.actor_id is None:
            raise RuntimeError("This method is only available in an actor.")
        return ActorHandle(ctx.actor_id, ctx.actor_handle_meta)

    # -- resources ---------------------------------------------------------------------------
    def get_assigned_resources(self):
        """``{resource: amount}`` held by the current task or actor. As Ray, in the driver an
        AssertionError (the method is a worker's)."""
        ctx = self._ctx()
        # Ray's text, its f-string's continuation spaces included.
        assert not ctx.is_driver, ("This method is only available when the process is a"
                                   "                 worker. Current mode: 0")
        return dict(ctx.assigned_resources)

    def get_accelerator_ids(self):
        """``{kind: [device ids as str]}`` assigned to the current task or actor, for every
        accelerator kind Ray knows (``GPU``, ``NPU``, ``TPU``, ...; ``[]`` when none)."""
        ctx = self._ctx()
        assigned = dict(ctx.accelerator_ids or {})
        if "GPU" not in assigned and ctx.gpu_ids:
            assigned["GPU"] = list(ctx.gpu_ids)
        return {kind: [str(i) for i in assigned.get(kind, ())] for kind in ACCELERATOR_KINDS}

    def get_resource_ids(self):
        _deprecated("Use get_accelerator_ids() instead")
        return self.get_accelerator_ids()

    @property
    def was_current_actor_reconstructed(self):
        """True inside an actor that was restarted (a property, as in Ray)."""
        return bool(self._ctx().was_restarted)

    def get_placement_group_id(self):
        """The hex id (36 digits) of the placement group the caller runs in, or None."""
        group = self._ctx().placement_group_id
        return group.hex() if group else None

    @property
    def current_placement_group_id(self):
        _deprecated("Use get_placement_group_id() instead")
        group = self._ctx().placement_group_id
        return PlacementGroupID(group) if group else PlacementGroupID.nil()

    def should_capture_child_tasks_in_placement_group(self):
        return bool(self._ctx().capture_child_tasks)

    def get_node_labels(self):
        """The labels of the caller's node (``ray.io/node-id`` and the node's own)."""
        from ray_adapter.ray._private.core_access import core, translated

        node_id = self.get_node_id()
        with translated:
            for node in core().nodes():
                if node["node_id"] == node_id:
                    return {"ray.io/node-id": node_id, **dict(node.get("labels") or {})}
        return {"ray.io/node-id": node_id}

    def get_runtime_env_string(self):
        import json

        return json.dumps(self._ctx().runtime_env or {})

    @property
    def runtime_env(self):
        """The runtime env of the job, task or actor calling (a :class:`RuntimeEnv`; its
        working_dir / py_modules are this session's package URIs, as Ray shows them)."""
        from ray_adapter.ray.runtime_env import RuntimeEnv

        return RuntimeEnv(_validate=False, **dict(self._ctx().runtime_env or {}))

    @property
    def gcs_address(self):
        return self._ctx().gcs_address

    def get_session_name(self):
        return "ray-adapter-embedded"

    def get_temp_dir(self):
        import tempfile

        return tempfile.gettempdir()

    def is_canceled(self):
        """True once ``ray.cancel`` was called on the running task or actor call (a call of a
        sync or threaded actor is not interrupted: it can check this and stop). Raises
        RuntimeError in the driver and in an async actor, as Ray does."""
        ctx = self._ctx()
        if ctx.is_driver:
            raise RuntimeError("This method is only available when the process is a worker. "
                               "Current mode: 0")
        if ctx.actor_is_async:
            raise RuntimeError("This method is not supported in an async actor.")
        return bool(ctx.is_canceled)


_runtime_context = RuntimeContext(_global_worker)  # ``.worker.mode``: 0 driver, 1 worker


def get_runtime_context():
    """The :class:`RuntimeContext` of the calling process (mirrors ``ray.get_runtime_context``)."""
    return _runtime_context


__getattr__ = gaps.module_getattr("ray.runtime_context")
