"""Submitted jobs of a headless runtime (Ray's job submission, what its Jobs API serves).

A job is an entrypoint command run by a shell in a session (process group) of its own, with the
job's ``runtime_env`` (``env_vars`` in its environment, ``working_dir`` its cwd, ``py_modules``
on its ``PYTHONPATH``; the env is also handed to the driver it starts, through
``RAY_ADAPTER_JOB_RUNTIME_ENV``, so its tasks and actors get it, as Ray's job config does) and
``RAY_ADDRESS`` naming this runtime, so the ``ray.init()`` in it attaches here. What
``entrypoint_num_cpus`` / ``_num_gpus`` / ``_memory`` / ``_resources`` ask is reserved for the
job's life (a placement group of one bundle): the job stays PENDING until it fits.

Its output (stdout and stderr together) is read from a pipe by one thread per running job,
appended to the job's log file and handed to whoever follows it (``follow``), so a tail wakes
on new output rather than polling the file. Status: PENDING -> RUNNING -> SUCCEEDED / FAILED /
STOPPED, with ``message``, ``driver_exit_code``, ``start_time`` / ``end_time`` (ms), as Ray's.
``stop`` sends SIGTERM to the whole process group and SIGKILL after
``RAY_JOB_STOP_WAIT_TIME_S`` seconds (default 3, as Ray); when the entrypoint ends, whatever it
left in its group is killed, so nothing of a job outlives it.

Records are rows of an SQLite database that outlives the head (``ray stop`` then ``ray start
--head`` on the same port finds them): a job still PENDING or RUNNING when its head went is
FAILED on the next start, saying so.

Thread-safety: ``_lock`` (a leaf lock) guards the live jobs, their followers and the attached
drivers' records; ``_db_lock`` (a leaf lock) guards the database connection and nothing else
(its I/O is the only work done under it). A job's runner is started by its own thread outside
both, its output thread owns the pipe, and followers are woken outside the locks.
"""
import json
import os
import math
import re
import secrets
import select
import shutil
import signal
import sqlite3
import string
import subprocess
import sys
import threading
import time
import zipfile

import psutil

from ray_adapter.core.embedded.local_runtimes import JOB_RUNTIME_ENV_VAR, JOB_SUBMISSION_ID_VAR
from ray_adapter.core.job_records import command_line, driver_job_record
from ray_adapter.core.process_tree import signal_descendants
from ray_adapter.core.threads import start_daemon

TERMINAL = ("STOPPED", "SUCCEEDED", "FAILED")
#: How much of the log a failed job's message quotes (characters), as Ray's does.
LOG_TAIL_CHARS = 20000
#: Seconds the job's output is still read after its runner ended (then it stops regardless).
OUTPUT_GRACE_S = 5.0
_SUBMISSION_ID = re.compile(r"^[^/\x00-\x1f]{1,256}$")


def _open(directory):
    db = sqlite3.connect(os.path.join(directory, "jobs.sqlite"), check_same_thread=False,
                         isolation_level=None)
    db.execute("CREATE TABLE IF NOT EXISTS jobs (submission_id TEXT PRIMARY KEY, "
               "record TEXT NOT NULL, created REAL NOT NULL)")
    return db


def _started(pid):
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _signal_group(pgid, signum):
    """Send ``signum`` to process group ``pgid`` (gone already: nothing to do)."""
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def end_orphans(directory):
    """The jobs a head that is gone (SIGKILLed) left PENDING or RUNNING in ``directory``: their
    process groups are killed (each checked to be the one the job started: same leader, same
    start time) and they are FAILED, saying why. Run by the next head on that port and by
    ``ray stop``."""
    if not os.path.exists(os.path.join(directory, "jobs.sqlite")):
        return
    db = _open(directory)
    try:
        for submission_id, text in db.execute("SELECT submission_id, record FROM jobs").fetchall():
            record = json.loads(text)
            if record["status"] in TERMINAL:
                continue
            group = record.pop("_group", None)
            if group and group[1] is not None and _started(group[0]) == group[1]:
                _signal_group(group[0], signal.SIGKILL)
            record.update(status="FAILED", end_time=_now_ms(),
                          message="Job failed because the Ray runtime's head process that ran it "
                                  "ended (it was stopped or killed) before the job did.")
            db.execute("UPDATE jobs SET record = ? WHERE submission_id = ?",
                       (json.dumps(record), submission_id))
    finally:
        db.close()


class JobError(Exception):
    """A request the job manager refuses: ``status`` the HTTP status it answers with (400 a bad
    request, 404 an unknown job), the message what it says."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def _amount(name, value):
    """A resource amount of a request: a finite, non-negative number (JobError 400 if not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0:
        raise JobError(400, f"{name} must be a finite, non-negative number, got {value!r}")
    return value


_ENV_FIELDS = {"env_vars", "working_dir", "py_modules", "excludes", "config",
               "worker_process_setup_hook"}


def _checked_env(env):
    """A submitted job's runtime_env, checked (JobError 400 naming what is wrong)."""
    if not isinstance(env, dict):
        raise JobError(400, f"runtime_env must be a dict, got {type(env).__name__}")
    unsupported = sorted(set(env) - _ENV_FIELDS)
    if unsupported:
        raise JobError(400, f"runtime_env fields {unsupported} are not provided for submitted "
                            "jobs by ray-adapter (env_vars, working_dir, py_modules are)")
    env_vars = env.get("env_vars") or {}
    if not isinstance(env_vars, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and "\x00" not in k + v for k, v in env_vars.items()):
        raise JobError(400, f"runtime_env env_vars must be a dict of strings, got {env_vars!r}")
    if "working_dir" in env and not isinstance(env["working_dir"], str):
        raise JobError(400, f"runtime_env working_dir must be a string, got {env['working_dir']!r}")
    modules = env.get("py_modules") or []
    if not isinstance(modules, list) or not all(isinstance(m, str) for m in modules):
        raise JobError(400, f"runtime_env py_modules must be a list of strings, got {modules!r}")
    return env


def _public(record):
    """A record as the API serves it (without the fields kept for the runtime's own use)."""
    return {k: v for k, v in record.items() if not k.startswith("_")}


def _now_ms():
    return int(time.time() * 1000)


class _Live:
    """A job whose entrypoint runs (or waits for its reservation)."""

    __slots__ = ("proc", "stopping", "group", "followers", "thread")

    def __init__(self):
        self.proc = None
        self.stopping = False  # "user" (stop_job) or "runtime" (the head stops)
        self.group = None      # the placement group reserving its entrypoint resources
        self.followers = []    # wake() callbacks: the log grew, or the job ended
        self.thread = None     # the job's own thread (:meth:`JobManager._run`)


class JobManager:
    """Jobs of one head (see the module's notes)."""

    def __init__(self, *, directory, address, envs, backend):
        """``directory``: where the database and the logs are kept (it outlives the head);
        ``address``: this runtime's (the jobs' ``RAY_ADDRESS``); ``envs``: the runtime's
        :class:`~.runtime_envs.RuntimeEnvs` (uploaded packages are registered there);
        ``backend``: the runtime (entrypoint resources are reserved through it)."""
        os.makedirs(os.path.join(directory, "logs"), mode=0o700, exist_ok=True)
        self._dir, self._address, self._envs, self._backend = directory, address, envs, backend
        self._ip = backend.head_ip  # where its drivers run
        self._packages = os.path.join(envs.package_root(), "job_packages")
        self._lock = threading.Lock()     # leaf: the live jobs, their followers, the drivers
        self._db_lock = threading.Lock()  # leaf: the database connection (its I/O under it only)
        end_orphans(directory)  # what a head killed before left
        self._db = _open(directory)
        self._live = {}
        self._drivers = {}  # job id (hex) -> the key of its DRIVER record, while it is attached
        self._closed = False

    # -- records -----------------------------------------------------------------------------
    def _update(self, submission_id, **fields):
        with self._db_lock:
            row = self._db.execute("SELECT record FROM jobs WHERE submission_id = ?",
                                   (submission_id,)).fetchone()
            if row is None:
                return None
            record = dict(json.loads(row[0]), **fields)
            self._db.execute("UPDATE jobs SET record = ? WHERE submission_id = ?",
                             (json.dumps(record), submission_id))
            return record

    def get(self, submission_id):
        """The job's record (a dict of Ray's JobDetails fields); raises JobError 404."""
        with self._db_lock:
            row = self._db.execute("SELECT record FROM jobs WHERE submission_id = ?",
                                   (submission_id,)).fetchone()
            if row is None:  # a driver's job, by its job id (as Ray's get_job_info takes one)
                row = self._db.execute("SELECT record FROM jobs WHERE submission_id LIKE ? "
                                       "ORDER BY created DESC", (f"_driver:{submission_id}:%",)).fetchone()
        if row is None:
            raise JobError(404, f"Job {submission_id} does not exist")
        return _public(json.loads(row[0]))

    def last_job_index(self):
        """The highest job id any recorded job had (0: none), as an integer: a restarted head
        goes on after it, so job ids are never given twice (Ray's GCS keeps its counter)."""
        with self._db_lock:
            rows = self._db.execute("SELECT record FROM jobs").fetchall()
        found = 0
        for (record,) in rows:
            job_id = json.loads(record).get("job_id")
            if job_id:
                try:
                    found = max(found, int.from_bytes(bytes.fromhex(job_id), "little"))
                except ValueError:
                    continue
        return found

    def list(self):
        """Every job's record, oldest first."""
        with self._db_lock:
            rows = self._db.execute("SELECT record FROM jobs ORDER BY created").fetchall()
        return [_public(json.loads(r[0])) for r in rows]

    def log_path(self, submission_id):
        return os.path.join(self._dir, "logs", f"job-driver-{submission_id}.log")

    # -- submission --------------------------------------------------------------------------
    def submit(self, request):
        """Start a job from ``request`` (Ray's JobSubmitRequest fields); returns its
        submission id. Raises JobError 400 for a bad request or a submission id in use."""
        entrypoint = request.get("entrypoint")
        if not isinstance(entrypoint, str) or not entrypoint.strip() or "\x00" in entrypoint:
            raise JobError(400, "entrypoint must be a non-empty string (without NUL bytes)")
        submission_id = request.get("submission_id") or request.get("job_id") or (
            "raysubmit_" + "".join(secrets.choice(string.ascii_letters + string.digits)
                                   for _ in range(16)))
        if not isinstance(submission_id, str) or not _SUBMISSION_ID.match(submission_id):
            raise JobError(400, f"submission_id must be a string without '/' or control "
                                f"characters, got {submission_id!r}")
        runtime_env = _checked_env(request.get("runtime_env") or {})
        metadata = request.get("metadata") or {}
        if not isinstance(metadata, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise JobError(400, f"metadata must be a dict of strings, got {metadata!r}")
        resources = request.get("entrypoint_resources") or {}
        if not isinstance(resources, dict):
            raise JobError(400, f"entrypoint_resources must be a dict, got {resources!r}")
        resources = {k: _amount(f"entrypoint_resources[{k!r}]", v) for k, v in resources.items()}
        for key, name in (("entrypoint_num_cpus", "CPU"), ("entrypoint_num_gpus", "GPU"),
                          ("entrypoint_memory", "memory")):
            value = request.get(key)
            if value is not None and _amount(key, value):
                resources[name] = value
        resources = {k: v for k, v in resources.items() if v}
        record = {"type": "SUBMISSION", "job_id": None, "submission_id": submission_id,
                  "driver_info": None, "status": "PENDING", "entrypoint": entrypoint,
                  "message": "Job has not started yet. It may be waiting for the runtime "
                             "environment to be set up.",
                  "error_type": None, "start_time": _now_ms(), "end_time": None,
                  "metadata": dict(metadata), "runtime_env": runtime_env,
                  "entrypoint_num_cpus": request.get("entrypoint_num_cpus"),
                  "entrypoint_num_gpus": request.get("entrypoint_num_gpus"),
                  "entrypoint_memory": request.get("entrypoint_memory"),
                  "entrypoint_resources": request.get("entrypoint_resources"),
                  "driver_agent_http_address": None, "driver_node_id": None,
                  "driver_exit_code": None}
        live = _Live()
        with self._lock:  # live first: a stop that finds the record finds the job too
            if self._closed:
                raise JobError(503, "the Ray runtime is shutting down")
            taken = submission_id in self._live
            if not taken:
                self._live[submission_id] = live
        with self._db_lock:
            taken = taken or self._db.execute("SELECT 1 FROM jobs WHERE submission_id = ?",
                                              (submission_id,)).fetchone() is not None
            if not taken:
                self._db.execute("INSERT INTO jobs VALUES (?, ?, ?)",
                                 (submission_id, json.dumps(record), time.time()))
        if taken:
            with self._lock:
                if self._live.get(submission_id) is live:
                    del self._live[submission_id]
            raise JobError(400, f"Job with submission_id {submission_id} already exists. "
                                "Please use a different submission_id.")
        live.thread = start_daemon(self._run, f"ray-adapter-job-{submission_id}",
                                   (submission_id, record, resources, live))
        return submission_id

    def _run(self, submission_id, record, resources, live):
        """The job's thread: reserve, start, wait for its runner, record its end (its output
        is read by a second thread, :meth:`_pump`)."""
        try:
            if resources:
                group = self._backend.create_placement_group([resources], "PACK", "", "detached")
                with self._lock:
                    live.group = group
                try:
                    self._backend.wait_placement_group(group, None)
                except Exception:  # noqa: BLE001 - removed: the job was stopped meanwhile
                    pass
            if live.stopping:
                self._finish(submission_id, live, "STOPPED", "Job was intentionally stopped.", None)
                return
            try:
                env, cwd = self._environment(record["runtime_env"])
            except JobError as exc:
                self._finish(submission_id, live, "FAILED", f"Job's runtime_env could not be set "
                             f"up: {exc}", None, error_type="RUNTIME_ENV_SETUP_FAILURE")
                return
            env[JOB_SUBMISSION_ID_VAR] = submission_id
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "ray_adapter.core.embedded.job_runner", record["entrypoint"]],
                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                    env=env, cwd=cwd, start_new_session=True, close_fds=True)
            except (OSError, ValueError) as exc:
                self._finish(submission_id, live, "FAILED", f"Job failed to start: {exc}", None,
                             error_type="JOB_ENTRYPOINT_COMMAND_START_ERROR")
                return
            with self._lock:
                live.proc = proc
                stopped_meanwhile = bool(live.stopping)
            if stopped_meanwhile:  # stop() found no process to signal: it is signalled now
                self._stop_process(proc, self._stop_wait())
            # The process group is noted so that what a killed head leaves can be ended.
            self._update(submission_id, status="RUNNING", message="Job is currently running.",
                         _group=[proc.pid, _started(proc.pid)])
            code = self._watch(submission_id, live)
            if live.stopping == "runtime":
                self._finish(submission_id, live, "FAILED", "Job failed because the Ray runtime "
                             "that ran it was stopped (ray stop) before the job ended.", code)
            elif live.stopping:
                self._finish(submission_id, live, "STOPPED", "Job was intentionally stopped.", code)
            elif code == 0:
                self._finish(submission_id, live, "SUCCEEDED", "Job finished successfully.", code)
            else:
                self._finish(submission_id, live, "FAILED", (
                    f"Job entrypoint command failed with exit code {code}, last available logs "
                    f"(truncated to {LOG_TAIL_CHARS} chars):\n{self._tail(submission_id)}"), code,
                    error_type="JOB_ENTRYPOINT_COMMAND_ERROR")
        except Exception as exc:  # noqa: BLE001 - the job fails, saying why
            self._finish(submission_id, live, "FAILED", f"Job failed: {exc!r}", None)

    def _watch(self, submission_id, live):
        """Read the job's output (a thread of its own) until its runner has ended; returns the
        runner's exit status. The runner kills what the entrypoint left before it exits; should
        something still hold the output pipe after that (the runner was SIGKILLed), it is
        killed, and after :data:`OUTPUT_GRACE_S` the reading stops regardless."""
        proc = live.proc
        stop_read, stop_write = os.pipe()
        try:
            with open(self.log_path(submission_id), "ab") as log:
                pump = start_daemon(self._pump, f"ray-adapter-job-output-{submission_id}",
                                    (live, log, stop_read))
                code = proc.wait()
                self._kill_tree(proc.pid)
                pump.join(OUTPUT_GRACE_S)
                if pump.is_alive():
                    os.write(stop_write, b"x")
                    pump.join()
        finally:
            proc.stdout.close()
            os.close(stop_read)
            os.close(stop_write)
        return code

    def _pump(self, live, log, stop_fd):
        """Copy the job's output to its log until it closes (or ``stop_fd`` is written), waking
        the followers after each chunk is in the file (they read it from there, so a follower
        that reads slowly holds no memory here)."""
        fd = live.proc.stdout.fileno()
        while True:
            ready, _, _ = select.select([fd, stop_fd], [], [])
            if fd not in ready:
                return
            chunk = os.read(fd, 65536)
            if not chunk:
                return
            log.write(chunk)
            log.flush()
            with self._lock:
                followers = list(live.followers)
            for wake in followers:
                wake()

    def _finish(self, submission_id, live, status, message, code, error_type=None):
        self._update(submission_id, status=status, message=message, end_time=_now_ms(),
                     driver_exit_code=code, error_type=error_type)
        if live.group is not None:
            try:
                self._backend.remove_placement_group(live.group)
            except Exception:  # noqa: BLE001 - the runtime is shutting down
                pass
        with self._lock:
            self._live.pop(submission_id, None)
            followers, live.followers = live.followers, []
        for wake in followers:
            wake()

    def _tail(self, submission_id):
        try:
            with open(self.log_path(submission_id), "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - LOG_TAIL_CHARS))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def _environment(self, runtime_env):
        """The entrypoint's environment and cwd for ``runtime_env`` (packages by URI)."""
        env = dict(os.environ)
        env["RAY_BACKEND"] = "yuanrong"
        env["RAY_ADDRESS"] = self._address
        env.update(runtime_env.get("env_vars") or {})
        cwd, paths = None, []
        if runtime_env.get("working_dir"):
            cwd = self._package(runtime_env["working_dir"])
            paths.append(cwd)
        for module in runtime_env.get("py_modules") or ():
            paths.append(self._package(module))
        if env.get("PYTHONPATH"):
            paths.append(env["PYTHONPATH"])
        if paths:
            env["PYTHONPATH"] = os.pathsep.join(paths)
        env[JOB_RUNTIME_ENV_VAR] = json.dumps(runtime_env)
        return env, cwd or os.getcwd()

    def driver_attached(self, submission_id, job_id, pid):
        """A driver attached (:mod:`.drivers`). One a submitted job's entrypoint started
        (``submission_id``): that job's record names its job id and process, as Ray's does
        (the first one, when it starts several). Any other: a DRIVER job of its own is
        recorded, RUNNING until it ends (:meth:`driver_ended`), as Ray lists drivers."""
        driver_info = {"id": job_id, "node_ip_address": self._ip, "pid": str(pid)}
        if submission_id:
            with self._db_lock:
                row = self._db.execute("SELECT record FROM jobs WHERE submission_id = ?",
                                       (submission_id,)).fetchone()
            if row is not None and json.loads(row[0]).get("job_id") is None:
                self._update(submission_id, job_id=job_id, driver_info=driver_info)
            return
        record = driver_job_record(job_id, pid, self._ip, command_line(pid))
        key = f"_driver:{job_id}:{record['start_time']}"
        with self._db_lock:
            self._db.execute("INSERT OR REPLACE INTO jobs VALUES (?, ?, ?)",
                             (key, json.dumps(record), time.time()))
        with self._lock:
            self._drivers[job_id] = key

    def driver_ended(self, job_id):
        """A driver recorded by :meth:`driver_attached` detached or died: its job SUCCEEDED
        (as Ray reports a driver's job once its driver is gone)."""
        with self._lock:
            key = self._drivers.pop(job_id, None)
        if key is not None:
            self._update(key, status="SUCCEEDED", end_time=_now_ms())

    # -- packages (working_dir / py_modules uploads) -------------------------------------------
    def has_package(self, uri):
        return os.path.isdir(self._package_dir(uri))

    def _package_dir(self, uri):
        protocol, _, name = uri.partition("://")
        if protocol != "gcs" or "/" in name or name.startswith(".") or not name.endswith(".zip"):
            raise JobError(400, f"not a package URI ray-adapter serves: {uri!r} (gcs://<name>.zip)")
        return os.path.join(self._packages, name[:-len(".zip")])

    def add_package(self, uri, data):
        """An uploaded package (a zip's bytes): extracted and registered with the runtime."""
        target = self._package_dir(uri)
        os.makedirs(self._packages, mode=0o700, exist_ok=True)
        tmp = f"{target}.{os.getpid()}.{threading.get_ident()}"
        path = tmp + ".zip"
        with open(path, "wb") as f:
            f.write(data)
        try:
            with zipfile.ZipFile(path) as archive:
                archive.extractall(tmp)
        except zipfile.BadZipFile as exc:
            raise JobError(400, f"the package {uri} is not a zip file: {exc}") from None
        finally:
            os.unlink(path)
        if os.path.isdir(target):  # uploaded before (same content: the name is its hash)
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            os.rename(tmp, target)
        self._envs.add_package(uri, target)

    def _package(self, uri):
        if uri.startswith("gcs://"):
            path = self._package_dir(uri)
            if not os.path.isdir(path):
                raise JobError(400, f"the package {uri} was not uploaded to this runtime")
            return path
        if os.path.isdir(uri):  # a local directory of this machine
            return uri
        raise JobError(400, f"working_dir / py_modules {uri!r}: only packages uploaded by the job "
                            "client (gcs://) or directories of this machine are provided")

    # -- stopping and deleting ---------------------------------------------------------------
    def stop(self, submission_id, grace=None):
        """Stop the job (SIGTERM to its process group, which its runner passes on to what left
        the group; SIGKILL to all of it after ``grace`` seconds, default
        ``RAY_JOB_STOP_WAIT_TIME_S`` or 3); True if it was running, False if it had ended.
        Raises JobError 404."""
        self.get(submission_id)
        with self._lock:
            live = self._live.get(submission_id)
            if live is None:
                return False
            live.stopping = "user"
            proc, group = live.proc, live.group
        if proc is None and group is not None:  # waiting for its resources: it never starts
            self._backend.remove_placement_group(group)
        if proc is not None:
            self._stop_process(proc, self._stop_wait() if grace is None else grace)
        return True

    @staticmethod
    def _stop_wait():
        return float(os.environ.get("RAY_JOB_STOP_WAIT_TIME_S", 3))

    def _stop_process(self, proc, grace):
        _signal_group(proc.pid, signal.SIGTERM)
        start_daemon(self._kill_later, f"ray-adapter-job-stop-{proc.pid}", (proc, grace))

    def _kill_later(self, proc, wait):
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            self._kill_tree(proc.pid)

    def _kill_tree(self, pid):
        """SIGKILL the runner's descendants (also those that left its group), then its group."""
        signal_descendants(signal.SIGKILL, pid)
        _signal_group(pid, signal.SIGKILL)

    def delete(self, submission_id):
        """Forget an ended job (its record and log). Raises JobError 404, or 400 while it runs."""
        record = self.get(submission_id)
        if record["type"] == "DRIVER":
            raise JobError(400, f"Job '{submission_id}' is a driver's (run directly, not "
                                "submitted): only submitted jobs can be deleted.")
        if record["status"] not in TERMINAL:
            raise JobError(400, f"Attempted to delete job '{submission_id}', but it is in a "
                                f"non-terminal state {record['status']}.")
        with self._db_lock:
            self._db.execute("DELETE FROM jobs WHERE submission_id = ?", (submission_id,))
        try:
            os.unlink(self.log_path(submission_id))
        except FileNotFoundError:
            pass
        return True

    # -- logs --------------------------------------------------------------------------------
    def logs(self, submission_id):
        """The job's whole log so far (text). Raises JobError 404."""
        self.get(submission_id)
        return self.read_log(submission_id, 0, -1).decode(errors="replace")

    def follow(self, submission_id, wake):
        """Call ``wake()`` (from a job thread; it must not block) whenever the job's log grows
        and when the job ends; returns False (and never calls it) when the job has ended.
        Raises JobError 404. :meth:`unfollow` stops it."""
        self.get(submission_id)
        with self._lock:
            live = self._live.get(submission_id)
            if live is not None:
                live.followers.append(wake)
        return live is not None

    def unfollow(self, submission_id, wake):
        with self._lock:
            live = self._live.get(submission_id)
            if live is not None and wake in live.followers:
                live.followers.remove(wake)

    def running(self, submission_id):
        """True while the job has not ended (its log may still grow)."""
        with self._lock:
            return submission_id in self._live

    def read_log(self, submission_id, offset, limit):
        """Up to ``limit`` bytes (-1: all) of the job's log from byte ``offset``."""
        try:
            with open(self.log_path(submission_id), "rb") as f:
                f.seek(offset)
                return f.read(limit)
        except FileNotFoundError:
            return b""

    def close(self):
        """The head stops: running jobs are stopped (SIGKILL: the runtime is going away)."""
        with self._lock:
            self._closed = True
            lives = list(self._live.items())
        for submission_id, live in lives:
            live.stopping = "runtime"
            if live.proc is not None:
                self._kill_tree(live.proc.pid)
            elif live.group is not None:
                self._backend.remove_placement_group(live.group)
        for _, live in lives:  # each records its end (bounded: its processes are killed)
            if live.thread is not None:
                live.thread.join(5)
