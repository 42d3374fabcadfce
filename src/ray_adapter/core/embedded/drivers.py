"""Drivers attached to a running runtime: ``ray.init(address=...)`` in another process.

An attached driver is, to the runtime, a peer much like a worker that runs nothing: its
requests (submissions, gets, puts, names, placement groups, State API queries) are the same
typed messages a worker's nested calls send (:mod:`.service` answers both), and the
references it holds are lent to it and tracked as a worker's are. So, as in Ray, the hot path
keeps its shape: tasks and actor calls go to the workers that run them, results come back to
whoever waits.

What is the driver's own (:class:`AttachedDrivers`):

- a **job**: each attached driver gets the next job id (a tool, ``ray status`` or
  ``ray list``, attaches as an *observer* and gets none); the actors it creates and the
  placement groups it makes are owned by that job (``owner_job``);
- its **namespace** (its ``ray.init(namespace=...)``, or a new random one): names it makes or
  looks up without a namespace are there;
- its job's **runtime env**, packaged by the runtime (working_dir / py_modules are on this
  machine), which its tasks and actors inherit.

When a driver's connection ends (``ray.shutdown()``, exit, SIGKILL), its job ends: its
non-detached actors are killed (``OWNER_DIED``, saying whether the driver said goodbye first:
:class:`protocol.Exit`) and its non-detached placement groups removed, as Ray ends a job; then
the peer's exit path runs as a dead worker's does (its references and handles let go).
Detached ones stay until killed or the runtime stops.

Thread-safety: ``_lock`` (a leaf lock) guards the job counter; a peer's fields are set by its
reader thread (``on_hello``) before any other message of it is handled.
"""
import pickle
import sys
import threading
import time

from ray_adapter.core import errors, ids
from ray_adapter.core.job_records import command_line, driver_job_record
from ray_adapter.core.embedded import protocol
from ray_adapter.core.embedded.channel import Channel
from ray_adapter.core.embedded.pool import WorkerHandle, WorkerState


class DriverJobs:
    """The job records of a runtime without a job server (one a driver's ``ray.init()``
    started): its own driver's job and each attached driver's, kept in memory for this
    runtime's life, as Ray's GCS keeps a job table (``ray.util.state.list_jobs()``,
    ``ray._private.state.jobs()``). A ``ray start`` head keeps them in its job manager
    instead (:mod:`.jobs`, the same methods). Own leaf lock (the records)."""

    def __init__(self, ip):
        self._ip = ip
        self._lock = threading.Lock()
        self._records = {}  # job id (hex) -> record, in the order the jobs started

    def driver_attached(self, submission_id, job_id, pid):
        """Driver ``pid`` of job ``job_id`` (hex) started (``submission_id``: none here)."""
        record = driver_job_record(job_id, pid, self._ip, command_line(pid))
        with self._lock:
            self._records[job_id] = record

    def driver_ended(self, job_id):
        """Its driver detached or died: the job SUCCEEDED, as Ray reports a driver's job."""
        with self._lock:
            record = self._records.get(job_id)
            if record is not None:
                record.update(status="SUCCEEDED", end_time=int(time.time() * 1000))

    def list(self):
        """Every job's record (copies), oldest first."""
        with self._lock:
            return [dict(r, driver_info=dict(r["driver_info"])) for r in self._records.values()]


class _NotAChild:
    """What a :class:`WorkerHandle` keeps as ``proc`` for a process this runtime did not
    start: nothing to wait for or kill (the driver owns its own life)."""

    returncode = None

    def __init__(self, pid):
        self.pid = pid

    def wait(self, timeout=None):
        return None

    def poll(self):
        return None

    def kill(self):
        return None


class DriverPeer(WorkerHandle):
    """The runtime's side of one attached driver (``state`` is ``DRIVER``)."""

    __slots__ = ()

    def kill_group(self):
        """Never: the driver's process group is not the runtime's to kill."""
        return None


class AttachedDrivers:
    """Takes drivers on (``accept``, from the attach server's thread), answers their
    :class:`protocol.AttachHello` and ends their jobs when they go."""

    def __init__(self, *, pool, node, envs, actors, groups, arena, address, first_job, ids):
        """Collaborators: the ``pool`` (which reads each peer), the head ``node``, the runtime
        ``envs`` (a job's packages and worker spec), the ``actors`` and placement ``groups``
        (ended with a job), the shared-memory ``arena`` (values sent to a driver), the
        runtime's ``address``, its ``ids`` (each driver's salt for its calls' ids); job ids
        start at ``first_job``."""
        self._pool, self._node, self._envs, self._ids = pool, node, envs, ids
        self._actors, self._groups, self._arena = actors, groups, arena
        self._address = address
        self._lock = threading.Lock()
        self._next_job = first_job
        # job id -> (namespace, code path, main module); kept after the job while an actor of it
        # lives (a detached one may restart and need a worker of its job)
        self._jobs = {}
        #: Where each driver's job is recorded (``driver_attached(submission_id or "", job_id
        #: hex, pid)``, ``driver_ended(job_id hex)``, ``list()``): a :class:`DriverJobs`, or
        #: the job manager of a head that serves jobs (:mod:`.jobs`), which replaces it.
        self.job_records = DriverJobs(node.ip)
        self._peers = {}       # job id -> its driver's peer, while attached

    def accept(self, connection, pid):
        """A process connected: read it as a peer from now on."""
        peer = DriverPeer(_NotAChild(pid), Channel(connection), ids.random_id(ids.WORKER_ID_SIZE),
                          self._node, self._arena, self._envs.job)
        peer.state = WorkerState.DRIVER
        peer.booted = True
        self._pool.adopt(peer)

    def continue_after(self, index):
        """Give job ids after ``index`` from now on (a restarted head, whose jobs are kept)."""
        with self._lock:
            self._next_job = max(self._next_job, index + 1)

    def on_hello(self, peer, message, buffers):
        """The driver said who it is: give it its job (reader thread, before anything else)."""
        if message.version != protocol.VERSION:  # its own check of the record missed it
            peer.send(protocol.Attached(b"", b"", b"", "", "", "", b"", (
                f"Version mismatch: this runtime speaks protocol version {protocol.VERSION}, the "
                f"driver {message.version}")))
            return
        job = None
        if not message.observer:
            with self._lock:
                job = self._next_job
                self._next_job += 1
        env = pickle.loads(message.runtime_env) if message.runtime_env else None
        try:
            env = self._envs.package_job_env(env) if env else {}
            spec = self._envs.spec(env) if env else self._envs.job
        except Exception as exc:  # noqa: BLE001 - the driver's init raises it
            peer.send(protocol.Attached(b"", b"", b"", "", "", "", b"",
                                        f"the job's runtime_env could not be set up: {exc}"))
            return
        peer.spec = spec
        peer.job_id = ids.job_id(job) if job is not None else None
        peer.namespace = message.namespace
        if peer.job_id is not None:  # a job's driver (a tool attached as observer has none)
            peer.worker_id = ids.driver_worker_id(peer.job_id)  # Ray's id for it
            with self._lock:
                self._jobs[peer.job_id] = (peer.namespace, message.code_path, message.main_module)
                self._peers[peer.job_id] = peer
        peer.send(protocol.Attached(peer.job_id or b"", self._node.node_id, peer.worker_id,
                                    peer.namespace, self._node.ip, self._address, pickle.dumps(env),
                                    id_salt=self._ids.caller_salt()))
        if peer.job_id is not None:
            self.job_records.driver_attached(message.submission_id, peer.job_id.hex(), message.pid)

    def on_goodbye(self, peer, message, buffers):
        """The driver is detaching by choice (:class:`protocol.Exit`; its reader thread)."""
        peer.exit_intended = True

    def on_exit(self, peer):
        """The driver's connection ended: its job ends (before the peer's references go, so
        that its actors die of their owner's end)."""
        if peer.job_id is None:
            return
        with self._lock:
            self._peers.pop(peer.job_id, None)
        self._actors.end_job(peer.job_id, errors.OwnerExit(peer.worker_id.hex(), self._node.ip,
                                                           peer.exit_intended))
        self._groups.end_job(peer.job_id)
        self._pool.end_job(peer.job_id)
        self.job_records.driver_ended(peer.job_id.hex())
        if not self._actors.has_actors_of(peer.job_id):
            with self._lock:
                self._jobs.pop(peer.job_id, None)

    def identity_of(self, job):
        """``(namespace, code_path, main_module)`` of attached job ``job`` (what its workers'
        ``Init`` carries); None if it never attached here."""
        with self._lock:
            return self._jobs.get(job)

    def output(self, job, message):
        """Lines a worker of job ``job`` printed (:class:`protocol.Output`): to its driver while
        it is attached, else to this process's own streams (a detached actor outliving it)."""
        with self._lock:
            peer = self._peers.get(job)
        if peer is not None:
            peer.post(message)
            return
        stream = sys.stdout if message.fd == 1 else sys.stderr
        try:
            stream.write(message.text)
            stream.flush()
        except (OSError, ValueError):
            pass


def is_driver(worker):
    return type(worker) is DriverPeer

