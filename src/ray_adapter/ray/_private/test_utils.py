"""``ray._private.test_utils``: the process, actor and cluster helpers of Ray's test suite
(mirrors the Ray 2.60 helpers that do not need a GCS, raylet, dashboard, Redis or metrics
agent; those are gaps in the compat matrix, each saying why).

Provided: the driver runners (``run_string_as_driver_nonblocking``,
``run_string_as_driver_stdout_stderr``; ``run_string_as_driver`` is in
``ray._common.test_utils``), process waits (``wait_for_pid_to_exit``,
``wait_for_children_of_pid``, ``wait_for_children_of_pid_to_exit``, ``kill_process_by_name``),
state waits on the State API (``wait_for_num_actors``, ``kill_actor_and_wait_for_failure``),
retry helpers (``wait_for_assertion``, ``wait_until_succeeded_without_exception``),
placement-group checks, cluster node lists, and small utilities. Ray's re-exports
(``wait_for_condition``, ``Queue``, ``list_actors`` ...) are the adapter's own objects.
"""
import contextlib
import fnmatch
import os
import socket
import subprocess
import sys
import time
import traceback
from typing import Any, Callable, Dict, Optional, Tuple, Type

import psutil

from ray_adapter import gaps
from ray_adapter.ray._common.test_utils import (DEFAULT_DRIVER_TIMEOUT_SECONDS,
                                                KILLED_DRIVER_DRAIN_TIMEOUT_SECONDS,
                                                MetricSamplePattern, PrometheusTimeseries,
                                                _communicate, _decode, wait_for_condition)
from ray_adapter.ray.util.queue import Empty, Queue
from ray_adapter.ray.util.state import get_actor, list_actors

EXE_SUFFIX = ".exe" if sys.platform == "win32" else ""
#: The directory of the ``ray`` package being served (the adapter's proxy package).
RAY_PATH = os.path.abspath(os.path.dirname(os.path.dirname(__file__)))

# Ray's gcs_pb2.ActorTableData.ActorState numbers, in order.
_ACTOR_STATES = ("DEPENDENCIES_UNREADY", "PENDING_CREATION", "ALIVE", "RESTARTING", "DEAD")


def _ray():
    from ray_adapter import ray

    return ray


def _pid_alive(pid: int) -> bool:
    """True while process ``pid`` exists and is not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_for_pid_to_exit(pid: int, timeout: float = 20):
    """Return once process ``pid`` is gone (or a zombie); ``TimeoutError`` after ``timeout``
    seconds. Mirrors Ray's helper."""
    try:
        process = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    try:
        process.wait(timeout=timeout)  # reaps it when it is our child, else polls for us
    except psutil.TimeoutExpired:
        if _pid_alive(pid):
            raise TimeoutError(f"Timed out while waiting for process {pid} to exit.") from None


def wait_for_children_of_pid(pid, num_children=1, timeout=20):
    """Return once process ``pid`` has at least ``num_children`` direct children;
    ``TimeoutError`` naming how many started after ``timeout`` seconds."""
    process = psutil.Process(pid)
    deadline = time.monotonic() + timeout
    while True:
        alive = process.children(recursive=False)
        if len(alive) >= num_children:
            return
        if time.monotonic() >= deadline:
            raise TimeoutError(f"Timed out while waiting for process {pid} children to start "
                               f"({len(alive)}/{num_children} started: {alive}).")
        time.sleep(0.1)


def wait_for_children_of_pid_to_exit(pid, timeout=20):
    """Return once the current direct children of ``pid`` have exited; ``TimeoutError``
    naming the ones still alive after ``timeout`` seconds."""
    children = psutil.Process(pid).children()
    if not children:
        return
    _, alive = psutil.wait_procs(children, timeout=timeout)
    if alive:
        raise TimeoutError("Timed out while waiting for process children to exit. "
                           f"Children still alive: {[p.name() for p in alive]}.")


def kill_process_by_name(name, SIGKILL=False):  # noqa: N803 - Ray's parameter name
    """SIGTERM (``SIGKILL=True``: SIGKILL) every process of this machine named ``name``."""
    for process in psutil.process_iter(attrs=["name"]):
        if process.info["name"] == name + EXE_SUFFIX:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill() if SIGKILL else process.terminate()


def run_string_as_driver_stdout_stderr(driver_script: str, env: Dict = None,
                                       encode: str = "utf-8",
                                       timeout: Optional[float] = DEFAULT_DRIVER_TIMEOUT_SECONDS
                                       ) -> Tuple[str, str]:
    """Run ``driver_script`` in a new interpreter (``sys.executable -``) and return its
    ``(stdout, stderr)`` decoded with ``encode``. ``env`` replaces the environment (None:
    inherit). Raises ``subprocess.CalledProcessError`` (``output``/``stderr`` the decoded
    streams, also printed here) on a non-zero exit and ``subprocess.TimeoutExpired`` after
    killing a driver that outlives ``timeout`` seconds. Mirrors Ray's helper."""
    with subprocess.Popen([sys.executable, "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, env=env) as proc:
        out, err = _communicate(proc, driver_script.encode(encode), timeout, encode)
        out, err = _decode(out, encode), _decode(err, encode)
        if proc.returncode:
            print(out)
            print(err)
            raise subprocess.CalledProcessError(proc.returncode, proc.args, out, err)
        return out, err


def run_string_as_driver_nonblocking(driver_script: str, env: Dict = None):
    """Start ``driver_script`` in a new interpreter and return its ``subprocess.Popen`` at once
    (stdout and stderr are pipes the caller reads; the script is ASCII, sent on stdin, which
    is then closed, so the script's own stdin is closed too). Mirrors Ray's helper."""
    bootstrap = ("import sys; script = sys.stdin.read(); sys.stdin.close(); del sys; "
                 "exec('del script\\n' + script)")
    proc = subprocess.Popen([sys.executable, "-c", bootstrap], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    proc.stdin.write(driver_script.encode("ascii"))
    proc.stdin.close()
    return proc


def convert_actor_state(state):
    """Ray's actor-state number (``ActorTableData.ActorState``) as its name
    (``2`` -> ``"ALIVE"``); a false ``state`` gives None."""
    if not state:
        return None
    return _ACTOR_STATES[state]


def wait_for_num_actors(num_actors, state=None, timeout=10):
    """Return once the State API lists at least ``num_actors`` actors (in ``state``, a state
    number, when given); ``TimeoutError`` after ``timeout`` seconds."""
    name = convert_actor_state(state)
    filters = [("state", "=", name)] if name else None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(list_actors(filters=filters, limit=num_actors)) >= num_actors:
            return
        time.sleep(0.1)
    raise TimeoutError("Timed out while waiting for global state.")


def kill_actor_and_wait_for_failure(actor, timeout=10, retry_interval_ms=100):
    """``ray.kill(actor)`` and return once the State API shows it DEAD or restarted;
    ``RuntimeError`` after ``timeout`` seconds."""
    actor_id = actor._actor_id.hex()
    restarts = get_actor(id=actor_id).num_restarts
    _ray().kill(actor)
    deadline = time.monotonic() + timeout
    while time.monotonic() <= deadline:
        record = get_actor(id=actor_id)
        if record.state == "DEAD" or record.num_restarts > restarts:
            return
        time.sleep(retry_interval_ms / 1000.0)
    raise RuntimeError(f"It took too much time to kill an actor: {actor_id}")


def wait_for_assertion(assertion_predictor: Callable, timeout: int = 10,
                       retry_interval_ms: int = 100, raise_exceptions: bool = False,
                       **kwargs: Any):
    """Call ``assertion_predictor(**kwargs)`` until it stops raising ``AssertionError``; at the
    timeout call it once more so that its ``AssertionError`` reaches the caller. Other
    exceptions are retried (``raise_exceptions=True``: raised). Mirrors Ray's helper."""
    def holds(**kw):
        try:
            assertion_predictor(**kw)
            return True
        except AssertionError:
            return False

    try:
        wait_for_condition(holds, timeout=timeout, retry_interval_ms=retry_interval_ms,
                           raise_exceptions=raise_exceptions, **kwargs)
    except RuntimeError:
        assertion_predictor(**kwargs)


def wait_until_succeeded_without_exception(func: Callable,
                                           exceptions: Tuple[Type[BaseException], ...], *args,
                                           timeout_ms: int = 1000, retry_interval_ms: int = 100,
                                           raise_last_ex: bool = False) -> bool:
    """Call ``func(*args)`` until it returns without raising one of ``exceptions``; True then.
    After ``timeout_ms`` milliseconds return False, or (``raise_last_ex``) raise
    ``Exception("Timed out while testing, <traceback of the last one>")``. Other exceptions
    propagate. Mirrors Ray's helper."""
    start = time.monotonic()
    last = None
    while (time.monotonic() - start) * 1000 <= timeout_ms:
        try:
            func(*args)
            return True
        except exceptions as exc:
            last = exc
            time.sleep(retry_interval_ms / 1000.0)
    if raise_last_ex:
        stack = "".join(traceback.format_exception(type(last), last, last.__traceback__)) \
            if last is not None else ""
        raise Exception(f"Timed out while testing, {stack}")
    return False


def recursive_fnmatch(dirpath, pattern):
    """Paths of the files under ``dirpath`` (recursively) whose name matches ``pattern``."""
    return [os.path.join(root, name) for root, _, files in os.walk(dirpath)
            for name in fnmatch.filter(files, pattern)]


def generate_system_config_map(**kwargs):
    """``{"_system_config": kwargs}``, the ``ray.init`` keyword a test passes on."""
    return {"_system_config": kwargs}


def same_elements(elems_a, elems_b) -> bool:
    """True when each element of either iterable is in the other (elements need not be
    hashable; multiplicity is ignored)."""
    a, b = list(elems_a), list(elems_b)
    return all(x in b for x in a) and all(x in a for x in b)


_put_task = None


def put_object(obj, use_ray_put):
    """An ``ObjectRef`` to ``obj``: from ``ray.put`` (``use_ray_put``) or returned by a task."""
    global _put_task
    ray = _ray()
    if use_ray_put:
        return ray.put(obj)
    if _put_task is None:
        def _put(value):
            return value

        _put_task = ray.remote(_put)
    return _put_task.remote(obj)


def wait_until_server_available(address, timeout_ms=5000, retry_interval_ms=100) -> bool:
    """True once a TCP connection to ``address`` (``"host:port"``) succeeds; False after
    ``timeout_ms`` milliseconds."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    deadline = time.monotonic() + timeout_ms / 1000.0
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=1):
                return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(retry_interval_ms / 1000.0)


def get_other_nodes(cluster, exclude_head=False):
    """The nodes of ``cluster`` (a ``ray.cluster_utils.Cluster``) other than the driver's node;
    without the head too when ``exclude_head``."""
    own = _ray().get_runtime_context().get_node_id()
    return [node for node in cluster.list_all_nodes()
            if node.node_id != own and not (exclude_head and node.head)]


def get_non_head_nodes(cluster):
    """The nodes of ``cluster`` that are not its head."""
    return [node for node in cluster.list_all_nodes() if node.head is False]


def client_test_enabled() -> bool:
    """Whether the suite runs over Ray Client; the adapter has no Ray Client: False."""
    return False


def object_memory_usage() -> int:
    """Bytes of object-store memory in use (``object_store_memory`` of
    ``ray.cluster_resources()`` minus that of ``ray.available_resources()``)."""
    ray = _ray()
    total = ray.cluster_resources().get("object_store_memory", 0)
    free = ray.available_resources().get("object_store_memory", 0)
    return total - free


def external_redis_test_enabled() -> bool:
    """True when the suite runs against an external Redis (``TEST_EXTERNAL_REDIS=1``)."""
    return os.environ.get("TEST_EXTERNAL_REDIS") == "1"


def rocksdb_gcs_test_enabled() -> bool:
    """True when the suite runs with a RocksDB GCS (``TEST_GCS_ROCKSDB=1``)."""
    return os.environ.get("TEST_GCS_ROCKSDB") == "1"


def sandbox_test_enabled() -> bool:
    """True when the suite runs its sandboxing tests (``TEST_SANDBOX=1``)."""
    return os.environ.get("TEST_SANDBOX") == "1"


def persistent_gcs_test_enabled() -> bool:
    """True when either persistent-GCS mode above is on."""
    return external_redis_test_enabled() or rocksdb_gcs_test_enabled()


def redis_replicas() -> int:
    """``TEST_EXTERNAL_REDIS_REPLICAS`` (default 1)."""
    return int(os.environ.get("TEST_EXTERNAL_REDIS_REPLICAS", "1"))


def redis_sentinel_replicas() -> int:
    """``TEST_EXTERNAL_REDIS_SENTINEL_REPLICAS`` (default 2)."""
    return int(os.environ.get("TEST_EXTERNAL_REDIS_SENTINEL_REPLICAS", "2"))


def get_gpu_visible_devices_env_var() -> Optional[str]:
    """The name of the variable that lists the visible GPUs of this node's GPU family: the
    adapter's GPUs are CUDA devices, so ``"CUDA_VISIBLE_DEVICES"``."""
    return "CUDA_VISIBLE_DEVICES"


def format_web_url(url):
    """``url`` as an http URL: ``localhost`` becomes ``http://127.0.0.1``, and ``http://`` is
    put in front when it is missing."""
    url = url.replace("localhost", "http://127.0.0.1")
    return url if url.startswith("http://") else "http://" + url


def is_placement_group_removed(pg) -> bool:
    """True when ``ray.util.placement_group_table(pg)`` says ``"state": "REMOVED"``."""
    return _ray().util.placement_group_table(pg).get("state") == "REMOVED"


def placement_group_assert_no_leak(pgs_created):
    """Remove every group of ``pgs_created``, wait until every group of the table is REMOVED,
    then until every resource but memory and object-store memory is all available again and
    no placement-group resource is left (``wait_for_condition``'s ``RuntimeError``
    otherwise)."""
    ray = _ray()
    for pg in pgs_created:
        ray.util.remove_placement_group(pg)
    wait_for_condition(lambda: all(entry["state"] == "REMOVED"
                                   for entry in ray.util.placement_group_table().values()))
    total = {key: value for key, value in ray.cluster_resources().items()
             if key not in ("memory", "object_store_memory")}

    def recovered():
        free = ray.available_resources()
        return all(key not in total or total[key] == value for key, value in free.items()) \
            and not any("_group_" in key for key in free)

    wait_for_condition(recovered)


@contextlib.contextmanager
def chdir(d: str):
    """Run the ``with`` block in directory ``d``, then return to the previous one."""
    old = os.getcwd()
    os.chdir(d)
    try:
        yield
    finally:
        os.chdir(old)


def get_actor_node_id(actor_handle) -> str:
    """The hex node id of the node the actor runs on (asked of the actor itself)."""
    return _ray().get(actor_handle.__ray_call__.remote(
        lambda self: _ray().get_runtime_context().get_node_id()))


def get_current_unused_port() -> int:
    """A TCP port of localhost that is free at the time of the call."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("localhost", 0))
        return sock.getsockname()[1]


class BatchQueue(Queue):
    """A ``ray.util.queue.Queue`` with ``get_batch``. Ray's test helper."""

    def get_batch(self, batch_size=None, total_timeout=None, first_timeout=None):
        """The next items, in order: waits ``first_timeout`` seconds (None: for ever) for the
        first, else raises ``Empty``; then takes up to ``batch_size`` in all (None: whatever
        arrives), waiting for each at most what is left of ``total_timeout`` seconds (None
        with a ``batch_size``: for ever; None without one: no wait)."""
        start = time.monotonic()
        batch = [self.get(block=True, timeout=first_timeout)]
        if batch_size is None and total_timeout is None:
            total_timeout = 0
        while batch_size is None or len(batch) < batch_size:
            left = None if total_timeout is None else \
                max(total_timeout - (time.monotonic() - start), 0)
            try:
                batch.append(self.get_nowait() if left == 0 else
                             self.get(block=True, timeout=left))
            except Empty:
                break
        return batch


def get_or_create_event_loop():
    """The running event loop, else this thread's loop, made and set when there is none or it
    is closed (Ray's ``ray._common.utils.get_or_create_event_loop``, re-exported here)."""
    import asyncio

    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        pass
    policy = asyncio.get_event_loop_policy()
    try:
        loop = policy.get_event_loop()
        if not loop.is_closed():
            return loop
    except RuntimeError:
        pass
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    return loop


__getattr__ = gaps.module_getattr("ray._private.test_utils")
