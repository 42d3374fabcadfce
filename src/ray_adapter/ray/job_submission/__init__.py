"""``ray.job_submission``: Ray's job submission client and its records (mirrors Ray 2.60's).

:class:`JobSubmissionClient` speaks Ray's Jobs REST API (``/api/version``, ``/api/jobs/...``,
``/api/packages/...``), so it drives a ``ray start --head`` runtime of the adapter (its Jobs
API on the dashboard port) or any server of that API (a Ray cluster's dashboard). Requests go
over HTTP with the standard library (``urllib``); ``tail_job_logs`` follows the log's websocket
with aiohttp. Failures raise as Ray's client does: ``RuntimeError("Request failed with status
code 404: Job x does not exist.")``; ``ConnectionError`` when no server answers.

A local ``working_dir`` / ``py_modules`` entry is zipped and uploaded first (named by a hash of
its content, ``gcs://_ray_pkg_<hash>.zip``, sent once), as Ray's client does.
"""
import dataclasses
import enum
import hashlib
import io
import json
import os
import urllib.error
import urllib.request
import zipfile
from typing import Any, Dict, Optional, Union

from ray_adapter import gaps as _gaps
from ray_adapter.core import runtimes as _runtimes
from ray_adapter.core.runtime_env import default_excludes, package_files

__all__ = ["JobSubmissionClient", "JobStatus", "JobErrorType", "JobInfo", "JobDetails",
           "DriverInfo", "JobType"]

DEFAULT_DASHBOARD_ADDRESS = "http://localhost:8265"


class JobStatus(str, enum.Enum):
    """Status of a job: PENDING, RUNNING, STOPPED, SUCCEEDED, FAILED (mirrors Ray's)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STOPPED = "STOPPED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"

    def __str__(self):
        return self.value

    def is_terminal(self):
        """True for STOPPED, SUCCEEDED and FAILED: the job will not change any more."""
        return self.value in ("STOPPED", "SUCCEEDED", "FAILED")


class JobErrorType(str, enum.Enum):
    """Why a job failed (mirrors Ray's names; the adapter reports the entrypoint ones)."""

    RUNTIME_ENV_SETUP_FAILURE = "RUNTIME_ENV_SETUP_FAILURE"
    JOB_SUPERVISOR_ACTOR_START_TIMEOUT = "JOB_SUPERVISOR_ACTOR_START_TIMEOUT"
    JOB_SUPERVISOR_ACTOR_START_FAILURE = "JOB_SUPERVISOR_ACTOR_START_FAILURE"
    JOB_SUPERVISOR_ACTOR_UNSCHEDULABLE = "JOB_SUPERVISOR_ACTOR_UNSCHEDULABLE"
    JOB_SUPERVISOR_ACTOR_UNKNOWN_FAILURE = "JOB_SUPERVISOR_ACTOR_UNKNOWN_FAILURE"
    JOB_SUPERVISOR_ACTOR_DIED = "JOB_SUPERVISOR_ACTOR_DIED"
    JOB_ENTRYPOINT_COMMAND_START_ERROR = "JOB_ENTRYPOINT_COMMAND_START_ERROR"
    JOB_ENTRYPOINT_COMMAND_ERROR = "JOB_ENTRYPOINT_COMMAND_ERROR"


class JobType(str, enum.Enum):
    """SUBMISSION (through the Jobs API) or DRIVER (a driver run directly)."""

    SUBMISSION = "SUBMISSION"
    DRIVER = "DRIVER"


@dataclasses.dataclass
class DriverInfo:
    """The driver process of a job: its id, node IP and pid (a string, as Ray's)."""

    id: str
    node_ip_address: str
    pid: str


@dataclasses.dataclass
class JobInfo:
    """A job's record (mirrors Ray's ``JobInfo``): times in milliseconds since the epoch."""

    status: JobStatus
    entrypoint: str
    message: Optional[str] = None
    error_type: Optional[str] = None
    start_time: Optional[int] = None
    end_time: Optional[int] = None
    metadata: Optional[Dict[str, str]] = None
    runtime_env: Optional[Dict[str, Any]] = None
    entrypoint_num_cpus: Optional[Union[int, float]] = None
    entrypoint_num_gpus: Optional[Union[int, float]] = None
    entrypoint_memory: Optional[int] = None
    entrypoint_resources: Optional[Dict[str, float]] = None
    driver_agent_http_address: Optional[str] = None
    driver_node_id: Optional[str] = None
    driver_exit_code: Optional[int] = None


@dataclasses.dataclass
class JobDetails:
    """What ``get_job_info`` / ``list_jobs`` return (mirrors Ray's ``JobDetails`` fields)."""

    type: JobType
    entrypoint: str
    status: JobStatus
    job_id: Optional[str] = None
    submission_id: Optional[str] = None
    driver_info: Optional[DriverInfo] = None
    message: Optional[str] = None
    error_type: Optional[str] = None
    start_time: Optional[int] = None
    end_time: Optional[int] = None
    metadata: Optional[Dict[str, str]] = None
    runtime_env: Optional[Dict[str, Any]] = None
    driver_agent_http_address: Optional[str] = None
    driver_node_id: Optional[str] = None
    driver_exit_code: Optional[int] = None

    @classmethod
    def _from_json(cls, data):
        known = {f.name for f in dataclasses.fields(cls)}
        fields = {k: v for k, v in data.items() if k in known}
        fields["type"] = JobType(fields.get("type") or "SUBMISSION")
        fields["status"] = JobStatus(fields["status"])
        if fields.get("driver_info"):
            fields["driver_info"] = DriverInfo(**fields["driver_info"])
        return cls(**fields)


def _api_address(address):
    """The Jobs API's URL for ``address`` (as Ray's client resolves one): None means
    ``RAY_API_SERVER_ADDRESS`` / ``RAY_ADDRESS``, else the Jobs API of the runtime ``ray start
    --head`` runs here, else ``http://localhost:8265``; ``"auto"`` or a runtime's own address
    (``127.0.0.1:6379``) means that runtime's Jobs API."""
    if address is None:
        address = os.environ.get("RAY_API_SERVER_ADDRESS") or os.environ.get("RAY_ADDRESS") or None
    if address is None:  # the runtime `ray start --head` runs here, as Ray's CLI finds it
        record = _runtimes.find_runtime(None)
        return record["dashboard"] if record and record.get("dashboard") else DEFAULT_DASHBOARD_ADDRESS
    if "://" in address:
        return address.rstrip("/")
    record = _runtimes.find_runtime(address)
    if record is not None:
        if not record.get("dashboard"):
            raise ConnectionError(f"The Ray runtime at {record['address']} serves no Jobs API "
                                  "(started with --include-dashboard false).")
        return record["dashboard"]
    return f"http://{address}"


class JobSubmissionClient:
    """Submits and manages jobs through a Jobs API server (mirrors Ray's
    ``JobSubmissionClient``). ``address``: the server's URL (``http://host:8265``), or see
    :func:`_api_address`; ``headers`` / ``cookies`` go with every request, ``metadata`` with
    every submission. Raises ConnectionError when no server answers there."""

    def __init__(self, address=None, create_cluster_if_needed=False, cookies=None, metadata=None,
                 headers=None, verify=True, **kwargs):
        if address is not None and not isinstance(address, str):
            raise TypeError(f"address must be a string, got {type(address)}")
        if not isinstance(create_cluster_if_needed, bool):
            raise TypeError(f"create_cluster_if_needed must be a bool, got {type(create_cluster_if_needed)}")
        for name, value in (("cookies", cookies), ("metadata", metadata), ("headers", headers)):
            if value is not None and not isinstance(value, dict):
                raise TypeError(f"{name} must be a dict, got {type(value)}")
        if not isinstance(verify, (str, bool)):
            raise TypeError(f"verify must be a str or bool, got {type(verify)}")
        self._address = _api_address(address)
        self._headers = dict(headers or {})
        if cookies:
            self._headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in cookies.items())
        token = os.environ.get("RAY_AUTH_TOKEN")
        if os.environ.get("RAY_AUTH_MODE", "").lower() == "token" and token and not any(
                k.lower() == "authorization" for k in self._headers):
            self._headers["Authorization"] = f"Bearer {token.strip()}"
        self._default_metadata = dict(metadata or {})
        self._verify = verify
        try:
            version = self._request("GET", "/api/version")
        except (urllib.error.URLError, OSError) as exc:
            raise ConnectionError(
                f"Failed to connect to Ray at address: {self._address}. ({exc})") from None
        self._server_ray_version = version.get("ray_version")

    # -- HTTP --------------------------------------------------------------------------------
    def _request(self, method, endpoint, json_data=None, data=None, expect_json=True):
        """Send a request; its JSON answer. Raises RuntimeError for a status other than 200."""
        body, headers = data, dict(self._headers)
        if json_data is not None:
            body = json.dumps(json_data).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self._address + endpoint, data=body, method=method,
                                         headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=60, context=self._ssl()) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as err:
            raise RuntimeError(f"Request failed with status code {err.code}: "
                               f"{err.read().decode(errors='replace')}.") from None
        return json.loads(text) if expect_json and text else text

    def _ssl(self):
        if not self._address.startswith("https"):
            return None
        import ssl

        if self._verify is False:
            return ssl._create_unverified_context()
        return ssl.create_default_context(cafile=self._verify if isinstance(self._verify, str) else None)

    # -- packages ----------------------------------------------------------------------------
    def _upload(self, path, kind, excludes):
        """Zip a local directory (or .py file) and upload it once; its ``gcs://`` URI. The
        files kept are the ones the runtime's own packaging keeps (``excludes``, Ray's default
        excludes, ``.gitignore`` / ``.rayignore``); a ``py_modules`` directory keeps its name as
        the top folder, so it imports by that name, as Ray packages one."""
        if os.path.isdir(path):
            files = package_files(path, default_excludes() + list(excludes or ()))
            prefix = os.path.basename(os.path.normpath(path)) if kind == "py_modules" else ""
        else:
            files, prefix = [(os.path.basename(path), path)], ""
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            for rel, full in sorted(files):
                archive.write(full, os.path.join(prefix, rel))
        data = buffer.getvalue()
        uri = f"gcs://_ray_pkg_{hashlib.sha1(data).hexdigest()[:16]}.zip"
        endpoint = f"/api/packages/gcs/{uri[len('gcs://'):]}"
        try:
            self._request("GET", endpoint, expect_json=False)
        except RuntimeError:
            self._request("PUT", endpoint, data=data, expect_json=False)
        return uri

    def _packaged(self, runtime_env):
        env = dict(runtime_env or {})
        excludes = env.pop("excludes", None)  # applied here, as Ray drops it after packaging
        if env.get("working_dir") and "://" not in env["working_dir"]:
            env["working_dir"] = self._upload(env["working_dir"], "working_dir", excludes)
        if env.get("py_modules"):
            env["py_modules"] = [m if "://" in m else self._upload(m, "py_modules", excludes)
                                 for m in env["py_modules"]]
        return env

    # -- the API -----------------------------------------------------------------------------
    def submit_job(self, *, entrypoint, job_id=None, runtime_env=None, metadata=None,
                   submission_id=None, entrypoint_num_cpus=None, entrypoint_num_gpus=None,
                   entrypoint_memory=None, entrypoint_resources=None,
                   entrypoint_label_selector=None):
        """Submit ``entrypoint`` (a shell command) as a job; returns its submission id (a
        string). Raises RuntimeError when the server refuses it (a submission id in use...)."""
        if job_id is not None and submission_id is not None:
            raise ValueError("job_id and submission_id cannot both be specified")
        request = {"entrypoint": entrypoint, "submission_id": submission_id or job_id,
                   "runtime_env": self._packaged(runtime_env),
                   "metadata": dict(metadata or {}, **self._default_metadata),
                   "entrypoint_num_cpus": entrypoint_num_cpus,
                   "entrypoint_num_gpus": entrypoint_num_gpus,
                   "entrypoint_memory": entrypoint_memory,
                   "entrypoint_resources": entrypoint_resources,
                   "entrypoint_label_selector": entrypoint_label_selector}
        request = {k: v for k, v in request.items() if v is not None}
        return self._request("POST", "/api/jobs/", json_data=request)["submission_id"]

    def stop_job(self, job_id):
        """Ask the job to stop (SIGTERM, then SIGKILL); True if it was running."""
        return self._request("POST", f"/api/jobs/{job_id}/stop")["stopped"]

    def delete_job(self, job_id):
        """Delete an ended job's record and log; True. Raises RuntimeError for a running one."""
        return self._request("DELETE", f"/api/jobs/{job_id}")["deleted"]

    def get_job_info(self, job_id):
        """The job's :class:`JobDetails`."""
        return JobDetails._from_json(self._request("GET", f"/api/jobs/{job_id}"))

    def list_jobs(self):
        """Every job's :class:`JobDetails`, oldest first."""
        return [JobDetails._from_json(j) for j in self._request("GET", "/api/jobs/")]

    def get_job_status(self, job_id):
        """The job's :class:`JobStatus`."""
        return self.get_job_info(job_id).status

    def get_job_logs(self, job_id):
        """The job's output so far (stdout and stderr of its entrypoint), one string."""
        return self._request("GET", f"/api/jobs/{job_id}/logs")["logs"]

    async def tail_job_logs(self, job_id):
        """An async iterator of the job's output chunks (strings) as they are written, until
        the job ends. Raises RuntimeError for an unknown job or a broken connection."""
        import aiohttp

        url = self._address.replace("http", "ws", 1) + f"/api/jobs/{job_id}/logs/tail"
        async with aiohttp.ClientSession(headers=self._headers) as session:
            try:
                ws = await session.ws_connect(url)
            except aiohttp.WSServerHandshakeError as exc:
                raise RuntimeError(f"Request failed with status code {exc.status}: {exc.message}.") from None
            while True:
                message = await ws.receive()
                if message.type == aiohttp.WSMsgType.TEXT:
                    yield message.data
                elif message.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSE):
                    if ws.close_code == aiohttp.WSCloseCode.ABNORMAL_CLOSURE:
                        raise RuntimeError(f"WebSocket connection closed unexpectedly with close "
                                           f"code {ws.close_code}")
                    break
                elif message.type == aiohttp.WSMsgType.ERROR:
                    raise RuntimeError(f"WebSocket error for job {job_id}: {ws.exception()}")

    def get_version(self):
        """The Jobs API's version (a string)."""
        return self._request("GET", "/api/version").get("version")


# A name Ray does not have here: the ImportError / AttributeError naming Ray's module.
__getattr__ = _gaps.module_getattr("ray.job_submission")
