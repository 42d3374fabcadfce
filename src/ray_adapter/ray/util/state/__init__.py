"""``ray.util.state``: the State API, served by the runtime itself (no dashboard process).

``list_actors`` / ``list_nodes`` / ``list_placement_groups`` / ``list_tasks`` /
``list_workers`` / ``list_objects`` return Ray's record dataclasses (``ActorState``, ``NodeState``, ...: fields as
Ray 2.60's, detail-only fields None unless ``detail=True``); ``get_*`` return one record (a
list of attempts for ``get_task``) or None; ``summarize_tasks`` / ``summarize_actors`` /
``summarize_objects`` return Ray's summary dicts. ``filters`` are ``(column, "=" | "!=", value)`` tuples on filterable
columns (strings compare case-insensitively), ``limit`` caps the number of records. Once
this process has called ``ray.init()`` its runtime answers, in-process and completely; before
that, as Ray's State API, nothing is started: the running runtime at ``address`` (None:
``RAY_ADDRESS``, else this machine's) is read, and ConnectionError (Ray's text) says when
there is none. ``timeout`` and ``raise_on_missing_output`` are accepted. Logs, runtime envs
and cluster events are not provided (see the compat matrix).
"""
from ray_adapter import gaps
from ray_adapter.core import errors as core_errors
from ray_adapter.ray._private.core_access import core_if_started, translated
from ray_adapter.ray._private.errors import actor_record as _actor_record
from ray_adapter.ray._private.errors import worker_exit
from ray_adapter.ray.util.state._schema import (ActorState, JobState, NodeState, ObjectState,
                                                PlacementGroupState, TaskState, WorkerState)

DEFAULT_LIMIT = 100
DEFAULT_RPC_TIMEOUT = 30


def _records(kind, symbol=None, address=None):
    """The runtime's raw records of ``kind``. Before ``ray.init()`` this process starts no
    runtime for them (as Ray's State API starts no cluster): it reads the running one at
    ``address`` through a connection of its own (:mod:`ray_adapter.ray._private.observing`),
    and raises ConnectionError, with Ray's text, when none runs."""
    with translated:
        try:
            running = core_if_started()  # read once: a shutdown meanwhile starts nothing
            if running is not None:
                try:
                    return running.state(kind)
                except core_errors.NotInitialized:
                    if core_if_started() is running:  # the runtime itself has ended
                        raise
                    # This process's own session ended meanwhile (another thread's
                    # ray.shutdown()): read as a process that never started one does.
            from ray_adapter.ray._private import observing

            return observing.records(kind, address)
        except NotImplementedError:
            # Provided on another backend; the matrix says why not on this one.
            raise NotImplementedError(str(gaps.attribute_gap_error(
                "ray.util.state", symbol or f"list_{kind}"))) from None


def _worker_record(w):
    facts = w.get("exit")
    if not facts:
        return w
    exit_type, detail = worker_exit(facts)
    return dict(w, exit_type=exit_type, exit_detail=detail)


def _node_record(n):
    return {"node_id": n["node_id"], "node_ip": n["address"], "is_head_node": bool(n.get("is_head")),
            "state": "ALIVE" if n["alive"] else "DEAD", "state_message": None,
            "node_name": n["address"], "resources_total": dict(n["resources_total"]),
            "labels": dict(n.get("labels") or {}),
            "start_time_ms": int(n["start_time"] * 1000) if n.get("start_time") else None,
            "end_time_ms": int(n["end_time"] * 1000) if n.get("end_time") else None}


def _group_record(g):
    """The State API's placement group: bundles and stats as Ray's (its protobuf messages as
    dicts: 64-bit figures are strings, times in ns, latencies in us)."""
    gid = g["placement_group_id"].hex()
    nodes = g["bundle_nodes"]
    stats = g["stats"]
    requested_ns = g.get("requested_at_ns", 0)
    latency_us = str(int(stats["end_to_end_creation_latency_ms"] * 1000))
    return {"placement_group_id": gid, "name": g["name"], "creator_job_id": g["creator_job_id"].hex(),
            "state": g["state"], "is_detached": g["detached"],
            "stats": {"creation_request_received_ns": str(requested_ns),
                      "scheduling_started_time_ns": str(requested_ns),
                      "scheduling_latency_us": latency_us, "end_to_end_creation_latency_us": latency_us,
                      "scheduling_attempt": stats["scheduling_attempt"],
                      "scheduling_state": stats["scheduling_state"],
                      "highest_retry_delay_ms": stats["highest_retry_delay_ms"]},
            "bundles": [{"bundle_id": {"placement_group_id": gid, "bundle_index": i},
                         "unit_resources": dict(b),
                         "node_id": (nodes[i] if i < len(nodes) else None) or "",  # "": unplaced
                         "label_selector": {}}
                        for i, b in enumerate(g["bundles"])],
            "topology_strategy": {}, "topology_assignments": {}}


_SOURCES = {
    "actors": (ActorState, _actor_record),
    "nodes": (NodeState, _node_record),
    "placement_groups": (PlacementGroupState, _group_record),
    "tasks": (TaskState, lambda r: r),
    "workers": (WorkerState, _worker_record),
    "objects": (ObjectState, lambda r: r),
    "jobs": (JobState, lambda r: r),
}


def _check_filters(filters, schema):
    """Raise Ray's ValueError for a column that cannot be filtered on or a bad predicate."""
    for column, predicate, _ in filters or ():
        if column.lower() not in schema.filterable_columns():
            raise ValueError(f"The given filter column {column.lower()} is not supported. Enter "
                             "filters with –-filter key=value or –-filter key!=value Supported "
                             f"filter columns: {schema.filterable_columns()}")
        if predicate not in ("=", "!="):
            raise ValueError(f"Unsupported filter predicate {predicate!r}; use '=' or '!='.")


def _matches(record, filters):
    for column, predicate, value in filters or ():
        actual = record.get(column.lower())
        if isinstance(value, str) and isinstance(actual, str):
            equal = actual.lower() == value.lower()
        elif isinstance(value, str) and isinstance(actual, (bool, int, float)):
            equal = str(actual).lower() == value.lower()
        else:
            equal = actual == value
        if equal != (predicate == "="):
            return False
    return True


def _select(kind, raw, filters=None, limit=None, detail=False):
    """``(records, num_filtered)``: the runtime's raw records ``raw`` of ``kind`` ("actors",
    "nodes", ...) as Ray's record classes, those matching ``filters`` (see the module notes),
    at most ``limit`` of them; ``num_filtered`` counts every match. Raises ValueError for a
    column that cannot be filtered on or an unknown predicate (as Ray does). The REST routes of
    a ``ray start`` head use it too (:mod:`._rest`)."""
    schema, convert = _SOURCES[kind]
    _check_filters(filters, schema)  # refused whether or not there are records
    out, matched = [], 0
    for one in raw:
        record = convert(one)
        if _matches(record, filters):
            matched += 1
            if limit is None or len(out) < limit:
                out.append(schema.from_record(record, detail))
    return out, matched


def _list(kind, filters, limit, detail, address=None):
    return _select(kind, _records(kind, address=address), filters, limit, detail)[0]


def list_actors(address=None, filters=None, limit=DEFAULT_LIMIT, timeout=DEFAULT_RPC_TIMEOUT,
                detail=False, raise_on_missing_output=True, _explain=False):
    """Actors of this runtime (live and dead), as :class:`ActorState` records."""
    return _list("actors", filters, limit, detail, address)


def list_nodes(address=None, filters=None, limit=DEFAULT_LIMIT, timeout=DEFAULT_RPC_TIMEOUT,
               detail=False, raise_on_missing_output=True, _explain=False):
    """Nodes (removed ones with ``state="DEAD"``), as :class:`NodeState` records."""
    return _list("nodes", filters, limit, detail, address)


def list_placement_groups(address=None, filters=None, limit=DEFAULT_LIMIT,
                          timeout=DEFAULT_RPC_TIMEOUT, detail=False, raise_on_missing_output=True,
                          _explain=False):
    """Placement groups, as :class:`PlacementGroupState` records."""
    return _list("placement_groups", filters, limit, detail, address)


def list_tasks(address=None, filters=None, limit=DEFAULT_LIMIT, timeout=DEFAULT_RPC_TIMEOUT,
               detail=False, raise_on_missing_output=True, _explain=False):
    """Tasks, actor calls and actor creations (a bounded history, finished ones included),
    as :class:`TaskState` records."""
    return _list("tasks", filters, limit, detail, address)


def list_workers(address=None, filters=None, limit=DEFAULT_LIMIT, timeout=DEFAULT_RPC_TIMEOUT,
                 detail=False, raise_on_missing_output=True, _explain=False):
    """Workers and drivers, as :class:`WorkerState` records (as Ray's): the drivers, each
    worker process that has been given work (an idle pre-started one is not listed), and the
    last ended ones (``is_alive`` False, with Ray's ``exit_type`` and ``exit_detail``)."""
    return _list("workers", filters, limit, detail, address)


def list_objects(address=None, filters=None, limit=DEFAULT_LIMIT, timeout=DEFAULT_RPC_TIMEOUT,
                 detail=False, raise_on_missing_output=True, _explain=False):
    """The objects the runtime holds, as :class:`ObjectState` records (mirrors Ray's
    ``list_objects``): ``object_id`` (hex), ``object_size`` (bytes of the stored value, -1
    while pending or where the backend does not know it), ``task_status`` (FINISHED once
    sealed, a failed task's result and a put included; the producing task's state as its owner
    sees it while pending: SUBMITTED_TO_WORKER once it runs), ``attempt_number`` 1, ``reference_type``
    (LOCAL_REFERENCE, PINNED_IN_MEMORY once a ref escaped into an untracked pickle), and the
    owner's ``type`` / ``pid`` / ``ip`` (the driver, which owns every object here; Ray lists
    one record per worker referencing an object). A freed object is not listed."""
    return _list("objects", filters, limit, detail, address)


def list_jobs(address=None, filters=None, limit=DEFAULT_LIMIT, timeout=DEFAULT_RPC_TIMEOUT,
              detail=False, raise_on_missing_output=True, _explain=False):
    """Jobs of this runtime, oldest first, as :class:`JobState` records (Ray's ``JobDetails``
    fields and types: ``type`` a ``JobType``, ``status`` a ``JobStatus``, ``driver_info`` a
    :class:`~ray.job_submission.DriverInfo`): each driver's
    (``type`` DRIVER: this one, and each driver attached to the runtime; SUCCEEDED once it
    ended) and, on a ``ray start`` head, each job submitted to it (SUBMISSION)."""
    return [_job_state(j) for j in _list("jobs", filters, limit, detail, address)]


def get_job(id, address=None, timeout=DEFAULT_RPC_TIMEOUT, _explain=False):  # noqa: A002
    """The :class:`JobState` of the job with submission id ``id``, or None (as in Ray, a
    driver's job, which has no submission id, is not found by its job id)."""
    found = _get("jobs", "submission_id", id, address)
    return _job_state(found) if found is not None else None


def _job_state(job):
    """``job`` with Ray's types: ``type`` a JobType, ``status`` a JobStatus, ``driver_info`` a
    DriverInfo (the runtime's records are plain JSON)."""
    from ray_adapter.ray.job_submission import DriverInfo, JobStatus, JobType  # when listed

    job.type = JobType(job.type)
    job.status = JobStatus(job.status)
    if isinstance(job.driver_info, dict):
        job.driver_info = DriverInfo(**job.driver_info)
    return job


def _get(kind, column, value, address=None):
    found = _list(kind, [(column, "=", value)], None, True, address)
    return found[0] if found else None


def get_actor(id, address=None, timeout=DEFAULT_RPC_TIMEOUT, _explain=False):  # noqa: A002
    """The :class:`ActorState` of actor ``id`` (hex), or None."""
    return _get("actors", "actor_id", id, address)


def get_node(id, address=None, timeout=DEFAULT_RPC_TIMEOUT, _explain=False):  # noqa: A002
    return _get("nodes", "node_id", id, address)


def get_placement_group(id, address=None, timeout=DEFAULT_RPC_TIMEOUT, _explain=False):  # noqa: A002
    return _get("placement_groups", "placement_group_id", id, address)


def get_worker(id, address=None, timeout=DEFAULT_RPC_TIMEOUT, _explain=False):  # noqa: A002
    return _get("workers", "worker_id", id, address)


def get_task(id, address=None, timeout=DEFAULT_RPC_TIMEOUT, _explain=False):  # noqa: A002
    """The attempts of task ``id`` (hex, or an ObjectRef it returned) as a list of
    :class:`TaskState`, or None."""
    if isinstance(id, str):
        task_id = id
    else:
        task_id = id.task_id().hex()
    found = _list("tasks", [("task_id", "=", task_id)], None, True, address)
    return found or None


def summarize_tasks(address=None, timeout=DEFAULT_RPC_TIMEOUT, raise_on_missing_output=True,
                    _explain=False):
    """``{"cluster": {"summary": {name: {"func_or_class_name", "type", "state_counts"}},
    "total_tasks", "total_actor_tasks", "total_actor_scheduled", "summary_by": "func_name"}}``."""
    return _task_summary(_records("tasks", "summarize_tasks", address))


def summarize_actors(address=None, timeout=DEFAULT_RPC_TIMEOUT, raise_on_missing_output=True,
                     _explain=False):
    """``{"cluster": {"summary": {class_name: {"class_name", "state_counts"}}, "total_actors",
    "summary_by": "class"}}``."""
    return _actor_summary(_records("actors", address=address))


def summarize_objects(address=None, timeout=DEFAULT_RPC_TIMEOUT, raise_on_missing_output=True,
                      _explain=False):
    """``{"cluster": {"summary": {call_site: {"total_objects", "total_size_mb",
    "total_num_workers", "total_num_nodes", "task_state_counts", "task_attempt_number_counts",
    "ref_type_counts"}}, "total_objects", "total_size_mb", "callsite_enabled",
    "summary_by": "callsite"}}`` of the objects :func:`list_objects` lists (sizes in MiB;
    call sites are not recorded, so every object is under ``"disabled"``, as in Ray without
    ``RAY_record_ref_creation_sites``)."""
    return _object_summary(_records("objects", "summarize_objects", address))


def _object_summary(objects):
    """Ray's object summary (see :func:`summarize_objects`) of the runtime's raw object records."""
    summary, holders, total, total_mb, callsites = {}, {}, 0, 0.0, True
    for obj in objects:
        key = obj.get("call_site") or "disabled"
        callsites = callsites and key != "disabled"
        entry = summary.setdefault(key, {"total_objects": 0, "total_size_mb": 0.0,
                                         "total_num_workers": 0, "total_num_nodes": 0,
                                         "task_state_counts": {}, "task_attempt_number_counts": {},
                                         "ref_type_counts": {}})
        for column, value in (("task_state_counts", obj["task_status"]),
                              ("task_attempt_number_counts", str(obj["attempt_number"])),
                              ("ref_type_counts", obj["reference_type"])):
            entry[column][value] = entry[column].get(value, 0) + 1
        size = obj.get("object_size", -1)
        megabytes = size / (1 << 20) if size is not None and size >= 0 else 0.0
        entry["total_objects"] += 1
        entry["total_size_mb"] += megabytes
        total, total_mb = total + 1, total_mb + megabytes
        workers, nodes = holders.setdefault(key, (set(), set()))
        workers.add(obj.get("pid"))
        nodes.add(obj.get("ip"))
    for key, (workers, nodes) in holders.items():
        summary[key]["total_num_workers"], summary[key]["total_num_nodes"] = len(workers), len(nodes)
    return {"cluster": {"summary": summary, "total_objects": total, "total_size_mb": total_mb,
                        "callsite_enabled": callsites, "summary_by": "callsite"}}


def _task_summary(tasks):
    """Ray's task summary (see :func:`summarize_tasks`) of the runtime's raw task records."""
    summary, totals = {}, {"NORMAL_TASK": 0, "ACTOR_TASK": 0, "ACTOR_CREATION_TASK": 0}
    for task in tasks:
        key = task.get("name") or task.get("func_or_class_name")
        entry = summary.setdefault(key, {"func_or_class_name": key, "type": task["type"],
                                         "state_counts": {}})
        entry["state_counts"][task["state"]] = entry["state_counts"].get(task["state"], 0) + 1
        totals[task["type"]] = totals.get(task["type"], 0) + 1
    return {"cluster": {"summary": summary, "total_tasks": totals["NORMAL_TASK"],
                        "total_actor_tasks": totals["ACTOR_TASK"],
                        "total_actor_scheduled": totals["ACTOR_CREATION_TASK"],
                        "summary_by": "func_name"}}


def _actor_summary(actors):
    """Ray's actor summary (see :func:`summarize_actors`) of the runtime's raw actor records."""
    summary = {}
    actors = list(actors)
    for actor in actors:
        entry = summary.setdefault(actor["class_name"], {"class_name": actor["class_name"],
                                                         "state_counts": {}})
        entry["state_counts"][actor["state"]] = entry["state_counts"].get(actor["state"], 0) + 1
    return {"cluster": {"summary": summary, "total_actors": len(actors), "summary_by": "class"}}


__all__ = ["get_actor", "get_job", "get_node", "get_placement_group", "get_task", "get_worker",
           "list_actors", "list_jobs", "list_nodes", "list_objects", "list_placement_groups",
           "list_tasks", "list_workers",
           "summarize_actors", "summarize_objects", "summarize_tasks"]
__getattr__ = gaps.module_getattr("ray.util.state")
