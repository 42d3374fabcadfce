"""Worker processes: starting, reusing, retiring and reaping them.

:class:`WorkerHandle` is the driver's side of one worker process: its channel (a per-worker send
queue, see :mod:`.channel`) and one reader thread that decodes the worker's messages and hands
them to the backend's dispatcher. Whatever ends the reader (end of stream, a malformed stream,
a bug in a handler) goes through the same exit path: the process is reaped, its process group
killed, and the backend told, so no task is left waiting on a dead worker.

:class:`WorkerPool` keeps idle task workers per node and runtime env (a worker is started for one
env: its environment, cwd and import path, see :mod:`.runtime_envs`, and is reused only for
tasks of the same env, as Ray's workers are; an env's ``py_executable`` starts its workers with
that command, as Ray's ``bash -c "exec <py_executable> <worker script> ..."``, and one that ends
before it said Hello fails its task or actor with the reason, see :func:`boot_failure`).
Processes are spawned outside every lock,
by the thread that needs one (or the pre-start thread); a new worker can be sent work at once,
since its messages wait in the socket until it has booted.

Thread-safety: ``WorkerPool._lock`` (a leaf lock) guards the idle lists and the set of live
workers. A handle's mutable fields (``state``, ``task``, ``actor``, ``blocked``) belong to the
component that took the worker (task manager or actor manager) and are changed under its lock.
"""
import collections
import enum
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback

from ray_adapter.core import errors, ids
from ray_adapter.core.embedded import protocol
from ray_adapter.core.embedded.arena import DriverCodec, Pins
from ray_adapter.core.embedded.channel import Channel, ChannelClosed
from ray_adapter.core.embedded.driver_reading import ReadRole
from ray_adapter.core.embedded.entry import default_worker as entry
from ray_adapter.core.embedded.posts import flush_posted, flushes_before_blocking
from ray_adapter.core.embedded.zygote import Zygote, preload_modules
from ray_adapter.core.execution import MAIN_MODULE_ENV, main_module_name
from ray_adapter.core.threads import blocking_signals, start_daemon

#: Extra idle workers kept per node beyond its CPU count before idle ones are retired.
IDLE_WORKER_SLACK = 2
#: How many ended workers and drivers the State API still lists (the oldest go first).
DEPARTED_KEPT = 1000


class WorkerState(enum.Enum):
    IDLE = "idle"        # in the pool, no work
    TASK = "task"        # running one normal task
    ACTOR = "actor"      # hosting an actor for life
    RETIRED = "retired"  # told to exit
    DEAD = "dead"        # its process is gone
    DRIVER = "driver"    # not a worker: an attached driver (drivers.DriverPeer)


#: What the State API lists of an ended worker or driver (not its handle, which may hold a
#: crashed task's arguments): ids, process, node, job, times (see WorkerHandle.times), and
#: :meth:`WorkerHandle.exit_facts`.
DepartedWorker = collections.namedtuple(
    "DepartedWorker", "worker_id pid node job_id is_driver times exit")


class WorkerHandle:
    __slots__ = ("proc", "pid", "worker_id", "channel", "node", "state", "task", "ran_tasks", "actor",
                 "known_keys", "calls", "borrowed", "exit_intended", "left_by_python",
                 "exit_by_exit_actor", "blocked", "pins", "spec", "followers", "booted",
                 "boot_failure", "job_id", "namespace", "times", "retired_for", "read_role",
                 "doomed", "__weakref__")

    def __init__(self, proc, channel, worker_id, node, arena=None, spec=None):
        self.proc = proc
        self.pid = proc.pid
        self.worker_id = worker_id
        self.channel = channel
        self.node = node
        self.state = WorkerState.IDLE
        self.task = None            # the running normal task's record
        self.ran_tasks = False      # it was given a normal task (set by its taker): no actor's
        self.actor = None           # the hosted actor's record
        self.known_keys = set()     # functions/classes already registered with this worker
        self.calls = {}             # function key -> calls run (max_calls)
        self.borrowed = set()       # ids of actors this worker holds handles to
        self.exit_intended = False  # exit_actor() was called
        self.left_by_python = False  # it said it leaves by sys.exit (protocol.Leaving)
        self.exit_by_exit_actor = False  # its exit_intended came from exit_actor(), not sys.exit(0)
        self.blocked = 0            # nested get/wait calls in flight from its task
        self.pins = Pins()          # arena blocks sent to it whose views it may still hold
        if arena is not None:
            channel.codec = DriverCodec(arena, self.pins)
        self.spec = spec            # the runtime_envs.WorkerSpec it was started with
        self.followers = collections.deque()  # tasks sent behind the running one (task_pipeline)
        self.read_role = ReadRole(channel)  # who reads its channel (driver_reading)
        self.booted = False         # it said Hello (set by its reader thread)
        self.boot_failure = None    # why a py_executable worker ended before Hello (its reader)
        # The attached driver's job this worker serves, or that peer's own (a
        # :class:`.drivers.DriverPeer`); None: the runtime's own job. Set before it is used.
        self.job_id = None
        self.namespace = None
        #: [launched, first given work (None: never), ended (None: not yet)], in seconds since
        #: the epoch: the State API lists a worker once it was given work, as Ray's GCS does
        self.times = [time.time(), None, None]
        self.retired_for = None  # why the runtime asked it to exit (see WorkerPool.retire)
        #: ``({task_id: call}, death)``: the calls its dead actor had in flight when the runtime
        #: killed or retired it, answered by it if it did before its stream ended, else failed
        #: with ``death`` then (``ActorManager.die``; under the actor manager's lock)
        self.doomed = None

    def exit_facts(self):
        """Why this ended worker or driver ended, as plain data for the State API: ``cause``
        (``driver`` with ``intended``; ``exit_actor``, with ``call``: by ``exit_actor()``, not
        ``sys.exit(0)``; ``retired`` with ``why``; ``crashed``,
        with ``python``: it left by ``sys.exit``, not killed or faulted), and the process's
        ``exit_code`` (None: unknown)."""
        code = self.proc.returncode
        if self.state is WorkerState.DRIVER:
            return {"cause": "driver", "intended": self.exit_intended, "exit_code": code}
        if self.exit_intended:
            return {"cause": "exit_actor", "exit_code": code, "call": self.exit_by_exit_actor}
        if self.retired_for is not None:
            return {"cause": "retired", "why": self.retired_for, "exit_code": code}
        return {"cause": "crashed", "exit_code": code, "python": self.left_by_python}

    @property
    def keeps_what_it_owns(self):
        """Retired for idleness or its function's ``max_calls``: what it created (actors,
        tasks still running) outlives it, as Ray keeps such a worker until that is done."""
        return self.retired_for in ("idle", "max_calls")

    @property
    def alive(self):
        return self.state not in (WorkerState.DEAD, WorkerState.RETIRED)

    def enqueue(self, message, buffers=()):
        """Queue ``message`` (a protocol Struct); no I/O (safe under a component's lock)."""
        self.channel.enqueue(protocol.encode(message), buffers)

    def send(self, message, buffers=()):
        """Queue ``message`` and write it now."""
        self.channel.send(protocol.encode(message), buffers)

    def post(self, message, buffers=()):
        """Queue ``message``; it is written with the next batch (see channel.post)."""
        self.channel.post(protocol.encode(message), buffers)

    def flush(self):
        """Have what :meth:`enqueue` queued written with the next batch."""
        self.channel.mark_posted()

    def register(self, key, blob):
        """Queue the function or class ``key`` unless this worker has it already."""
        if key not in self.known_keys:
            self.known_keys.add(key)
            self.enqueue(protocol.Function(key, blob))

    def kill_group(self):
        """Kill the worker's process group: it and every process its tasks started."""
        try:
            os.killpg(self.pid, signal.SIGKILL)  # a worker leads its own session and group
        except (ProcessLookupError, PermissionError):
            pass


class WorkerPool:
    """Spawns worker processes and keeps idle ones. ``dispatch(worker, message, buffers)``
    handles each message a worker sends; ``on_exit(worker)`` runs once its process is gone."""

    def __init__(self, init_message, default_spec, log_to_driver, dispatch, on_exit, arena=None,
                 fork_workers=True, session_dir=None):
        self._lock = threading.Lock()
        self._arena = arena
        self._zygote = None
        if fork_workers and default_spec.py_executable is None:
            # The template is started as the job's workers are (environment, cwd): only
            # workers of the job's runtime env are forked from it, the others are exec'd (all
            # of them when the job's env names a py_executable: the template is this Python).
            out = None if log_to_driver else subprocess.DEVNULL
            try:
                # It removes the session directory when the driver is gone, however it ended.
                self._zygote = Zygote(default_spec.environ, stdout=out, stderr=out,
                                      cwd=default_spec.cwd, remove_on_exit=session_dir,
                                      preload=preload_modules())
            except OSError:  # no template: every worker is a fresh interpreter
                self._zygote = None
        self._init = init_message      # a function (worker_id, node, spec, job) -> protocol.Init
        self._default = default_spec   # the job's WorkerSpec
        self._log_to_driver = log_to_driver
        self._dispatch = dispatch
        self._on_exit = on_exit
        self._idle = {}                # (node id, spec key, job) -> [WorkerHandle]
        self._live = set()
        # DepartedWorker of the last ended workers that had been given work, and of ended
        # drivers: the State API lists them, as Ray keeps dead workers
        self._departed = collections.deque(maxlen=DEPARTED_KEPT)
        self._prestarting = []         # pre-start threads (shutdown waits for them)
        self._closed = False

    # -- spawning ----------------------------------------------------------------------------
    def spawn(self, node, spec=None, job=None):
        """Start a worker process for ``node``, runtime env ``spec`` (default: the runtime's
        job's) and ``job`` (an attached driver's job id; None: the runtime's own job); call
        outside any lock. Returns its handle. Raises OSError (and the like) when no process
        can be started."""
        spec = spec or self._default
        started = (spec.key == self._default.key and self._fork()) or self._exec(spec)
        parent, proc = started
        worker = WorkerHandle(proc, Channel(parent), ids.random_id(ids.WORKER_ID_SIZE), node,
                              self._arena, spec)
        init = self._init(worker.worker_id, node, spec, job)
        worker.job_id = job
        worker.namespace = init.namespace if job is not None else None  # its job's (queries)
        worker.send(init)
        with self._lock:
            closed = self._closed
            self._live.add(worker)  # until reaped: shutdown waits for every worker it knows
        if closed:
            worker.send(protocol.Exit())
            worker.state = WorkerState.RETIRED
        start_daemon(self._reader, f"ray-adapter-worker-{proc.pid}", (worker,))
        return worker

    def _fork(self):
        """``(socket, process)`` of a worker forked from the template (a few milliseconds), or
        None when the template is gone. A socket pair is never reused after a failed try: a
        child may have been forked on it before the template died (it sees its end close)."""
        zygote = self._zygote
        if zygote is None or not zygote.alive:
            return None
        parent, child = socket.socketpair()
        try:
            return parent, zygote.spawn(child.fileno())
        except OSError:
            parent.close()
            return None
        finally:
            child.close()

    def _exec(self, spec):
        """``(socket, process)`` of a worker in a fresh interpreter (about 150 ms of CPU); with
        the spec's ``py_executable``, started as Ray starts one: bash runs ``exec <command>
        <worker script> FD`` (the command a shell prefix: ``uv run ...``, a wrapper, a venv's
        python)."""
        parent, child = socket.socketpair()
        out = None if self._log_to_driver else subprocess.DEVNULL
        if spec.py_executable is None:
            argv = [sys.executable, "-m", "ray_adapter.core.embedded.worker", str(child.fileno())]
        else:
            argv = ["bash", "-c", f"exec {spec.py_executable} {shlex.quote(entry.__file__)} {child.fileno()}"]
        try:
            proc = subprocess.Popen(
                argv,
                pass_fds=(child.fileno(),), env=spec.environ, cwd=spec.cwd, stdin=subprocess.DEVNULL,
                stdout=out, stderr=out, start_new_session=True, close_fds=True)
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        return parent, proc

    def adopt(self, peer):
        """Read ``peer`` (an attached driver, :class:`.drivers.DriverPeer`) as a worker is
        read: its messages go to the dispatcher, its end to ``on_exit``. Raises RuntimeError
        once the pool is shut down."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the runtime is shutting down")
            self._live.add(peer)
        peer.times[1] = peer.times[0]  # a driver is listed from the start
        start_daemon(self._reader, f"ray-adapter-driver-{peer.pid}", (peer,))

    def prestart(self, node, count):
        """Start idle workers until ``node`` has ``count`` (runs in a background thread)."""
        def run():
            while True:
                with self._lock:
                    if self._closed or len(self._idle.get((node.node_id, self._default.key, None), ())) >= count:
                        return
                try:
                    worker = self.spawn(node)
                except Exception:  # nothing to do: the first task will try again and report
                    return
                self.put_back(worker)

        thread = threading.Thread(target=run, daemon=True, name="ray-adapter-prestart")
        with self._lock:
            self._prestarting.append(thread)
        with blocking_signals():
            thread.start()

    # -- reuse -------------------------------------------------------------------------------
    def take(self, node, spec=None, job=None, fresh=False):
        """An idle worker of ``node`` started for ``spec`` (default: the runtime's job's) and
        ``job`` (as :meth:`spawn`: a worker serves one job, as Ray's do), or a new one; the
        caller owns it until put back. ``fresh``: one that never ran a task (an actor's, as
        Ray never places an actor in a task's worker: what tasks left in a process -- its
        environment, a torch process group, module state -- is never an actor's)."""
        spec = spec or self._default
        with self._lock:
            idle = self._idle.get((node.node_id, spec.key, job))
            for index in range(len(idle or ()) - 1, -1, -1):
                worker = idle[index]
                if fresh and worker.ran_tasks:
                    continue
                del idle[index]
                if worker.alive:
                    worker.times[1] = worker.times[1] or time.time()
                    return worker
        worker = self.spawn(node, spec, job)
        worker.times[1] = time.time()
        return worker

    def put_back(self, worker):
        """Return a task worker to the pool (retired instead when the node's idle workers, of
        all runtime envs together, are as many as its CPUs plus a little slack)."""
        node_id = worker.node.node_id
        limit = worker.node.idle_limit
        if limit is None:
            limit = worker.node.idle_limit = int(worker.node.resources.total_dict().get("CPU", 0)) + IDLE_WORKER_SLACK
        with self._lock:
            if not self._closed and worker.alive:
                idle = self._idle.setdefault((node_id, worker.spec.key, worker.job_id), [])
                if sum(len(v) for k, v in self._idle.items() if k[0] == node_id) < limit:
                    worker.state = WorkerState.IDLE
                    worker.task = None
                    idle.append(worker)
                    return
        self.retire(worker, "idle")

    def retire(self, worker, why):
        """Ask a worker to exit (its reader reaps it); ``why`` is kept for the State API:
        "idle", "job" (its job ended), "max_calls", or the death
        (:class:`~ray_adapter.core.errors.ActorDied`) of the actor it hosted. An actor that went
        out of scope ends gracefully, as in Ray (its ``__ray_shutdown__``, then ``atexit``)."""
        if worker.state is WorkerState.DEAD:
            return
        worker.retired_for = why if isinstance(why, str) else dict(why.facts(), actor_id=why.actor_id.hex())
        worker.state = WorkerState.RETIRED
        graceful = isinstance(why, errors.ActorDied) and why.cause is errors.ActorDeath.OUT_OF_SCOPE
        worker.send(protocol.Exit(graceful))

    def end_job(self, job):
        """Attached job ``job`` ended: its idle workers exit (a busy one when its work ends:
        it is never given another job's)."""
        with self._lock:
            ended = [w for key, idle in self._idle.items() if key[2] == job for w in idle]
            for key in [k for k in self._idle if k[2] == job]:
                del self._idle[key]
        for worker in ended:
            self.retire(worker, "job")

    def workers_of(self, node_id):
        """The live worker processes of node ``node_id`` (a removed node's are killed)."""
        with self._lock:
            return [w for w in self._live if w.node.node_id == node_id]

    def live_workers(self):
        """A snapshot of every live worker handle (for the State API)."""
        with self._lock:
            return list(self._live)

    def departed_workers(self):
        """:class:`DepartedWorker` records of the last ended workers that had been given work
        and of ended drivers, oldest first (for the State API)."""
        with self._lock:
            return list(self._departed)

    # -- reading -----------------------------------------------------------------------------
    def _reader(self, worker):
        flushes_before_blocking()
        channel = worker.channel
        decode = protocol.driver_decoder.decode
        dispatch = self._dispatch

        def receive():  # one frame, on whichever thread holds the read role
            body, buffers = channel.recv()
            message = decode(body)
            if not worker.booted and type(message) is protocol.Hello:
                if message.version != protocol.VERSION:  # another ray-adapter (py_executable)
                    worker.boot_failure = version_failure(worker.spec.py_executable, message.version)
                    return False
                worker.booted = True
            dispatch(worker, message, buffers)
            return True

        try:
            worker.read_role.serve(receive)
        except ChannelClosed:
            pass
        except BaseException:  # a handler bug: report it, then treat the worker as lost
            sys.stderr.write("ray-adapter: internal error handling a message of worker "
                             f"{worker.pid}; the worker is stopped:\n{traceback.format_exc()}")
        finally:
            self._reap(worker)
            flush_posted()  # what the exit path posted (a retried task...) goes out now

    def _reap(self, worker):
        if worker.state is not WorkerState.RETIRED:
            worker.kill_group()
        try:
            worker.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            worker.proc.kill()
            worker.proc.wait()
        worker.kill_group()  # what its tasks started dies with it, as in Ray
        if (not worker.booted and worker.boot_failure is None and worker.spec.py_executable is not None
                and worker.state is not WorkerState.RETIRED):
            worker.boot_failure = boot_failure(worker.spec.py_executable, worker.proc.returncode)
        worker.channel.close()
        worker.read_role.close()
        worker.pins.clear()  # its views of arena blocks died with it
        with self._lock:
            self._live.discard(worker)
            idle = self._idle.get((worker.node.node_id, worker.spec.key, worker.job_id))
            if idle and worker in idle:
                idle.remove(worker)
        worker.times[2] = time.time()
        if worker.times[1] is not None:  # listed while alive: still listed, with its end
            gone = DepartedWorker(worker.worker_id, worker.pid, worker.node, worker.job_id,
                                  worker.state is WorkerState.DRIVER, tuple(worker.times),
                                  worker.exit_facts())
            with self._lock:
                self._departed.append(gone)
        worker.state = WorkerState.DEAD
        self._on_exit(worker)

    # -- shutdown ----------------------------------------------------------------------------
    def shutdown(self, grace=1.0):
        """Stop every worker: ask them to exit, wait up to ``grace`` seconds, then kill."""
        import time

        with self._lock:
            self._closed = True
            prestarting, self._prestarting = self._prestarting, []
        for thread in prestarting:  # each stops after the spawn it is in (bounded: the
            thread.join(10)         # template answers once imported, or is gone)
        with self._lock:
            workers = list(self._live)
            self._idle.clear()
        for worker in workers:
            if worker.state is not WorkerState.DEAD:
                worker.state = WorkerState.RETIRED
                worker.send(protocol.Exit())
        deadline = time.monotonic() + grace
        for worker in workers:
            try:
                worker.proc.wait(max(0.01, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.proc.kill()
                worker.proc.wait()
            worker.kill_group()
            # Ended, not closed: its reader thread, asleep in epoll on the socket, sees the end
            # and closes it as it leaves (a socket closed under it would leave the epoll set
            # without waking it: the thread would sleep for good).
            worker.channel.abort()
        if self._zygote is not None:
            self._zygote.close()


def version_failure(command, version):
    """Why a worker that speaks protocol ``version`` (not the driver's) was stopped: its
    interpreter (``py_executable`` ``command``) has another ray-adapter installed."""
    return (f"The worker process for runtime_env py_executable {command!r} runs another "
            f"ray-adapter: it speaks protocol version {version}, the driver "
            f"{protocol.VERSION}. Install the driver's ray-adapter version into that environment.")


def boot_failure(command, code):
    """Why a worker started with ``py_executable`` ``command`` ended (exit code ``code``)
    before it connected: the detail of the RuntimeEnvSetupError its task or actor fails with."""
    if code == protocol.VERSION_MISMATCH_EXIT_CODE:
        why = (f"its ray-adapter speaks another protocol version than the driver's "
               f"({protocol.VERSION}): install the driver's ray-adapter version into that environment")
    elif code == entry.NO_ADAPTER_EXIT_CODE:
        why = "its interpreter cannot import ray_adapter: install ray-adapter into that environment"
    elif code == 127:
        why = "the command was not found (exit code 127)"
    else:
        why = f"it exited with code {code} before the worker started"
    return (f"The worker process for runtime_env py_executable {command!r} could not be started: "
            f"{why}. Its output, on the driver's stderr, says more.")


def worker_environment(job_env_vars):
    """The environment of worker processes: the driver's, the hook on, the driver's code
    folders on PYTHONPATH, and the job's ``runtime_env`` env_vars."""
    env = dict(os.environ)
    env["RAY_BACKEND"] = "yuanrong"
    env["PYTHONPATH"] = driver_code_path()
    env[MAIN_MODULE_ENV] = main_module_name()  # what Ray calls the script's functions' module
    env.update(job_env_vars)
    return env


def driver_code_path():
    """PYTHONPATH for workers: the driver's own code folders (its script's folder, the cwd,
    PYTHONPATH and folders added to sys.path), so workers import the driver's modules as Ray's
    do. Interpreter folders (stdlib, site-packages) are left out: the worker has them already."""
    import site
    import sysconfig

    interpreter = {os.path.abspath(p) for p in sysconfig.get_paths().values()}
    interpreter.update(os.path.abspath(p) for p in getattr(site, "getsitepackages", lambda: [])())
    interpreter.add(os.path.abspath(site.getusersitepackages()))
    entries = []
    for p in sys.path:
        path = os.path.abspath(p or os.getcwd())
        if path in interpreter or path.endswith(".zip") or not os.path.isdir(path):
            continue
        entries.append(path)
    return os.pathsep.join(dict.fromkeys(entries))
