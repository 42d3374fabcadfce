"""Several drivers on one runtime: ``ray start --head``, drivers attaching to it and to a runtime
another driver's ``ray.init()`` started, what a driver owns ending with it, ``ray stop``.

Real processes only: the ``ray`` command (``ray_adapter.ray_command``, the console script),
drivers in their own interpreters with ``RAY_BACKEND=yuanrong``; each test has a registry
directory of its own (``RAY_TMPDIR``), so nothing here sees another test's runtime.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

import psutil
import pytest
import yaml

from conftest import process_alive, run_code, run_python


@pytest.fixture
def registry():
    """A private registry directory (short: socket paths have a 107-byte limit); everything a
    test started there is stopped afterwards and must leave nothing behind."""
    path = tempfile.mkdtemp(prefix="rat-")
    env = {"RAY_TMPDIR": path}
    yield env
    ray_cmd(env, "stop", "--force")
    try:
        names = os.listdir(os.path.join(path, f"ray-adapter-{os.getuid()}"))
    except FileNotFoundError:
        names = []
    shutil.rmtree(path, ignore_errors=True)
    # No record, no socket directory left (logs, job records and the ports' lock files are kept).
    assert [n for n in names if n not in ("logs", "locks") and not n.startswith("jobs-")] == []


def ray_cmd(env, *args, timeout=120):
    """Run the ``ray`` command (the console script's module) with ``args``."""
    full = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_ADAPTER_RUNTIME")}
    # This interpreter first on PATH: a head's jobs run `python ...` with it.
    full.update(env, RAY_BACKEND="yuanrong",
                PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    return subprocess.run([sys.executable, "-m", "ray_adapter.ray_command", *args], env=full,
                          capture_output=True, text=True, timeout=timeout, cwd="/")


def driver(env, code, timeout=120):
    """Run ``code`` as a driver; its stdout's last line, parsed as JSON."""
    done = run_code(textwrap.dedent(code), env=env, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


class Background:
    """A driver running ``code`` in the background; it prints ``ready`` (and maybe more) and
    then reads a line from stdin before its next step."""

    def __init__(self, env, code):
        full = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_ADAPTER_RUNTIME")}
        full.update(env, RAY_BACKEND="yuanrong")
        self.proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=full,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, cwd="/")

    def line(self):
        out = self.proc.stdout.readline()
        assert out, self.proc.stderr.read()
        return out.strip()

    def step(self):
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def finish(self, timeout=60):
        out, err = self.proc.communicate(input="go\n", timeout=timeout)
        return self.proc.returncode, out, err


def free_port():
    """A TCP port free on every address now (a head may bind it on 0.0.0.0, not only loopback)."""
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def start_head(env, *args):
    """``ray start --head ARGS``; its Jobs API on a free port unless ARGS name one (another
    suite may run at once: 8265 is not ours to take)."""
    if "--dashboard-port" not in args:
        args += ("--dashboard-port", str(free_port()))
    started = ray_cmd(env, "start", "--head", *args)
    assert started.returncode == 0, started.stderr
    assert "Ray runtime started." in started.stdout
    return started


def head_pid(env):
    path = os.path.join(env["RAY_TMPDIR"], f"ray-adapter-{os.getuid()}", "current_cluster")
    with open(path) as f:
        return json.load(f)["pid"]


def wait_until(predicate, timeout=20):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


_OWNER = """
import ray, sys
ray.init()
@ray.remote
class Registry:
    def __init__(self): self.items = {}
    def put(self, k, v): self.items[k] = v; return sorted(self.items)
@ray.remote
class Temp:
    def ping(self): return "pong"
reg = Registry.options(name="registry", namespace="shared", lifetime="detached").remote()
temp = Temp.options(name="temp", namespace="shared", num_cpus=1).remote()
mine = ray.util.placement_group([{"CPU": 1}])
kept = ray.util.placement_group([{"CPU": 1}], name="kept", lifetime="detached")
ray.get([mine.ready(), kept.ready(), temp.ping.remote(), reg.put.remote("a", 1)])
print("ready", ray.get_runtime_context().get_job_id(), flush=True)
sys.stdin.readline()
"""

_LOOK = """
import json, ray
ray.init(address="auto", namespace="shared")
from ray.util import placement_group_table
names = sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True))
try:
    temp = ray.get(ray.get_actor("temp").ping.remote(), timeout=30)
except Exception as e:
    temp = type(e).__name__
groups = sorted((g["name"], g["state"]) for g in placement_group_table().values())
items = ray.get(ray.get_actor("registry").put.remote("b", 2))
print(json.dumps({"job": ray.get_runtime_context().get_job_id(), "names": names, "temp": temp,
                  "groups": groups, "items": items, "cpu": ray.available_resources().get("CPU", 0),
                  "total": ray.cluster_resources()["CPU"],
                  "gcs": ray.get_runtime_context().gcs_address}))
"""

_TEMP_DEATH = """
import json, ray
ray.init(address="auto")
from ray.util.state import list_actors
temp, = [a for a in list_actors(detail=True, filters=[("name", "=", "temp")])]
context = temp.death_cause["actor_died_error_context"]
print(json.dumps([temp.state, context["reason"], context["error_message"], context["owner_id"]]))
"""


def temp_death(registry):
    """``[state, reason, message, owner_id]`` of the owner's non-detached actor ``temp``, as
    the State API lists it."""
    return driver(registry, _TEMP_DEATH)


def test_drivers_share_one_head_and_a_driver_ending_ends_its_job(registry):
    start_head(registry, "--num-cpus", "4")
    owner = Background(registry, _OWNER)
    assert owner.line().startswith("ready 01000000")  # the head's first job, as Ray's
    seen = driver(registry, _LOOK)
    assert seen["job"] == "02000000" and seen["gcs"] == "127.0.0.1:6379"
    assert seen["names"] == ["registry", "temp"] and seen["temp"] == "pong"
    assert seen["groups"] == [["", "CREATED"], ["kept", "CREATED"]]
    assert seen["items"] == ["a", "b"]
    assert seen["total"] == 4.0 and seen["cpu"] == 1.0  # two bundles and Temp's CPU, counted once
    code, _, err = owner.finish()
    assert code == 0, err
    # Its job ended: its actor and its placement group went; the detached ones stay.
    wait_until(lambda: driver(registry, _LOOK)["cpu"] == 3.0)
    after = driver(registry, _LOOK)
    assert after["names"] == ["registry"] and after["temp"] == "ValueError"
    assert after["groups"] == [["", "REMOVED"], ["kept", "CREATED"]]
    assert after["items"] == ["a", "b"]
    # As in Ray: it died because its owner did, which exited by choice.
    state, reason, message, owner_id = temp_death(registry)
    assert (state, reason) == ("DEAD", "OWNER_DIED")
    assert message.startswith("The actor is dead because its owner has died. Owner Id: ")
    assert owner_id == "01000000" + "ff" * 24  # its driver's worker id, which the message names
    assert f"Owner Id: {owner_id} Owner Ip address: " in message
    assert "Owner worker exit type: INTENDED_USER_EXIT" in message


_FORKS_AND_EXITS = """
import json, os, sys, ray
ray.init(address=sys.argv[1] if len(sys.argv) > 1 else None, num_cpus=None if len(sys.argv) > 1 else 2)
@ray.remote
def f(x): return x + 1
@ray.remote
class A:
    def pid(self): return os.getpid()
a = A.remote()
before = [ray.get(f.remote(1)), ray.get(a.pid.remote())]
outcomes = []
for how in ("exit", "shutdown"):
    pid = os.fork()
    if pid == 0:  # the child leaves through Python: its atexit ray.shutdown() runs
        if how == "shutdown":
            ray.shutdown()
        sys.exit(0)
    outcomes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
after = [ray.get(f.remote(1), timeout=20), ray.get(a.pid.remote(), timeout=20)]
print(json.dumps({"before": before, "after": after, "children": outcomes,
                  "initialized": ray.is_initialized()}))
"""


@pytest.mark.parametrize("attached", [False, True], ids=["own-runtime", "attached"])
def test_a_forked_child_leaving_through_python_leaves_the_drivers_runtime_alone(registry, attached):
    """A child forked from a driver that exits through Python (sys.exit, or ray.shutdown()
    first) runs the driver's atexit ``ray.shutdown()`` on its copy of the session. It used to
    end the parent's job (attached: its goodbye and shutdown went out on the shared connection)
    or stop the parent's workers (own runtime: the actor died, its calls ActorDiedError). Real
    Ray's child hangs in its gRPC teardown here; the parent's runtime must go on either way."""
    args = ()
    if attached:
        start_head(registry, "--num-cpus", "2")
        args = ("auto",)
    out = run_python(["-c", _FORKS_AND_EXITS, *args], env=registry, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["children"] == [0, 0]
    assert result["after"] == [2, result["before"][1]]  # the same actor, alive
    assert result["initialized"] is True


def test_a_sigkilled_driver_releases_what_it_owned(registry):
    start_head(registry, "--num-cpus", "4")
    owner = Background(registry, _OWNER)
    assert owner.line().startswith("ready")
    owner.proc.kill()
    owner.proc.wait()
    killed = time.monotonic()
    wait_until(lambda: driver(registry, _LOOK)["cpu"] == 3.0, timeout=10)
    assert time.monotonic() - killed < 10  # Ray: about 2 s
    after = driver(registry, _LOOK)
    assert after["names"] == ["registry"] and after["groups"][0] == ["", "REMOVED"]
    state, reason, message, _ = temp_death(registry)  # its owner crashed, Ray's words for it
    assert (state, reason) == ("DEAD", "OWNER_DIED") and "exit type: SYSTEM_ERROR" in message


def test_a_driver_started_runtime_is_attachable_and_its_end_is_an_error_not_a_hang(registry):
    owner = Background(registry, """
        import ray, sys
        ray.init(num_cpus=2)
        print("ready", ray.get_runtime_context().gcs_address, flush=True)
        sys.stdin.readline()
    """)
    assert re.fullmatch(r"ready 127\.0\.0\.1:\d+", owner.line())  # host:port, as Ray's
    guest = Background(registry, """
        import ray, sys, time
        ray.init(address="auto")
        f = ray.remote(lambda x: x + 1)
        print("ready", ray.get(f.remote(1)), ray.get_runtime_context().get_job_id(), flush=True)
        sys.stdin.readline()
        start = time.monotonic()
        try:
            ray.get(f.remote(2), timeout=60)
        except Exception as e:
            print(type(e).__name__, round(time.monotonic() - start), str(e)[:80], flush=True)
    """)
    assert guest.line() == "ready 2 02000000"
    code, _, err = owner.finish()  # the runtime goes with the driver that started it
    assert code == 0, err
    # Ray's INFO lines on the "ray" logger (stderr): a new runtime, then one joined.
    assert re.search(r"\tINFO worker\.py:\d+ -- Started a local Ray instance\.\n", err), err
    guest.step()
    kind, seconds, message = guest.line().split(" ", 2)
    assert kind == "RaySystemError" and int(seconds) < 5
    assert "the Ray runtime this driver attached to" in message
    code, _, err = guest.finish()
    assert code == 0, err
    assert re.search(r"\tINFO worker\.py:\d+ -- Connecting to existing Ray cluster at address: "
                     r"127\.0\.0\.1:\d+\.\.\.\n.*\tINFO worker\.py:\d+ -- Connected to Ray cluster\.\n",
                     err, re.S), err
    assert "Started a local" not in err


_JOBS = """
import json, os, ray._private.state
from ray.util.state import list_jobs
print(json.dumps({"jobs": [[j.job_id, str(j.type), str(j.status), j.driver_info.pid, j.end_time]
                           for j in list_jobs(detail=True)],
                  "table": [[j["JobID"], j["DriverPid"], j["IsDead"]] for j in ray._private.state.jobs()],
                  "pid": os.getpid()}), flush=True)
"""


def test_every_drivers_job_is_listed_whichever_driver_asks(registry):
    """``list_jobs()`` and Ray's job table on a runtime a driver started: its own job and each
    attached driver's, SUCCEEDED (and dead) once that driver has gone."""
    owner = Background(registry, "import ray, sys\nray.init(num_cpus=1)\nprint('ready', flush=True)\n"
                                 "sys.stdin.readline()" + _JOBS)
    assert owner.line() == "ready"
    guest = driver(registry, "import ray\nray.init(address='auto')" + _JOBS)
    own, mine = guest["jobs"]
    assert [j[:3] for j in guest["jobs"]] == [["01000000", "JobType.DRIVER", "RUNNING"],
                                              ["02000000", "JobType.DRIVER", "RUNNING"]]
    assert mine[3] == str(guest["pid"]) and own[3] != mine[3] and mine[4] == 0  # pid, end time
    assert guest["table"] == [["01000000", int(own[3]), False], ["02000000", guest["pid"], False]]
    owner.step()
    seen = json.loads(owner.line())
    assert [j[:3] for j in seen["jobs"]] == [["01000000", "JobType.DRIVER", "RUNNING"],
                                             ["02000000", "JobType.DRIVER", "SUCCEEDED"]]
    assert seen["jobs"][1][4] > 0 and seen["jobs"][0][3] == str(seen["pid"])
    assert seen["table"] == [["01000000", seen["pid"], False], ["02000000", guest["pid"], True]]
    assert owner.finish()[0] == 0


def test_the_state_api_before_init_reads_the_running_runtime_and_starts_none(registry):
    """As Ray's State API, ``ray.util.state`` in a process that never called ``ray.init()``
    starts no runtime: with none running it raises Ray's ConnectionError; with one running
    (here a driver's) it lists that runtime's actors and leaves this process unconnected."""
    look = ("import json, ray\nfrom ray.util.state import list_actors, summarize_actors\n"
            "try:\n    names = sorted(a.name for a in list_actors())\n"
            "    total = summarize_actors()['cluster']['total_actors']\n"
            "except Exception as e:\n    names, total = f'{type(e).__name__}: {e}', 0\n"
            "print(json.dumps([names, total, ray.is_initialized()]))")
    assert driver(registry, look) == [
        "ConnectionError: Could not find any running Ray instance. Please specify the one to "
        "connect to by setting the `--address` flag or `RAY_ADDRESS` environment variable.", 0, False]
    owner = Background(registry, "import ray, sys\nray.init(num_cpus=1)\n"
                                 "@ray.remote(num_cpus=0)\nclass Keeper:\n    pass\n"
                                 "k = Keeper.options(name='keeper').remote()\n"
                                 "ray.get(k.__ray_ready__.remote())\n"
                                 "print('ready', flush=True)\nsys.stdin.readline()")
    assert owner.line() == "ready"
    assert driver(registry, look) == [["keeper"], 1, False]
    # Its own connection, not the process's session: a thread reading the State API all along
    # neither breaks nor disturbs this process's own ray.init() / shutdown() cycles, and the
    # "ray" logger keeps its level (Ray's State API is an HTTP client of the cluster).
    alongside = driver(registry, """
        import json, logging, threading, ray
        from ray.util.state import list_actors
        level, stop, seen, errors = logging.getLogger("ray").level, threading.Event(), [], []
        def poll():
            while not stop.is_set():
                try:
                    seen.append(len(list_actors()))
                except Exception as e:
                    errors.append(repr(e))
        poller = threading.Thread(target=poll)
        poller.start()
        @ray.remote
        def one():
            return 1
        results = []
        for _ in range(5):
            ray.init(address="auto")  # attached to the owner's runtime, five times
            results.append(ray.get(one.remote(), timeout=60))
            ray.shutdown()
        stop.set()
        poller.join(60)
        bad = []
        for address in ("garbage", "local"):
            try:
                list_actors(address=address)
            except Exception as e:
                bad.append(type(e).__name__)
        print(json.dumps([results, errors[:3], bool(seen), logging.getLogger("ray").level == level, bad]))
    """)
    assert alongside == [[1] * 5, [], True, True, ["ValueError", "ConnectionError"]]
    assert owner.finish()[0] == 0


def test_attaching_needs_a_runtime_and_takes_no_node_options(registry):
    missing = run_code("import ray\ntry:\n    ray.init(address='auto')\nexcept ConnectionError as e:\n"
                       "    print('refused:', e)", env=registry)
    assert "refused: Could not find any running Ray instance" in missing.stdout, missing.stderr
    alone = driver(registry, "import ray, json\nray.init(num_cpus=1)\n"
                   "print(json.dumps(ray.get_runtime_context().get_job_id()))")
    assert alone == "01000000"  # no head: a runtime of its own
    start_head(registry, "--num-cpus", "2")
    refused = run_code("import ray\ntry:\n    ray.init(num_cpus=3)\nexcept ValueError as e:\n"
                       "    print('refused:', e)", env=registry)
    assert ("refused: When connecting to an existing cluster, num_cpus and num_gpus must not be "
            "provided.") in refused.stdout, refused.stderr
    local = driver(registry, "import ray, json\nray.init(address='local', num_cpus=1)\n"
                   "print(json.dumps(ray.cluster_resources()['CPU']))")
    assert local == 1.0  # 'local' starts a runtime of its own even with a head running
    # As Ray: RAY_ADDRESS names the runtime "auto" finds (a wrong one is refused, not ignored).
    named = driver(dict(registry, RAY_ADDRESS="127.0.0.1:6379"), "import ray, json\n"
                   "ray.init(address='auto')\nprint(json.dumps(ray.get_runtime_context().gcs_address))")
    assert named == "127.0.0.1:6379"
    wrong = run_code("import ray\ntry:\n    ray.init(address='auto')\nexcept ConnectionError as e:\n"
                     "    print('refused:', e)", env=dict(registry, RAY_ADDRESS="127.0.0.1:6399"))
    assert "refused: Could not find any running Ray instance at 127.0.0.1:6399" in wrong.stdout, wrong.stderr


def test_the_ray_command_starts_reports_and_stops_a_head(registry):
    # (with port flags of Ray's own processes, as NeMo-RL's ray.sub passes them: accepted)
    start_head(registry, "--num-cpus", "3", "--resources", '{"slot": 2}', "--labels", "zone=a",
               "--min-worker-port=20000", "--max-worker-port=20100", "--node-manager-port=20300",
               "--metrics-export-port=20201", "--ray-client-server-port=20305")
    pid = head_pid(registry)
    again = ray_cmd(registry, "start", "--head", "--dashboard-port", str(free_port()))
    assert again.returncode == 1 and "already running at 127.0.0.1:6379" in again.stderr
    status = ray_cmd(registry, "status")
    assert status.returncode == 0, status.stderr
    assert " 0.0/3.0 CPU" in status.stdout and " 0.0/2.0 slot" in status.stdout
    assert "Total Demands:\n (no resource demands)" in status.stdout
    driver(registry, """
        import ray, json
        ray.init()
        @ray.remote
        class Keep:
            pass
        Keep.options(name="keep", lifetime="detached", num_cpus=1).remote().__ray_ready__.remote()
        ray.get(ray.get_actor("keep").__ray_ready__.remote())
        print(json.dumps(1))
    """)
    listed = ray_cmd(registry, "list", "actors", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    actors = json.loads(listed.stdout)
    assert [(a["class_name"], a["name"], a["state"]) for a in actors] == [("Keep", "keep", "ALIVE")]
    # --detail prints YAML, as Ray's does; `ray get` one record by its id, YAML too
    detail = yaml.safe_load(ray_cmd(registry, "list", "actors", "--detail").stdout)
    assert detail[0]["actor_id"] == actors[0]["actor_id"] and detail[0]["is_detached"] is True
    got = ray_cmd(registry, "get", "actors", actors[0]["actor_id"])
    assert got.returncode == 0, got.stderr
    assert [(a["name"], a["state"]) for a in yaml.safe_load(got.stdout)] == [("keep", "ALIVE")]
    assert ray_cmd(registry, "get", "actors", "ab" * 16).stdout == (
        f"Resource with id={'ab' * 16} not found in the cluster.\n")
    assert ray_cmd(registry, "list", "placement-groups").stdout == "No resource in the cluster\n"
    summary = ray_cmd(registry, "summary", "actors")
    assert summary.returncode == 0, summary.stderr
    assert "total_actors: 1" in summary.stdout and "Table (group by class):" in summary.stdout
    assert re.search(r"Keep +ALIVE: 1", summary.stdout), summary.stdout
    tasks = ray_cmd(registry, "summary", "tasks").stdout
    assert re.search(r"keep:Keep.__init__ +FINISHED: 1 +ACTOR_CREATION_TASK", tasks), tasks  # named: Ray's name
    assert " 1.0/3.0 CPU" in ray_cmd(registry, "status").stdout
    children = psutil.Process(pid).children(recursive=True)
    assert children  # the head's worker template and workers
    stopped = ray_cmd(registry, "stop")
    assert stopped.returncode == 0 and "Stopped all 1 Ray processes." in stopped.stdout
    assert not process_alive(pid)
    wait_until(lambda: not any(process_alive(c.pid) for c in children))
    gone = ray_cmd(registry, "status")
    assert gone.returncode == 1 and "Could not find any running Ray instance" in gone.stderr
    assert "Did not find any active Ray processes." in ray_cmd(registry, "stop").stdout


def test_the_ray_command_names_what_it_does_not_provide(registry):
    up = ray_cmd(registry, "up", "cluster.yaml")
    assert up.returncode == 1 and "`ray up` is not provided: cluster launching" in up.stderr
    assert "compat matrix" in up.stderr
    memory = ray_cmd(registry, "memory")
    assert memory.returncode == 1 and "`ray memory` is not provided" in memory.stderr
    assert ray_cmd(registry, "job", "submit", "--address", "http://127.0.0.1:1").returncode == 2
    node = ray_cmd(registry, "start", "--address", "127.0.0.1:6379")
    assert node.returncode == 1 and "another node cannot join it" in node.stderr
    bare = ray_cmd(registry, "start")
    assert bare.returncode == 2
    labels = ray_cmd(registry, "start", "--head", "--labels", "nonsense", "--include-dashboard", "false")
    assert labels.returncode == 1 and "--labels takes key1=value1" in labels.stderr


def test_a_killed_head_fails_its_drivers_calls_and_ray_stop_cleans_up(registry):
    start_head(registry, "--num-cpus", "2")
    pid = head_pid(registry)
    guest = Background(registry, """
        import ray, sys, time
        ray.init()
        f = ray.remote(lambda: 1)
        print("ready", ray.get(f.remote()), flush=True)
        sys.stdin.readline()
        start = time.monotonic()
        for call in (lambda: ray.get(f.remote()), lambda: ray.put(1), ray.nodes):
            try:
                call()
            except Exception as e:
                print(type(e).__name__, round(time.monotonic() - start), flush=True)
    """)
    assert guest.line() == "ready 1"
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not process_alive(pid))
    guest.step()
    for _ in range(3):
        kind, seconds = guest.line().split()
        assert kind == "RaySystemError" and int(seconds) < 5
    assert guest.finish()[0] == 0
    assert "Did not find any active Ray processes." in ray_cmd(registry, "stop").stdout
    start_head(registry, "--num-cpus", "2")  # the port is free again
    assert driver(registry, "import ray, json\nray.init()\n"
                  "print(json.dumps(ray.get(ray.remote(lambda: 5).remote())))") == 5


def test_the_state_api_credits_an_attached_drivers_work_to_its_job(registry):
    """What an attached driver made is listed as its job's, as Ray lists it: tasks (and their
    parent, the driver's task), actor and placement group ids, objects it owns (its pid), and
    its worker id; the headless head is no driver."""
    start_head(registry, "--num-cpus", "4")
    seen = driver(registry, """
        import json, os, ray
        ray.init()
        from ray.util.state import list_actors, list_objects, list_placement_groups, list_tasks, list_workers
        @ray.remote
        def f(): return 1
        @ray.remote
        class A:
            def ping(self): return 1
        a = A.remote()
        ray.get([a.ping.remote(), f.remote()])
        pg = ray.util.placement_group([{"CPU": 1}])
        ray.get(pg.ready())
        ref = ray.put(b"x")
        print(json.dumps({
            "job": ray.get_runtime_context().get_job_id(), "pid": os.getpid(),
            "worker": ray.get_runtime_context().get_worker_id(),
            "tasks": sorted({(t.job_id, t.parent_task_id[-8:]) for t in list_tasks()}),
            "actors": [x.actor_id[-8:] for x in list_actors()],
            "groups": [g.creator_job_id for g in list_placement_groups(detail=True)],
            "objects": sorted({(o.object_id[40:48], o.pid) for o in list_objects()}),
            "drivers": [w.worker_id for w in list_workers() if w.worker_type == "DRIVER"]}))
    """)
    job = seen["job"]
    assert job == "01000000" and seen["worker"] == job + "ff" * 24  # Ray's driver worker id
    assert seen["tasks"] == [[job, job]]
    assert seen["actors"] == [job] and seen["groups"] == [job]
    # The put object, and maybe the two results just read: their release reaches the head after
    # the listing when the driver's channel is slower than the State API's.
    assert seen["objects"] == [[job, seen["pid"]]]
    assert seen["drivers"] == [seen["worker"]]


def test_an_attached_drivers_tasks_run_in_its_job_and_print_to_it(registry):
    start_head(registry, "--num-cpus", "2")
    code = """
        import json, ray, sys
        ray.init(namespace="mine")
        @ray.remote
        def f(x):
            print("task says", x)
            print("task warns", x, file=sys.stderr)
            ctx = ray.get_runtime_context()
            return ctx.get_job_id(), ctx.namespace
        @ray.remote
        class Keeper:
            def make(self):
                print("actor says hi")
                self.inner = Inner.options(name="inner").remote()  # in the job's namespace
                return ray.get_runtime_context().get_job_id()
        @ray.remote
        class Inner:
            pass
        k = Keeper.remote()
        print(json.dumps([ray.get(f.remote(1)), ray.get(k.make.remote()),
                          ray.util.list_named_actors()]))
    """
    first = run_code(textwrap.dedent(code), env=registry)
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert any(line.endswith(" task says 1") and "(f pid=" in line for line in lines), lines
    assert any(line.endswith(" actor says hi") and "(Keeper pid=" in line for line in lines), lines
    assert any(line.endswith(" task warns 1") for line in first.stderr.splitlines()), first.stderr
    assert json.loads(lines[-1]) == [["01000000", "mine"], "01000000", ["inner"]]
    second = run_code(textwrap.dedent(code), env=registry)
    assert json.loads(second.stdout.splitlines()[-1])[0] == ["02000000", "mine"]  # its own job
    quiet = run_code(textwrap.dedent(code).replace('ray.init(namespace="mine")',
                                                   'ray.init(namespace="mine", log_to_driver=False)'),
                     env=registry)
    assert "task says" not in quiet.stdout and "task warns" not in quiet.stderr


_SUBMITTER = """
import json, ray, time
ray.init()
@ray.remote
def double(x):
    return 2 * x
@ray.remote
def fan_out(n):  # a worker's own submissions, minted there
    return sum(ray.get([double.remote(i) for i in range(n)]))
@ray.remote(max_pending_calls=1)
class Bounded:
    def slow(self):
        time.sleep(0.5)
        return "done"
def second_refused(bounded):  # a bounded actor's second call is refused by .remote()
    first = bounded.slow.remote()
    try:
        bounded.slow.remote()
        refused = False
    except ray.exceptions.PendingCallsLimitExceeded:
        refused = True
    return refused, ray.get(first)
@ray.remote
class Caller:
    def call(self, bounded):  # the same from an actor
        return second_refused(bounded)
refs = [double.remote(i) for i in range(200)]
job = refs[0].job_id().hex()
values = ray.get(refs)
b = Bounded.remote()
print(json.dumps([values == [2 * i for i in range(200)], job, ray.get(fan_out.remote(50)),
                  second_refused(b), ray.get(Caller.remote().call.remote(b))]))
"""


def test_submissions_minted_by_drivers_and_workers(registry):
    """Attached drivers and workers mint their own task ids and send submissions without
    waiting: many at once from several processes all run, their objects are their job's, and
    a bounded actor's calls are still refused by ``.remote()`` itself."""
    start_head(registry, "--num-cpus", "2")
    drivers = [Background(registry, _SUBMITTER) for _ in range(3)]  # at once
    outputs = [d.finish(timeout=120) for d in drivers]
    for code, out, err in outputs:
        assert code == 0, err
    seen = [json.loads(out.splitlines()[-1]) for _, out, _ in outputs]
    assert sorted(s[1] for s in seen) == ["01000000", "02000000", "03000000"]
    for ok, _, fanned, from_driver, from_actor in seen:
        assert ok and fanned == sum(2 * i for i in range(50))
        assert from_driver == from_actor == [True, "done"]


def test_an_attached_drivers_unread_errors_are_reported_by_it(registry):
    """A failed task whose result the attached driver never reads is reported in that
    driver's stderr (Ray's owner reports it), not lost in the head's log."""
    start_head(registry, "--num-cpus", "2")
    done = run_code(textwrap.dedent("""
        import ray, time
        ray.init()
        @ray.remote
        def boom():
            raise ValueError("never read")
        boom.remote()
        time.sleep(2)
        print("end", flush=True)
    """), env=registry)
    assert done.returncode == 0, done.stderr
    assert "Unhandled error (suppress with 'RAY_IGNORE_UNHANDLED_ERRORS=1')" in done.stderr
    assert "ValueError: never read" in done.stderr


def test_drivers_coming_and_going_leave_nothing_growing(registry):
    start_head(registry, "--num-cpus", "2")
    head = psutil.Process(head_pid(registry))
    code = ("import ray\nray.init()\n@ray.remote\nclass A:\n    def f(self): return 1\n"
            "assert ray.get([ray.remote(lambda: 1).remote(), A.remote().f.remote()]) == [1, 1]\n")

    def footprint():
        return head.num_threads(), head.num_fds(), len(head.children(recursive=True))

    assert run_code(code, env=registry).returncode == 0
    wait_until(lambda: footprint()[2] <= 3)  # the template and prestarted workers
    before = footprint()
    for _ in range(20):
        done = run_code(code, env=registry)
        assert done.returncode == 0, done.stderr
    # Each job's workers and the reader threads of its driver and workers go with it: what is
    # left is the idle set's size (a prestarted worker may come or go), not one per driver.
    slack = (2, 4, 2)  # threads, descriptors, processes
    wait_until(lambda: all(now <= then + extra
                           for now, then, extra in zip(footprint(), before, slack)), timeout=30)


def test_a_runtime_of_another_version_is_refused_with_a_clear_error(registry):
    start_head(registry, "--num-cpus", "1")
    path = os.path.join(registry["RAY_TMPDIR"], f"ray-adapter-{os.getuid()}", "current_cluster")
    with open(path) as f:
        record = json.load(f)
    record["version"] = -1  # as a head of another ray-adapter would have written it
    with open(path, "w") as f:
        json.dump(record, f)
    refused = run_code("import ray\ntry:\n    ray.init()\nexcept RuntimeError as e:\n    print('refused:', e)",
                       env=registry)
    assert "refused: Version mismatch: the Ray runtime at 127.0.0.1:6379" in refused.stdout, refused.stderr


def test_an_attached_drivers_own_modules_reach_its_workers(registry, tmp_path):
    start_head(registry, "--num-cpus", "2")
    (tmp_path / "helpers.py").write_text(textwrap.dedent("""
        import ray

        @ray.remote
        def double(x):
            return 2 * x

        @ray.remote
        class Counter:
            def __init__(self):
                self.n = 0
            def add(self):
                self.n += 1
                return self.n
    """))
    (tmp_path / "settings.py").write_text("VALUE = 'from the driver folder'\n")
    (tmp_path / "main.py").write_text(textwrap.dedent("""
        import json, ray
        from helpers import Counter, double
        ray.init()

        @ray.remote
        def setting():
            import settings  # imported by name in the worker: from the driver's folders
            return settings.VALUE

        c = Counter.remote()
        print(json.dumps([ray.get(double.remote(21)), ray.get(c.add.remote()),
                          ray.get(setting.remote())]))
    """))
    done = run_python([str(tmp_path / "main.py")], env=registry, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [42, 1, "from the driver folder"]


def test_an_attached_drivers_callers_read_their_own_replies(registry):
    """A ``ray.get`` (any request) of an attached driver reads its reply on the calling thread
    when nobody else reads (one wake-up per round trip, not two); a future's done-callback runs
    on neither reading thread, so it may itself get (it hung before: the reader ran it and then
    waited for a reply only it could read); threads sharing the connection all get theirs."""
    start_head(registry, "--num-cpus", "2")
    out = driver(registry, """
        import concurrent.futures, json, threading, time
        import ray
        import ray_adapter.core
        ray.init(address="auto")
        role = ray_adapter.core.current()._role
        f = ray.remote(lambda x: x + 1)

        @ray.remote
        class A:
            def g(self, x):
                return x * 2

        a = A.remote()
        before = role.borrowed_frames
        values = [ray.get(f.remote(i)) for i in range(20)] + [ray.get(a.g.remote(i)) for i in range(20)]
        borrowed = role.borrowed_frames - before
        done = concurrent.futures.Future()

        def callback(future):
            try:
                done.set_result([future.result(), ray.get(a.g.remote(5), timeout=30),
                                 threading.current_thread().name])
            except BaseException as exc:
                done.set_exception(exc)

        # Registered while the task runs: the reply's dispatch runs the callback (one added to
        # a future already done runs at once on the thread that adds it, as Future's do).
        ref = ray.remote(lambda x: time.sleep(0.5) or x + 1).remote(1)
        ref.future().add_done_callback(callback)
        seen = done.result(timeout=60)
        results = {}

        def many(n):
            results[n] = [ray.get(a.g.remote(n * 100 + i)) for i in range(50)]

        threads = [threading.Thread(target=many, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        many(4)
        for t in threads:
            t.join(60)
        shutdowns = []
        for _ in range(5):  # its reader thread wakes at once (it took 5 s: a socket closed under epoll)
            start = time.monotonic()
            ray.shutdown()
            shutdowns.append(time.monotonic() - start)
            ray.init(address="auto")
            ray.get(f.remote(1))
        print(json.dumps({"values": values, "borrowed": borrowed, "callback": seen,
                          "threads": results == {n: [2 * (n * 100 + i) for i in range(50)] for n in range(5)},
                          "shutdown_s": max(shutdowns)}))
    """)
    assert out["values"] == [i + 1 for i in range(20)] + [2 * i for i in range(20)]
    # Most replies are read by their caller; the reader reads one that is in before its caller
    # borrows the role (a loaded machine: CI's 3.9 run beside 3.13 saw 28 of 40 borrowed).
    assert out["borrowed"] >= 10, out
    assert out["callback"] == [2, 10, "ray-adapter-callbacks"]
    assert out["threads"] is True
    assert out["shutdown_s"] < 2, out


def test_a_runtime_starting_removes_directories_that_ended_processes_left(registry):
    """A process killed while its runtime started or stopped leaves its socket directory and no
    record: the next runtime that starts removes it (one of a process that runs stays)."""
    root = os.path.join(registry["RAY_TMPDIR"], f"ray-adapter-{os.getuid()}")
    os.makedirs(root, mode=0o700)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    orphan = os.path.join(root, f"rt-{gone.pid}-orphan")
    live = os.path.join(root, f"rt-{os.getpid()}-live")
    for path in (orphan, live):
        os.mkdir(path, 0o700)
        open(os.path.join(path, "attach.sock"), "w").close()
    try:
        assert driver(registry, """
            import json, ray
            ray.init(num_cpus=1)
            print(json.dumps(ray.get(ray.remote(lambda: 1).remote())))
        """) == 1
        assert not os.path.exists(orphan)
        assert os.path.exists(live)
    finally:
        shutil.rmtree(live, ignore_errors=True)


def test_an_attached_drivers_listing_follows_its_own_drops(registry):
    """As in a driver of its own runtime (and Ray 2.60): ``list_objects`` right after ``del``
    no longer lists what the attached driver dropped (its queued drops reach the runtime ahead
    of the query), and its own handle to a detached actor is no ACTOR_HANDLE reference."""
    start_head(registry, "--num-cpus", "2")
    out = driver(registry, """
        import json
        import ray
        from ray.util.state import list_objects
        ray.init(address="auto")

        @ray.remote
        class A:
            def m(self):
                return 1

        def kinds():
            return sorted(o.reference_type for o in list_objects())

        seen = []
        refs = [ray.put(i) for i in range(5)] + [A.remote().m.remote() for _ in range(2)]
        ray.get(refs)
        seen.append(kinds())
        del refs
        seen.append(kinds())
        kept = A.options(name="kept", lifetime="detached").remote()
        ray.get(kept.m.remote())
        seen.append(kinds())
        a = A.remote()
        ray.get(a.m.remote())
        seen.append(kinds())
        del a
        seen.append(kinds())
        ray.kill(kept)
        print(json.dumps(seen))
    """)
    assert out == [["LOCAL_REFERENCE"] * 7, [], [], ["ACTOR_HANDLE"], []]


def test_ctrl_c_while_an_attached_driver_writes_a_call_loses_no_frame(registry):
    """The Ctrl-C storm of test_driver_reading, in an attached driver: before signals were
    deferred around writes, its connection's writer role stayed taken and the next get hung
    for good (its timeout is kept by the runtime, which never got the request)."""
    from test_driver_reading import _STORM

    start_head(registry, "--num-cpus", "2")
    code = textwrap.dedent(_STORM).replace("sys.argv[1:]", "True").replace("sys.argv[1]", '"auto"')
    done = run_code(code, env=registry, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-3:] == ["True", "True", "True"], done.stderr[-3000:]


def test_an_attached_drivers_calls_are_recorded_finished_after_it_leaves(registry):
    """A driver that leaves right after its last gets: its job's end (its actors killed, its
    unfinished tasks cancelled) must not record a call that was answered as failed, as Ray's
    State API lists them FINISHED (a driver that could return before the runtime had read its
    last answers, as one did with results sent straight from the worker, made some FAILED)."""
    start_head(registry, "--num-cpus", "2")
    code = ("import ray\nray.init()\n@ray.remote\nclass A:\n    def f(self): return 1\n"
            "f = ray.remote(lambda: 1)\n"
            "assert ray.get([f.remote(), A.remote().f.remote()]) == [1, 1]\n"
            "a = A.remote()\nassert ray.get(f.remote()) == 1 and ray.get(a.f.remote()) == 1\n")
    for _ in range(10):
        done = run_code(code, env=registry)
        assert done.returncode == 0, done.stderr
    states = driver(registry, """
        import collections, json, ray
        from ray.util.state import list_tasks
        ray.init()
        print(json.dumps(collections.Counter(
            (t.type, t.state) for t in list_tasks(limit=1000) if t.type != "DRIVER_TASK"
            and t.type != "ACTOR_CREATION_TASK").most_common()))
    """)
    assert dict((f"{kind}:{state}", n) for (kind, state), n in states) == {
        "NORMAL_TASK:FINISHED": 20, "ACTOR_TASK:FINISHED": 20}, states


def test_one_outcome_per_ref_when_the_worker_dies_right_after_answering(registry):
    """An actor killed right after a call (ray.kill: a call it answered before it died keeps
    its answer, as in Ray) or a worker that dies right after its answer leaves one outcome per
    ref, whether the driver gets it or passes it to a task."""
    start_head(registry, "--num-cpus", "2")
    out = driver(registry, """
        import collections, json, os, signal, threading, uuid
        import ray
        ray.init()

        @ray.remote
        class A:
            def g(self, x):
                return x

        @ray.remote
        def use(x):
            return x

        @ray.remote(max_retries=1)
        def dies_after():
            threading.Thread(target=lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
            return uuid.uuid4().hex

        def outcomes(ref):
            seen = []
            for how in ("get", "task", "get"):
                try:
                    seen.append(ray.get(ref if how == "get" else use.remote(ref), timeout=60))
                except ray.exceptions.RayError as e:
                    seen.append(type(e.cause if isinstance(e, ray.exceptions.RayTaskError) and e.cause
                                     is not None else e).__name__)
            return seen

        split = collections.Counter()
        for _ in range(20):
            a = A.remote()
            ray.get(a.g.remote(0))
            ref = a.g.remote(3)
            ray.kill(a)
            seen = outcomes(ref)
            split["kill" if len(set(map(str, seen))) > 1 else "kill-ok"] += 1
        for _ in range(20):
            seen = outcomes(dies_after.remote())
            split["dies" if len(set(map(str, seen))) > 1 else "dies-ok"] += 1
        print(json.dumps(split))
    """, timeout=300)
    assert out == {"kill-ok": 20, "dies-ok": 20}, out
