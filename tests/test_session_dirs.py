"""A runtime_env working_dir's session directory never outlives its driver (found by an
adversarial run: a SIGKILLed driver left it in /tmp). The worker template removes it when the
driver dies; if the template died too, the next runtime started on the machine removes it."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from conftest import run_code

_DRIVER = textwrap.dedent("""
    import os, sys, time, ray
    ray.init(num_cpus=1, runtime_env={"working_dir": sys.argv[1]})

    @ray.remote
    def where():
        return os.getcwd()

    print(ray.get(where.remote(), timeout=60), flush=True)
    time.sleep(600)
""")


@pytest.fixture
def session_tmp():
    """A temporary directory of these drivers' own: another suite's runtime starting on this
    machine meanwhile (CI runs two Python versions at once) sweeps dead drivers' session
    directories in the shared one, which would remove them before the test looks."""
    import tempfile

    path = tempfile.mkdtemp(prefix="sd")
    yield path
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def _start_driver(tmp_path, session_tmp):
    work = tmp_path / "work"
    work.mkdir(parents=True)
    (work / "data.txt").write_text("x")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_BACKEND="yuanrong", RAY_ADAPTER_RUNTIME="embedded", TMPDIR=session_tmp)
    proc = subprocess.Popen([sys.executable, "-c", _DRIVER, str(work)], stdout=subprocess.PIPE,
                            text=True, env=env, cwd="/")
    cwd = proc.stdout.readline().strip()
    assert cwd and os.path.isfile(os.path.join(cwd, "data.txt")), cwd
    session = cwd
    while not os.path.basename(session).startswith("ray-adapter-session-"):
        session = os.path.dirname(session)
        assert session != "/", cwd
    return proc, session


def _gone_within(path, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not os.path.exists(path):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.timeout(120)
def test_the_template_removes_the_session_dir_of_a_killed_driver(tmp_path, session_tmp):
    proc, session = _start_driver(tmp_path, session_tmp)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert _gone_within(session, 10), os.listdir(session)
    assert not any(name.startswith("ray-adapter-making-") for name in os.listdir(os.path.dirname(session)))


@pytest.mark.timeout(180)
def test_the_next_runtime_removes_the_session_dirs_of_dead_drivers(tmp_path, session_tmp):
    proc, session = _start_driver(tmp_path, session_tmp)
    live, live_session = _start_driver(tmp_path / "other", session_tmp)  # alive throughout
    try:
        # The template goes first (as with a kill of the whole process group), then the driver.
        for child in psutil.Process(proc.pid).children():
            if "zygote" in " ".join(child.cmdline()):
                child.kill()  # SIGKILL: it cannot remove anything
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        time.sleep(0.5)
        assert os.path.isdir(session)  # nobody could remove it
        result = run_code("import ray; ray.init(num_cpus=1); ray.shutdown()",
                          env={"RAY_ADAPTER_RUNTIME": "embedded", "TMPDIR": session_tmp})
        assert result.returncode == 0, result.stderr[-2000:]
        assert not os.path.exists(session)
        assert os.path.isdir(live_session)  # a live driver's stays
    finally:
        for driver in (proc, live):
            driver.kill()
            driver.wait()
    assert _gone_within(live_session, 10)
