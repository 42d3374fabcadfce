"""Ray's job submission against a ``ray start --head`` runtime: the Jobs REST API served by the
head, driven by the adapter's ``JobSubmissionClient`` and ``ray job`` command, by plain HTTP and,
where an interpreter with ``ray==2.60.0`` and its job client's packages (``requests``, ``aiohttp``,
``pydantic``; ``ray[default]`` has them) is given (``RAY_REFERENCE_PYTHON``), by real Ray's own
client and ``ray job`` CLI, unchanged.

Real processes only; each test has its own registry (``RAY_TMPDIR``) and dashboard port.
"""
import asyncio
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request

import psutil
import pytest

from conftest import process_alive
from test_attach import free_port, head_pid, ray_cmd, registry, start_head, wait_until  # noqa: F401

RAY_PYTHON = os.environ.get("RAY_REFERENCE_PYTHON")


@pytest.fixture
def head(registry):
    """A head with its Jobs API on a free port: ``(env, url)``."""
    port = free_port()
    start_head(registry, "--num-cpus", "3", "--dashboard-port", str(port))
    return registry, f"http://127.0.0.1:{port}"


@pytest.fixture
def client(head, monkeypatch):
    env, url = head
    monkeypatch.setenv("RAY_TMPDIR", env["RAY_TMPDIR"])
    from ray_adapter.ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(url)


def finished(client, submission_id, timeout=60):
    wait_until(lambda: client.get_job_status(submission_id).is_terminal(), timeout)
    return client.get_job_info(submission_id)


def sleep_command():
    """``sleep N`` with an N of this test's own (CI runs two suites at once)."""
    return f"sleep {4000 + random.random() * 1000:.6f}"


def sleepers(command):
    """The live processes whose command line is exactly ``command``."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if p.info["cmdline"] == command.split() and p.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:
            continue
    return found


def test_a_job_runs_its_driver_on_the_head_with_its_runtime_env(client, tmp_path):
    (tmp_path / "helper.py").write_text("VALUE = 7\n")
    (tmp_path / "main.py").write_text(textwrap.dedent("""
        import os, ray
        ray.init()
        @ray.remote
        def f():
            import helper  # from the job's working_dir, in a worker of the job
            return helper.VALUE, os.environ["FOO"]
        print("result", ray.get(f.remote()), ray.get_runtime_context().get_job_id())
    """))
    submission_id = client.submit_job(
        entrypoint=f"{sys.executable} main.py",
        runtime_env={"working_dir": str(tmp_path), "env_vars": {"FOO": "bar"}},
        metadata={"owner": "test"})
    assert submission_id.startswith("raysubmit_")

    async def tail():
        return "".join([chunk async for chunk in client.tail_job_logs(submission_id)])

    followed = asyncio.run(tail())
    info = client.get_job_info(submission_id)
    assert info.status == "SUCCEEDED" and info.driver_exit_code == 0, info.message
    assert "result (7, 'bar') 01000000" in followed
    assert client.get_job_logs(submission_id) == followed
    assert info.job_id == "01000000" and info.driver_info.id == "01000000"
    assert info.metadata == {"owner": "test"} and info.runtime_env["working_dir"].startswith("gcs://_ray_pkg_")
    assert info.start_time <= info.end_time
    assert [j.submission_id for j in client.list_jobs()] == [submission_id]


def test_failed_stopped_and_refused_jobs(client):
    failed = finished(client, client.submit_job(entrypoint="echo oops; exit 3"))
    assert failed.status == "FAILED" and failed.driver_exit_code == 3
    assert failed.error_type == "JOB_ENTRYPOINT_COMMAND_ERROR"
    assert failed.message.startswith("Job entrypoint command failed with exit code 3")
    assert failed.message.endswith("oops\n")

    sleep = sleep_command()
    tree = client.submit_job(entrypoint=f"{sleep} & {sleep}; echo never", submission_id="tree-job")
    assert tree == "tree-job"
    wait_until(lambda: len(sleepers(sleep)) == 2)
    assert client.stop_job(tree) is True
    stopped = finished(client, tree)
    assert stopped.status == "STOPPED" and "never" not in client.get_job_logs(tree)
    wait_until(lambda: not sleepers(sleep))  # the whole process group
    assert client.stop_job(tree) is False  # already over

    with pytest.raises(RuntimeError, match="status code 400: Job with submission_id tree-job already exists"):
        client.submit_job(entrypoint="true", submission_id="tree-job")
    with pytest.raises(RuntimeError, match="status code 404: Job nope does not exist"):
        client.get_job_info("nope")
    running = client.submit_job(entrypoint=sleep_command())
    wait_until(lambda: client.get_job_status(running) == "RUNNING")
    with pytest.raises(RuntimeError, match="non-terminal state RUNNING"):
        client.delete_job(running)
    client.stop_job(running)
    finished(client, running)
    assert client.delete_job(running) is True
    with pytest.raises(RuntimeError, match="404"):
        client.get_job_status(running)


def test_entrypoint_resources_are_reserved_while_the_job_runs(client, head):
    env, _ = head
    job = client.submit_job(entrypoint=sleep_command(), entrypoint_num_cpus=2)
    wait_until(lambda: client.get_job_status(job) == "RUNNING")
    assert " 2.0/3.0 CPU" in ray_cmd(env, "status").stdout
    waiting = client.submit_job(entrypoint="echo ran", entrypoint_num_cpus=2)  # does not fit yet
    time.sleep(0.5)
    assert client.get_job_status(waiting) == "PENDING"
    client.stop_job(job)
    assert finished(client, waiting).status == "SUCCEEDED"
    wait_until(lambda: " 0.0/3.0 CPU" in ray_cmd(env, "status").stdout)


def test_the_api_over_plain_http(head):
    _, url = head
    with urllib.request.urlopen(url + "/api/version") as r:
        version = json.load(r)
    assert version["ray_version"] == "2.60.0"
    request = urllib.request.Request(url + "/api/jobs/", method="POST",
                                     data=json.dumps({"entrypoint": "echo plain"}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request) as r:
        submitted = json.load(r)
    assert submitted["job_id"] == submitted["submission_id"]
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(url + "/api/jobs/missing")
    assert info.value.code == 404


def test_job_records_survive_a_head_restart(head):
    env, url = head
    from ray_adapter.ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(url)
    done = client.submit_job(entrypoint="echo kept")
    finished(client, done)
    driven = client.submit_job(entrypoint="python -c \"import ray; ray.init()\"")
    finished(client, driven)
    sleep = sleep_command()
    running = client.submit_job(entrypoint=sleep)
    wait_until(lambda: client.get_job_status(running) == "RUNNING" and sleepers(sleep))
    os.kill(head_pid(env), signal.SIGKILL)  # the head dies with the job running
    ray_cmd(env, "stop")  # ends what the killed head left: its job's processes too
    wait_until(lambda: not sleepers(sleep))
    start_head(env, "--num-cpus", "3", "--dashboard-port", url.rsplit(":", 1)[1])
    client = JobSubmissionClient(url)
    assert client.get_job_info(done).status == "SUCCEEDED" and client.get_job_logs(done) == "kept\n"
    lost = client.get_job_info(running)
    assert lost.status == "FAILED" and "head process that ran it ended" in lost.message
    again = client.submit_job(entrypoint="python -c \"import ray; ray.init()\"")
    finished(client, again)
    job_ids = [client.get_job_info(s).job_id for s in (done, driven, again)]
    assert job_ids == [None, "01000000", "02000000"]  # not given twice after the restart


def test_the_ray_job_command(head):
    env, url = head
    ok = ray_cmd(env, "job", "submit", "--address", url, "--runtime-env-json",
                 '{"env_vars": {"WHO": "cli"}}', "--", "bash", "-c", "echo hello $WHO")
    assert ok.returncode == 0, ok.stderr
    assert "submitted successfully" in ok.stdout and "hello cli" in ok.stdout
    assert "succeeded" in ok.stdout
    bad = ray_cmd(env, "job", "submit", "--address", "auto", "--", "bash", "-c", "exit 5")
    assert bad.returncode == 1 and "failed" in bad.stdout and "exit code 5" in bad.stdout
    listed = ray_cmd(env, "list", "jobs", "--format", "json")
    assert [j["status"] for j in json.loads(listed.stdout)] == ["SUCCEEDED", "FAILED"]
    sid = json.loads(listed.stdout)[0]["submission_id"]
    status = ray_cmd(env, "job", "status", "--address", url, sid)
    assert f"Status for job '{sid}': SUCCEEDED" in status.stdout
    assert ray_cmd(env, "job", "logs", "--address", url, sid).stdout == "hello cli\n"


def test_a_non_loopback_api_needs_a_token(registry, tmp_path):
    port = free_port()
    registry = dict(registry, HOME=str(tmp_path), RAY_AUTH_TOKEN="")  # no ~/.ray/auth_token
    refused = ray_cmd(registry, "start", "--head", "--dashboard-host", "0.0.0.0", "--dashboard-port", str(port))
    assert refused.returncode == 1 and "without a token" in refused.stderr
    env = dict(registry, RAY_AUTH_TOKEN="s3cret-token")
    start_head(env, "--dashboard-host", "0.0.0.0", "--dashboard-port", str(port))
    url = f"http://127.0.0.1:{port}"
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(url + "/api/version")
    assert info.value.code == 401 and "requires a token" in info.value.read().decode()
    wrong = urllib.request.Request(url + "/api/version", headers={"Authorization": "Bearer nope"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(wrong)
    assert info.value.code == 403
    right = urllib.request.Request(url + "/api/version", headers={"Authorization": "Bearer s3cret-token"})
    with urllib.request.urlopen(right) as r:
        assert json.load(r)["ray_version"] == "2.60.0"


def _ray_default():
    if not RAY_PYTHON:
        return "RAY_REFERENCE_PYTHON (an interpreter with ray==2.60.0 and its job client) is not set"
    probe = subprocess.run([RAY_PYTHON, "-c", "import requests, aiohttp, ray.job_submission"],
                           capture_output=True)
    return None if probe.returncode == 0 else ("the reference interpreter lacks Ray's job client "
                                               "(pip install requests aiohttp pydantic)")


_REAL_CLIENT = """
import asyncio, json, sys, time
from ray.job_submission import JobSubmissionClient, JobStatus
c = JobSubmissionClient(sys.argv[1])
sid = c.submit_job(entrypoint="python main.py", runtime_env={"working_dir": sys.argv[2],
                                                             "env_vars": {"FOO": "real"}})
async def tail():
    return "".join([chunk async for chunk in c.tail_job_logs(sid)])
logs = asyncio.run(tail())
info = c.get_job_info(sid)
long = c.submit_job(entrypoint="sleep 4246.25")
while c.get_job_status(long) != JobStatus.RUNNING:
    time.sleep(0.05)
stopped = c.stop_job(long)
while not c.get_job_status(long).is_terminal():
    time.sleep(0.05)
print(json.dumps({"logs": logs, "status": info.status.value, "job_id": info.job_id,
                  "stopped": stopped, "long": c.get_job_status(long).value,
                  "listed": len(c.list_jobs()), "deleted": c.delete_job(long)}))
"""


def test_real_rays_client_and_cli_drive_the_head_unchanged(head, tmp_path):
    why = _ray_default()
    if why:
        pytest.skip(why)
    env, url = head
    (tmp_path / "main.py").write_text(textwrap.dedent("""
        import os, ray
        ray.init()
        print("driver", ray.get(ray.remote(lambda: os.environ["FOO"]).remote()))
    """))
    ray_env = {k: v for k, v in os.environ.items() if k not in ("RAY_BACKEND", "RAY_ADDRESS")}
    ray_env.update(env, RAY_USAGE_STATS_ENABLED="0",
                   PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    done = subprocess.run([RAY_PYTHON, "-c", _REAL_CLIENT, url, str(tmp_path)], env=ray_env,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    # The job's log: its driver's output, after Ray's INFO lines of ray.init joining the head
    # (a job's log under Ray has them too).
    *joined, last = seen["logs"].splitlines()
    assert last == "driver real" and seen["status"] == "SUCCEEDED", seen["logs"]
    assert len(joined) == 2 and re.search(
        r"\tINFO worker\.py:\d+ -- Connecting to existing Ray cluster at address: 127\.0\.0\.1:\d+\.\.\.$",
        joined[0]) and joined[1].endswith(" -- Connected to Ray cluster."), seen["logs"]
    assert seen["job_id"] == "01000000" and seen["stopped"] is True and seen["long"] == "STOPPED"
    assert seen["listed"] == 2 and seen["deleted"] is True
    ray_cli = os.path.join(os.path.dirname(RAY_PYTHON), "ray")
    cli = subprocess.run([ray_cli, "job", "submit", "--address", url, "--", "bash", "-c", "echo via-cli; exit 2"],
                         env=ray_env, capture_output=True, text=True, timeout=180)
    assert cli.returncode == 1 and "via-cli" in cli.stdout + cli.stderr
    assert "failed" in cli.stdout + cli.stderr


def test_a_job_gets_a_clean_signal_mask_and_stops_gracefully(client, tmp_path):
    (tmp_path / "graceful.py").write_text(textwrap.dedent("""
        import signal, sys, time
        assert not signal.pthread_sigmask(signal.SIG_BLOCK, []), "signals blocked"
        def bye(*_):
            print("got TERM", flush=True)
            sys.exit(0)
        signal.signal(signal.SIGTERM, bye)
        print("waiting", flush=True)
        time.sleep(60)
    """))
    job = client.submit_job(entrypoint=f"{sys.executable} {tmp_path / 'graceful.py'}")
    wait_until(lambda: "waiting" in client.get_job_logs(job))
    start = time.monotonic()
    client.stop_job(job)
    info = finished(client, job)
    assert info.status == "STOPPED" and time.monotonic() - start < 3.0  # before the SIGKILL at 3 s
    assert "got TERM" in client.get_job_logs(job)


def test_what_a_job_leaves_behind_ends_with_it(client):
    sleep = sleep_command()
    job = client.submit_job(entrypoint=f"setsid {sleep} & (nohup {sleep} >/dev/null 2>&1 &); echo parent-done")
    info = finished(client, job, timeout=30)  # the escaped children hold no job open
    assert info.status == "SUCCEEDED" and client.get_job_logs(job) == "parent-done\n"
    wait_until(lambda: not sleepers(sleep))


def test_a_large_log_is_followed_in_pieces(client):
    job = client.submit_job(entrypoint=sys.executable + " -c \"import sys; sys.stdout.write('é' * 3000000)\"")

    async def tail():
        return "".join([chunk async for chunk in client.tail_job_logs(job)])

    assert asyncio.run(tail()) == "é" * 3000000  # 6 MB: over one websocket message's 4 MiB
    assert finished(client, job).status == "SUCCEEDED"


def test_bad_submissions_are_refused_at_once(client):
    for request, why in ((dict(entrypoint="true", entrypoint_resources={"CPU": -100}), "non-negative"),
                         (dict(entrypoint="true", entrypoint_num_cpus=float("nan")), "finite"),
                         (dict(entrypoint="true", submission_id="a/b"), "submission_id"),
                         (dict(entrypoint="true", runtime_env={"env_vars": {"A": 1}}), "env_vars"),
                         (dict(entrypoint="true", runtime_env={"conda": "x"}), "['conda'] are not provided"),
                         (dict(entrypoint="a\x00b"), "NUL")):
        with pytest.raises(RuntimeError, match="status code 400") as info:
            client.submit_job(**request)
        assert why in str(info.value)
    assert client.list_jobs() == []


def test_two_heads_racing_for_one_port_end_with_one(registry):
    starts = [subprocess.Popen([sys.executable, "-m", "ray_adapter.ray_command", "start", "--head",
                                "--dashboard-port", str(free_port())],
                               env={**os.environ, **registry, "RAY_BACKEND": "yuanrong"},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for _ in range(2)]
    results = [p.communicate(timeout=120) for p in starts]
    codes = sorted(p.returncode for p in starts)
    assert codes == [0, 1], results
    assert any("already running at 127.0.0.1:6379" in err for _, err in results)


def _as_nobody(*argv):
    """``argv`` run as user 65534 (``setpriv``), or None where that cannot be done here."""
    if os.getuid() != 0 or not shutil.which("setpriv") or not os.path.exists(argv[0]):
        return None
    done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv],
                          capture_output=True, text=True, timeout=60)
    return None if done.returncode == 127 or "error while loading" in done.stderr else done


def test_another_os_user_is_refused_on_loopback(head):
    _, url = head
    # The system's python3 (a venv's may live where that user cannot read).
    other = _as_nobody("/usr/bin/python3", "-c",
                       f"import urllib.request as u\ntry:\n    u.urlopen('{url}/api/version')\n"
                       "except Exception as e:\n    print(e.code)")
    if other is None:
        pytest.skip("needs root, setpriv and a python3 another user can run")
    assert other.stdout.strip() == "403", other.stderr


def test_uploaded_packages_are_what_the_runtime_would_package(client, tmp_path):
    work, module = tmp_path / "work", tmp_path / "mymod"
    work.mkdir()
    module.mkdir()
    (work / ".gitignore").write_text("ignored.txt\n")
    (work / "ignored.txt").write_text("x")
    (work / "excluded.txt").write_text("x")
    (work / "kept.txt").write_text("x")
    (module / "__init__.py").write_text("VALUE = 'from py_modules'\n")
    job = client.submit_job(
        entrypoint=sys.executable + " -c \"import os, mymod; print(sorted(os.listdir('.')), mymod.VALUE)\"",
        runtime_env={"working_dir": str(work), "py_modules": [str(module)], "excludes": ["excluded.txt"]})
    assert finished(client, job).status == "SUCCEEDED", client.get_job_logs(job)
    assert client.get_job_logs(job) == "['.gitignore', 'kept.txt'] from py_modules\n"


_STATE_DRIVER = """
import ray, sys
ray.init()
@ray.remote
class Keeper:
    def ping(self): return "pong"
keeper = Keeper.options(name="keeper").remote()
kept = [ray.put(bytes(1000)) for _ in range(3)]
group = ray.util.placement_group([{"CPU": 1}])
ray.get([keeper.ping.remote(), group.ready()])
print("ready", flush=True)
sys.stdin.readline()
"""


def _state(url, path):
    """``(status, body)`` of ``GET url/api/v0/path``."""
    try:
        with urllib.request.urlopen(f"{url}/api/v0/{path}") as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as err:
        return err.code, json.load(err)


def test_the_state_api_over_http(head):
    """The head serves Ray's State REST routes beside the Jobs API: what ``ray.util.state``
    answers in a driver, wrapped as Ray's dashboard wraps it."""
    from test_attach import Background

    env, url = head
    owner = Background(env, _STATE_DRIVER)
    try:
        assert owner.line() == "ready"
        status, body = _state(url, "actors")
        assert status == 200 and body["result"] is True and body["msg"] == ""
        listed = body["data"]["result"]
        assert listed["total"] == listed["num_filtered"] == 1 and listed["partial_failure_warning"] == ""
        actor = listed["result"][0]
        assert actor["class_name"] == "Keeper" and actor["state"] == "ALIVE" and actor["name"] == "keeper"
        assert "death_cause" not in actor  # only the listed columns, as Ray sends them
        _, body = _state(url, "actors?detail=true&filter_keys=state&filter_predicates=%3D&filter_values=alive")
        detailed = body["data"]["result"]["result"][0]
        assert detailed["is_detached"] is False and detailed["num_restarts_due_to_node_preemption"] == 0
        _, body = _state(url, "actors?filter_keys=state&filter_predicates=%21%3D&filter_values=ALIVE")
        assert body["data"]["result"]["result"] == [] and body["data"]["result"]["num_filtered"] == 0
        _, body = _state(url, "objects?limit=2")
        objects = body["data"]["result"]
        # the driver's 3 puts and its handle to the actor (Ray's ACTOR_HANDLE reference)
        assert objects["num_filtered"] == 4 and len(objects["result"]) == 2  # the limit cuts
        _, body = _state(url, "placement_groups")
        assert [g["state"] for g in body["data"]["result"]["result"]] == ["CREATED"]
        _, body = _state(url, "tasks/summarize")
        tasks = body["data"]["result"]["result"]["node_id_to_summary"]["cluster"]
        assert tasks["summary"]["Keeper.ping"]["state_counts"] == {"FINISHED": 1}
        _, body = _state(url, "objects/summarize")
        assert body["data"]["result"]["result"]["node_id_to_summary"]["cluster"]["total_objects"] == 4
        _, body = _state(url, "jobs")
        assert [(j["type"], j["status"]) for j in body["data"]["result"]["result"]] == [("DRIVER", "RUNNING")]
        status, body = _state(url, "actors?filter_keys=nonsense&filter_predicates=%3D&filter_values=1")
        assert status == 400 and body["result"] is False and "nonsense" in body["msg"]
        status, body = _state(url, "tasks?limit=10001")
        assert status == 400 and "exceeds the supported limit" in body["msg"]
        status, body = _state(url, "runtime_envs")
        assert status == 501 and "ray.util.state.list_runtime_envs is not supported" in body["msg"]
    finally:
        code, _, err = owner.finish()
    assert code == 0, err
    _, body = _state(url, "actors")  # the driver's job ended: its actor died with it
    assert [(a["state"], a["pid"] == actor["pid"]) for a in body["data"]["result"]["result"]] == [
        ("DEAD", True)]  # listed as Ray lists a dead actor: with the process it had
    _, body = _state(url, "placement_groups?filter_keys=nonsense&filter_predicates=%3D&filter_values=1")
    assert body["result"] is False and "nonsense" in body["msg"]  # refused with no records too


_REAL_STATE = """
import json, sys
from ray.util import state
url = sys.argv[1]
actors = state.list_actors(address=url, detail=True)
print(json.dumps({
    "actors": [(a.class_name, a.state, a.is_detached) for a in actors],
    "get": state.get_actor(actors[0].actor_id, address=url).name,
    "tasks": sorted({t.name for t in state.list_tasks(address=url, filters=[("state", "=", "FINISHED")])}),
    "summary": sorted(state.summarize_tasks(address=url)["cluster"]["summary"]),
    "objects": state.summarize_objects(address=url)["cluster"]["total_objects"],
    "nodes": [n.state for n in state.list_nodes(address=url)],
    "workers": sorted({w.worker_type for w in state.list_workers(address=url)}),
    "jobs": [j.type for j in state.list_jobs(address=url)],
}))
"""


def test_real_rays_state_sdk_and_cli_read_the_head(head):
    why = _ray_default()
    if why:
        pytest.skip(why)
    from test_attach import Background

    env, url = head
    ray_env = {k: v for k, v in os.environ.items() if k not in ("RAY_BACKEND", "RAY_ADDRESS")}
    ray_env.update(RAY_USAGE_STATS_ENABLED="0")
    owner = Background(env, _STATE_DRIVER)
    try:
        assert owner.line() == "ready"
        done = subprocess.run([RAY_PYTHON, "-c", _REAL_STATE, url], env=ray_env,
                              capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr
        seen = json.loads(done.stdout.strip().splitlines()[-1])
        assert seen["actors"] == [["Keeper", "ALIVE", False]] and seen["get"] == "keeper"
        assert seen["tasks"] == ["Keeper.ping", "keeper:Keeper.__init__"]  # named: Ray's name
        # objects: the driver's 3 puts and its handle to the actor (Ray's ACTOR_HANDLE reference)
        assert seen["summary"] == ["Keeper.ping", "keeper:Keeper.__init__"] and seen["objects"] == 4
        assert seen["nodes"] == ["ALIVE"] and seen["workers"] == ["DRIVER", "WORKER"]
        assert seen["jobs"] == ["DRIVER"]
        ray_cli = os.path.join(os.path.dirname(RAY_PYTHON), "ray")
        listed = subprocess.run([ray_cli, "list", "actors", "--address", url], env=ray_env,
                                capture_output=True, text=True, timeout=180)
        assert listed.returncode == 0, listed.stderr
        assert "Keeper" in listed.stdout and "ALIVE" in listed.stdout and "Total: 1" in listed.stdout
        summary = subprocess.run([ray_cli, "summary", "tasks", "--address", url], env=ray_env,
                                 capture_output=True, text=True, timeout=180)
        assert summary.returncode == 0 and "Keeper.ping" in summary.stdout, summary.stderr
    finally:
        owner.finish()
