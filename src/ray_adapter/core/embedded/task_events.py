"""Task events of the embedded runtime: what ran where and when, for the State API
(``list_tasks``, ``summarize_tasks``) and ``ray.timeline()``.

Each task, actor call and actor creation gets one record: submitted (name, kind, resources,
placement group), running (node, worker, pid, start time), finished (end time, FINISHED or
FAILED). Times are the driver's wall clock when it sent the work and received the result. The
history is bounded (the oldest records go first), as Ray's GCS bounds its task events.

Recording is on the hot path of every call, so it stores a short list and nothing else; the
State API's dicts (hex ids, milliseconds) are built only when :meth:`TaskEvents.records` is
asked for them.

Thread-safety: ``TaskEvents._lock`` is a leaf lock held for a dict operation; any thread may call.
"""
import collections
import os
import threading
import time

#: How many task records are kept (Ray's ``RAY_task_events_max_num_task_in_gcs`` analogue).
MAX_TASKS = int(os.environ.get("RAY_ADAPTER_MAX_TASK_EVENTS", "10000"))

NORMAL_TASK = "NORMAL_TASK"
ACTOR_TASK = "ACTOR_TASK"
ACTOR_CREATION_TASK = "ACTOR_CREATION_TASK"

_DRIVER_TASK = "ff" * 20

# Record layout (a list, mutated in place); _OK: None while it runs, True, or the error type.
(_NAME, _KIND, _ACTOR, _RESOURCES, _GROUP, _FUNC, _CREATED, _START, _END, _OK, _WORKER, _ATTEMPTS,
 _JOB, _PARENT) = range(14)


class TaskEvents:
    def __init__(self, job_id, limit=MAX_TASKS):
        self._lock = threading.Lock()
        self._records = {}  # task id -> record list
        self._order = collections.deque()  # task ids, oldest first (eviction is O(1))
        self._limit = limit
        self._job_hex = job_id.hex()

    def submitted(self, task_id, name, kind, actor_id=None, resources=None, group_id=None,
                  func_name=None, job=None, parent=None):
        """A task was submitted: ``job`` is the submitter's job id (an attached driver's, or
        its workers'; None: the runtime's own), ``parent`` the id of the task that submitted it
        (None: a driver)."""
        if self._limit <= 0:
            return
        record = [name, kind, actor_id, resources, group_id, func_name, time.time(), None, None,
                  None, None, 0, job, parent]
        with self._lock:
            if task_id not in self._records:
                self._order.append(task_id)
            self._records[task_id] = record
            if len(self._order) > self._limit:
                self._records.pop(self._order.popleft(), None)

    def running(self, task_id, worker):
        record = self._records.get(task_id)
        if record is not None:
            if record[_START] is not None:  # a retry or a restart
                record[_ATTEMPTS] += 1
                record[_END] = record[_OK] = None
            record[_WORKER] = (worker.node.hex, worker.worker_id, worker.pid)  # not the handle
            record[_START] = time.time()

    def finished(self, task_id, ok, error_type=None):
        """The task ended: ``ok``, else failed with Ray's ``error_type`` (default: its code
        raised, ``TASK_EXECUTION_EXCEPTION``; ``ACTOR_DIED``, ``TASK_CANCELLED``...)."""
        record = self._records.get(task_id)
        if record is not None and record[_END] is None:
            record[_OK] = True if ok else (error_type or "TASK_EXECUTION_EXCEPTION")
            record[_END] = time.time()

    def records(self):
        """The records in the State API's shape (``TaskState`` fields), oldest first; ``_start``
        and ``_end`` are float seconds (for the timeline)."""
        with self._lock:
            items = [(task_id, list(self._records[task_id])) for task_id in self._order]
        return [self._describe(task_id, r) for task_id, r in items]

    def _describe(self, task_id, r):
        worker, start, end, ok = r[_WORKER], r[_START], r[_END], r[_OK]
        if end is not None:
            state = "FINISHED" if ok is True else "FAILED"
        elif start is not None:
            state = "RUNNING"
        else:
            state = "SUBMITTED_TO_WORKER" if r[_KIND] == ACTOR_TASK else "PENDING_NODE_ASSIGNMENT"
        job_hex = r[_JOB].hex() if r[_JOB] else self._job_hex
        return {"task_id": task_id.hex(), "attempt_number": r[_ATTEMPTS], "name": r[_NAME],
                "state": state, "job_id": job_hex,
                "actor_id": r[_ACTOR].hex() if r[_ACTOR] else None, "type": r[_KIND],
                "func_or_class_name": r[_FUNC] or r[_NAME],
                # a driver's submissions: its task id, as Ray writes it (ff... and its job)
                "parent_task_id": r[_PARENT].hex() if r[_PARENT] else _DRIVER_TASK + job_hex,
                "node_id": worker[0] if worker is not None else None,
                "worker_id": worker[1].hex() if worker is not None else None,
                "worker_pid": worker[2] if worker is not None else None,
                "error_type": ok if end is not None and ok is not True else None,
                "language": "PYTHON", "required_resources": {k: float(v) for k, v in (r[_RESOURCES] or {}).items()},
                "runtime_env_info": None,
                "placement_group_id": r[_GROUP].hex() if r[_GROUP] else None,
                "creation_time_ms": int(r[_CREATED] * 1000),
                "start_time_ms": int(start * 1000) if start is not None else None,
                "end_time_ms": int(end * 1000) if end is not None else None,
                "error_message": None, "_start": start, "_end": end}
