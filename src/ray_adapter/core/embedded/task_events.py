"""Task events of the embedded runtime: what ran where and when, for the State API
(``list_tasks``, ``summarize_tasks``) and ``ray.timeline()``.

Each task, actor call and actor creation gets one record: submitted (name, kind, resources,
placement group), running (node, worker, pid, start time), finished (end time, FINISHED or
FAILED). Times are the driver's wall clock when it sent the work and received the result, in
milliseconds. The history is bounded (the oldest records go first), as Ray's GCS bounds its
task events; recording is a dict update under a leaf lock.

Thread-safety: ``TaskEvents._lock`` is a leaf lock; any thread may call.
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


class TaskEvents:
    def __init__(self, job_id, limit=MAX_TASKS):
        self._lock = threading.Lock()
        self._records = collections.OrderedDict()
        self._limit = limit
        self._job_hex = job_id.hex()

    def submitted(self, task_id, name, kind, actor_id=None, resources=None, group_id=None,
                  func_name=None):
        if self._limit <= 0:
            return
        record = {"task_id": task_id.hex(), "attempt_number": 0, "name": name,
                  "state": "PENDING_NODE_ASSIGNMENT" if kind != ACTOR_TASK else "SUBMITTED_TO_WORKER",
                  "job_id": self._job_hex, "actor_id": actor_id.hex() if actor_id else None,
                  "type": kind, "func_or_class_name": func_name or name,
                  "parent_task_id": "ffffffffffffffffffffffffffffffffffffffff" + self._job_hex,
                  "node_id": None, "worker_id": None, "worker_pid": None, "error_type": None,
                  "language": "PYTHON", "required_resources": dict(resources or {}),
                  "runtime_env_info": None,
                  "placement_group_id": group_id.hex() if group_id else None,
                  "creation_time_ms": int(time.time() * 1000), "start_time_ms": None,
                  "end_time_ms": None, "error_message": None}
        with self._lock:
            self._records[task_id] = record
            if len(self._records) > self._limit:
                self._records.popitem(last=False)

    def running(self, task_id, worker):
        with self._lock:
            record = self._records.get(task_id)
            if record is None:
                return
            if record["start_time_ms"] is not None:  # a retry or restart
                record["attempt_number"] += 1
            now = time.time()
            record.update(state="RUNNING", start_time_ms=int(now * 1000), _start=now,
                          node_id=worker.node.hex, worker_id=worker.worker_id.hex(),
                          worker_pid=worker.pid, end_time_ms=None)

    def finished(self, task_id, ok, error_type=None):
        with self._lock:
            record = self._records.get(task_id)
            if record is None or record["end_time_ms"] is not None:
                return
            now = record["_end"] = time.time()
            record["end_time_ms"] = int(now * 1000)
            record["state"] = "FINISHED" if ok else "FAILED"
            if not ok:
                record["error_type"] = error_type or "TASK_EXECUTION_EXCEPTION"

    def records(self):
        """Copies of every record, oldest first."""
        with self._lock:
            return [dict(r) for r in self._records.values()]

