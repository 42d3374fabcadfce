"""A headless runtime: what ``ray start --head`` starts, and ``ray stop`` stops.

:func:`start` runs ``python -m ray_adapter.core.embedded.head`` in a session of its own (it
outlives the shell that started it, as Ray's head processes do), its output to a log file, and
returns once the runtime is ready to be attached to (the child says so on a pipe) or has failed
(its log's end is the error). The process runs :class:`~.backend.EmbeddedBackend` with
``head_port`` set: no driver of its own, attachable at ``127.0.0.1:<port>``, named in
``current_cluster`` so a plain ``ray.init()`` attaches to it; it ends on SIGTERM or SIGINT
(its runtime shut down: workers stopped, socket, record and session files removed).

:func:`stop` ends every headless runtime of this user on this machine: SIGTERM, then SIGKILL
after ``grace`` seconds (at once with ``force``), then removes whatever a killed one left
(records, socket directories). A runtime a driver's ``ray.init()`` started is that driver's
and is left alone.

Thread-safety: functions of the calling thread; the head process's main thread waits for its
signal, the runtime's own threads do the rest.
"""
import fcntl
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time

from ray_adapter.core.embedded import local_runtimes

DEFAULT_PORT = 6379
DEFAULT_DASHBOARD_PORT = 8265
READY_TIMEOUT_S = 60.0


class HeadError(RuntimeError):
    """``ray start --head`` could not start a runtime; the message says why."""


def start(options):
    """Start a headless runtime with ``options`` (a dict: ``num_cpus``, ``num_gpus``,
    ``resources``, ``labels``, ``object_store_memory``, ``port``), its output going to a log
    file in the registry directory (``logs/head-<port>-<time>.log``); returns its record (with
    ``log``, that file) once it is ready. Raises HeadError (the reason) when a runtime already
    runs at that port or it fails to start."""
    port = options.get("port") or DEFAULT_PORT
    logs = os.path.join(local_runtimes.registry_dir(), "logs")
    os.makedirs(logs, mode=0o700, exist_ok=True)
    log_path = os.path.join(logs, f"head-{port}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log")
    address = f"127.0.0.1:{port}"
    if local_runtimes.find(address) is not None:
        raise _port_taken(port)
    read_end, write_end = os.pipe()
    with open(log_path, "ab") as log:
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "ray_adapter.core.embedded.head", str(write_end),
                 json.dumps(dict(options, port=port))],
                pass_fds=(write_end,), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True, close_fds=True, env=_head_environment())
        finally:
            os.close(write_end)
    with os.fdopen(read_end, "rb") as ready:
        line = _read_line(ready, READY_TIMEOUT_S)
    if not line.startswith(b"ready"):
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        raise HeadError(f"The Ray runtime did not start (exit code {proc.returncode}): "
                        f"{_tail(log_path).strip()}\n(its log: {log_path})")
    return dict(json.loads(line[len(b"ready "):]), log=log_path)


def _port_taken(port):
    return HeadError(f"A Ray runtime is already running at 127.0.0.1:{port} (`ray status`); stop "
                     "it with `ray stop`, or start this one with another --port.")


def _head_environment():
    env = dict(os.environ)
    env["RAY_BACKEND"] = "yuanrong"
    env.pop("RAY_ADDRESS", None)
    env.pop("RAY_ADAPTER_RUNTIME", None)
    return env


def _read_line(stream, timeout):
    """The first line the head writes (b"" when it ended or ``timeout`` passed first)."""
    result = []
    reader = threading.Thread(target=lambda: result.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return result[0] if result else b""


def _tail(path, lines=20):
    try:
        with open(path, "rb") as f:
            return b"".join(f.readlines()[-lines:]).decode(errors="replace")
    except OSError:
        return ""


def stop(force=False, grace=10.0):
    """End every headless runtime of this user (see the module's notes); returns the records
    of those it stopped."""
    heads = [r for r in local_runtimes.running() if r.get("started_by") == "ray start"]
    for record in heads:
        _signal(record["pid"], signal.SIGKILL if force else signal.SIGTERM)
    deadline = time.monotonic() + grace
    for record in heads:
        if not _wait_gone(record["pid"], max(0.0, deadline - time.monotonic())):
            _signal(record["pid"], signal.SIGKILL)
            _wait_gone(record["pid"], None)
        local_runtimes.remove_stale(record)
    # What a head killed now or before (SIGKILL) left of its jobs.
    _end_orphan_jobs({int(r["address"].rsplit(":", 1)[1]) for r in local_runtimes.running()
                      if r.get("started_by") == "ray start"})
    return heads


def _end_orphan_jobs(live_ports):
    """The jobs heads that are gone left running (:func:`.jobs.end_orphans`)."""
    try:
        root = local_runtimes.registry_dir(create=False)
        names = os.listdir(root)
    except (OSError, PermissionError):
        return
    for name in names:
        port = name[len("jobs-"):]
        if name.startswith("jobs-") and port.isdigit() and int(port) not in live_ports:
            from ray_adapter.core.embedded.jobs import end_orphans

            end_orphans(os.path.join(root, name))


def _wait_gone(pid, timeout):
    """Wait until process ``pid`` (not a child) has ended, at most ``timeout`` seconds (None:
    no limit); True once it has (a pidfd: woken by its exit, no polling)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
        return bool(ready)
    finally:
        os.close(fd)


def _signal(pid, signum):
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _serve_jobs(backend, options):
    """The job manager and the Jobs API of this head (see :mod:`.jobs`, :mod:`.job_server`);
    raises when the dashboard port cannot be served (taken, or non-loopback without a token)."""
    from ray_adapter.core.embedded.job_server import JobServer
    from ray_adapter.core.embedded.jobs import JobManager

    port = options["port"]
    jobs = JobManager(directory=os.path.join(local_runtimes.registry_dir(), f"jobs-{port}"),
                      address=backend.address, envs=backend.envs, backend=backend)
    backend.drivers.continue_after(jobs.last_job_index())  # a restarted head's kept jobs
    backend.drivers.job_records = jobs
    routes = {}
    for name in options.get("http_routes") or ():
        routes.update(_provider(name)(backend.state))
    server = JobServer(jobs=jobs, host=options.get("dashboard_host") or "127.0.0.1",
                       port=options.get("dashboard_port") or DEFAULT_DASHBOARD_PORT, routes=routes)
    try:
        server.start()
    except OSError as exc:
        jobs.close()
        raise HeadError(f"The Jobs API cannot listen on {server.url}: {exc}. Is another Ray "
                        "runtime's dashboard there? Choose another --dashboard-port.") from None
    return jobs, server


def _provider(name):
    """The function ``"module:function"`` names: a layer above the core that adds HTTP routes
    (``ray start`` names the State API's), given by name so that the core imports nothing of
    it. Called with the runtime's ``state`` and the job list; returns ``{path: handler}``."""
    import importlib

    module, _, function = name.partition(":")
    return getattr(importlib.import_module(module), function)


def _serve(ready_fd, options):
    """The head process: run the runtime until SIGTERM / SIGINT."""
    from ray_adapter.core.embedded.backend import EmbeddedBackend
    from ray_adapter.core.interface import InitOptions

    stop_event = threading.Event()

    def stop(signum, frame):
        print(f"ray-adapter: {signal.Signals(signum).name} received: stopping", flush=True)
        stop_event.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)
    # One head per port, even when two `ray start` race past the registry check: the port's
    # lock is held for this process's life (the kernel lets go of it however it ends).
    locks = os.path.join(local_runtimes.registry_dir(), "locks")
    os.makedirs(locks, mode=0o700, exist_ok=True)
    lock = os.open(os.path.join(locks, f"head-{options['port']}.lock"),
                   os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _port_taken(options["port"]) from None
    backend = EmbeddedBackend()
    backend.start(InitOptions(
        num_cpus=options.get("num_cpus"), num_gpus=options.get("num_gpus"),
        memory=options.get("memory"),
        resources=dict(options.get("resources") or {}), labels=dict(options.get("labels") or {}),
        object_store_memory=options.get("object_store_memory"), head_port=options["port"]))
    jobs = server = None
    try:
        if options.get("include_dashboard", True):
            jobs, server = _serve_jobs(backend, options)
    except BaseException:
        backend.shutdown()
        raise
    record = local_runtimes.current()
    if server is not None:
        record = dict(record, dashboard=server.url)
        local_runtimes.register(record)
        local_runtimes.set_current(record)
    with os.fdopen(ready_fd, "wb") as ready:
        ready.write(b"ready " + json.dumps(record).encode() + b"\n")
    print(f"ray-adapter: runtime ready at {backend.address} (pid {os.getpid()})", flush=True)
    while not stop_event.wait(3600):
        pass
    if server is not None:
        jobs.close()    # its jobs end first: their log tails finish, the server's close is quick
        server.close()
    backend.shutdown()
    print("ray-adapter: runtime stopped", flush=True)


def _main(ready_fd, options):
    """The head process's entry: a refusal (port taken, no token, ...) is one line on stderr,
    which ``ray start`` shows, not a traceback."""
    from ray_adapter.core.embedded.job_server import TokenRequired

    try:
        _serve(ready_fd, options)
    except (HeadError, TokenRequired) as exc:
        sys.stderr.write(f"{exc}\n")
        sys.exit(1)


if __name__ == "__main__":
    _main(int(sys.argv[1]), json.loads(sys.argv[2]))
