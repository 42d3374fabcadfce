"""A driver's job as Ray's job table lists it (``ray.util.state.list_jobs()``, the Jobs API's
``JobDetails`` of type DRIVER): what every backend reports for the drivers it runs.

Stateless functions; any thread.
"""
import time


def driver_job_record(job_id, pid, ip, entrypoint):
    """A driver's job, RUNNING until its driver ends: ``job_id`` hex, the driver's ``pid`` on
    node ``ip``, its command line ``entrypoint``. A dict of ``JobDetails`` fields; times in
    milliseconds since the epoch (``end_time`` 0 while it runs, as Ray's job table has it)."""
    return {"type": "DRIVER", "job_id": job_id, "submission_id": None,
            "driver_info": {"id": job_id, "node_ip_address": ip, "pid": str(pid)},
            "status": "RUNNING", "entrypoint": entrypoint, "message": None, "error_type": None,
            "start_time": int(time.time() * 1000), "end_time": 0, "metadata": {},
            "runtime_env": {}, "driver_agent_http_address": None, "driver_node_id": None,
            "driver_exit_code": None}


def command_line(pid):
    """Process ``pid``'s command line, by which Ray names a driver's job ("" if unreadable)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            words = f.read().split(b"\0")
    except OSError:  # gone already, or not readable
        return ""
    return " ".join(w.decode(errors="replace") for w in words if w)
