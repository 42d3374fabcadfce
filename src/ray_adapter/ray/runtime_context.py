"""``ray.runtime_context``: :class:`RuntimeContext` and :func:`get_runtime_context`."""
from ray_adapter import gaps
from ray_adapter.ray._private.core_access import context as _context
from ray_adapter.ray._raylet import ActorID, JobID, NodeID, TaskID


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
        """A dict of the context (``job_id``, ``node_id``, ``namespace``, and ``task_id`` /
        ``actor_id`` where they exist)."""
        out = {"job_id": self.job_id, "node_id": self.node_id, "namespace": self.namespace}
        ctx = self._ctx()
        if not ctx.is_driver:
            out["task_id"] = self.task_id
            out["actor_id"] = self.actor_id
        return out

    # -- ids ---------------------------------------------------------------------------------
    def get_job_id(self):
        return self._ctx().job_id.hex()

    @property
    def job_id(self):
        return JobID(self._ctx().job_id)

    def get_node_id(self):
        return self._ctx().node_id.hex()

    @property
    def node_id(self):
        return NodeID(self._ctx().node_id)

    def get_task_id(self):
        ctx = self._ctx()
        if ctx.is_driver or ctx.task_id is None:
            return None
        return ctx.task_id.hex()

    @property
    def task_id(self):
        ctx = self._ctx()
        return TaskID(ctx.task_id) if not ctx.is_driver and ctx.task_id else None

    def get_actor_id(self):
        actor_id = self._ctx().actor_id
        return actor_id.hex() if actor_id is not None else None

    @property
    def actor_id(self):
        actor_id = self._ctx().actor_id
        return ActorID(actor_id) if actor_id is not None else None

    def get_worker_id(self):
        worker_id = self._ctx().worker_id
        return worker_id.hex() if worker_id is not None else None

    def get_actor_name(self):
        return self._ctx().actor_name

    def get_task_name(self):
        return self._ctx().task_name or None

    def get_task_function_name(self):
        return self._ctx().task_name or None

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
        """``{resource: amount}`` held by the current task or actor (``{}`` in the driver)."""
        return dict(self._ctx().assigned_resources)

    def get_accelerator_ids(self):
        """``{"GPU": [ids as str], "NPU": [...]}`` assigned to the current task or actor."""
        ctx = self._ctx()
        return {"GPU": [str(i) for i in ctx.gpu_ids], "NPU": []}

    def get_resource_ids(self):
        return self.get_accelerator_ids()

    def was_current_actor_reconstructed(self):
        return bool(self._ctx().was_restarted)

    def get_placement_group_id(self):
        return None

    @property
    def current_placement_group_id(self):
        return None

    def should_capture_child_tasks_in_placement_group(self):
        return False

    def get_node_labels(self):
        return {"ray.io/node-id": self.get_node_id()}

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
        return ""

    def get_session_name(self):
        return "ray-adapter-embedded"

    def get_temp_dir(self):
        import tempfile

        return tempfile.gettempdir()

    def is_canceled(self):
        return False


_runtime_context = RuntimeContext()


def get_runtime_context():
    """The :class:`RuntimeContext` of the calling process (mirrors ``ray.get_runtime_context``)."""
    return _runtime_context


__getattr__ = gaps.module_getattr("ray.runtime_context")
