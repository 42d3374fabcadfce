"""The State API's record classes, with Ray 2.60's field names (``ray.util.state.common``).

Each is a dataclass whose fields are marked filterable (usable in ``filters=``) and detail
(filled only with ``detail=True``; None otherwise), as Ray's schemas are. Records also read
like dicts (``record["actor_id"]``, ``record.get(...)``) for code written against older Ray.
"""
from dataclasses import asdict, dataclass, field, fields
from typing import List, Optional


def col(filterable=False, detail=False):
    kwargs = {"metadata": {"filterable": filterable, "detail": detail}}
    if detail:
        kwargs["default"] = None
    return field(**kwargs)


class _Schema:
    @classmethod
    def filterable_columns(cls):
        return {f.name for f in fields(cls) if f.metadata.get("filterable")}

    @classmethod
    def list_columns(cls, detail=True):
        return [f.name for f in fields(cls) if detail or not f.metadata.get("detail")]

    @classmethod
    def from_record(cls, record, detail):
        names = cls.list_columns(detail)
        return cls(**{n: record.get(n) for n in names})

    def asdict(self):
        return asdict(self)

    def __getitem__(self, key):
        return getattr(self, key)

    def __setitem__(self, key, value):
        setattr(self, key, value)

    def get(self, key, default=None):
        return getattr(self, key, default)


@dataclass
class ActorState(_Schema):
    actor_id: str = col(True)
    class_name: str = col(True)
    state: str = col(True)
    job_id: str = col(True)
    name: Optional[str] = col(True)
    node_id: Optional[str] = col(True)
    pid: Optional[int] = col(True)
    ray_namespace: Optional[str] = col(True)
    serialized_runtime_env: Optional[str] = col(detail=True)
    required_resources: Optional[dict] = col(detail=True)
    death_cause: Optional[dict] = col(detail=True)
    is_detached: Optional[bool] = col(detail=True)
    placement_group_id: Optional[str] = col(True, True)
    repr_name: Optional[str] = col(True, True)
    num_restarts: Optional[int] = col(detail=True)
    num_restarts_due_to_lineage_reconstruction: Optional[int] = col(detail=True)
    num_restarts_due_to_node_preemption: Optional[int] = col(detail=True)
    call_site: Optional[str] = col(detail=True)
    label_selector: Optional[dict] = col(detail=True)
    fallback_strategy: Optional[dict] = col(detail=True)


@dataclass
class PlacementGroupState(_Schema):
    placement_group_id: str = col(True)
    name: str = col(True)
    creator_job_id: str = col(True)
    state: str = col(True)
    bundles: Optional[List[dict]] = col(detail=True)
    is_detached: Optional[bool] = col(True, True)
    stats: Optional[dict] = col(detail=True)
    topology_strategy: Optional[dict] = col(detail=True)
    topology_assignments: Optional[dict] = col(detail=True)


@dataclass
class NodeState(_Schema):
    node_id: str = col(True)
    node_ip: str = col(True)
    is_head_node: bool = col(True)
    state: str = col(True)
    state_message: Optional[str] = col()
    node_name: str = col(True)
    resources_total: dict = col()
    labels: dict = col()
    start_time_ms: Optional[int] = col(True, True)
    end_time_ms: Optional[int] = col(True, True)


@dataclass
class WorkerState(_Schema):
    worker_id: str = col(True)
    is_alive: bool = col(True)
    worker_type: str = col(True)
    exit_type: Optional[str] = col(True)
    node_id: str = col(True)
    ip: str = col(True)
    pid: int = col(True)
    exit_detail: Optional[str] = col(detail=True)
    worker_launch_time_ms: Optional[int] = col(True, True)
    worker_launched_time_ms: Optional[int] = col(True, True)
    start_time_ms: Optional[int] = col(True, True)
    end_time_ms: Optional[int] = col(True, True)
    debugger_port: Optional[int] = col(True, True)
    num_paused_threads: Optional[int] = col(True, True)


@dataclass
class TaskState(_Schema):
    task_id: str = col(True)
    attempt_number: int = col(True)
    name: str = col(True)
    state: str = col(True)
    job_id: str = col(True)
    actor_id: Optional[str] = col(True)
    type: str = col(True)
    func_or_class_name: str = col(True)
    parent_task_id: str = col(True)
    node_id: Optional[str] = col(True)
    worker_id: Optional[str] = col(True)
    worker_pid: Optional[int] = col(True)
    error_type: Optional[str] = col(True)
    language: Optional[str] = col(True, True)
    required_resources: Optional[dict] = col(detail=True)
    runtime_env_info: Optional[dict] = col(detail=True)
    placement_group_id: Optional[str] = col(True, True)
    events: Optional[List[dict]] = col(detail=True)
    profiling_data: Optional[dict] = col(detail=True)
    creation_time_ms: Optional[int] = col(detail=True)
    start_time_ms: Optional[int] = col(detail=True)
    end_time_ms: Optional[int] = col(detail=True)
    task_log_info: Optional[dict] = col(detail=True)
    error_message: Optional[str] = col(detail=True)
    is_debugger_paused: Optional[bool] = col(True, True)
    call_site: Optional[str] = col(detail=True)
    label_selector: Optional[dict] = col(detail=True)
    fallback_strategy: Optional[dict] = col(detail=True)


@dataclass
class ObjectState(_Schema):
    object_id: str = col(True)
    object_size: int = col(True)
    task_status: str = col(True)
    attempt_number: int = col(True)
    reference_type: str = col(True)
    call_site: str = col(True)
    type: str = col(True)
    pid: int = col(True)
    ip: str = col(True)


@dataclass
class JobState(_Schema):
    """A job (Ray's ``JobDetails`` fields): a driver's (``type`` DRIVER) or one submitted
    through the Jobs API (SUBMISSION). Times are milliseconds since the epoch."""
    job_id: Optional[str] = col(True)
    submission_id: Optional[str] = col(True)
    entrypoint: str = col()
    type: str = col(True)
    status: str = col(True)
    message: Optional[str] = col()
    error_type: Optional[str] = col()
    driver_info: Optional[dict] = col()
    start_time: Optional[int] = col(detail=True)
    end_time: Optional[int] = col(detail=True)
    metadata: Optional[dict] = col(detail=True)
    runtime_env: Optional[dict] = col(detail=True)
    driver_agent_http_address: Optional[str] = col(detail=True)
    driver_node_id: Optional[str] = col(detail=True)
    driver_exit_code: Optional[int] = col(detail=True)
