"""`ray-adapter doctor` and the interpreter-start warning for an unknown RAY_BACKEND value."""
import importlib.util
import os
import re
import subprocess
import textwrap

import pytest

from conftest import run_python
from test_cli import cli

REAL_RAY = importlib.util.find_spec("ray") is not None  # this process never has the hook


def test_doctor_flags_an_unknown_backend_value():
    out = cli("doctor", env={"RAY_BACKEND": "embedded"})
    assert out.returncode == 1
    assert "PROBLEM: RAY_BACKEND='embedded' is not a value ray-adapter knows" in out.stdout
    assert "RAY_BACKEND=yuanrong" in out.stdout and "problem(s)" in out.stdout


def test_doctor_says_whether_import_ray_can_work():
    out = cli("doctor")
    assert "RAY_BACKEND is not set" in out.stdout
    if REAL_RAY:
        assert out.returncode == 0 and "real Ray: installed" in out.stdout
    else:
        assert out.returncode == 1 and "real Ray: not installed" in out.stdout
        assert "`import ray` would fail" in out.stdout
    on = cli("doctor", env={"RAY_BACKEND": "yuanrong"})
    assert on.returncode == 0, on.stdout
    assert ("shadowed" in on.stdout) == REAL_RAY


def test_doctor_explains_why_a_backend_is_picked():
    out = cli("doctor", env={"RAY_BACKEND": "yuanrong", "RAY_ADAPTER_RUNTIME": "nonsense"})
    assert out.returncode == 1
    assert "because RAY_ADAPTER_RUNTIME='nonsense'" in out.stdout
    assert "backend 'nonsense' cannot be loaded: unknown ray-adapter backend" in out.stdout
    pytest.importorskip("yr")
    cluster = cli("doctor", env={"RAY_BACKEND": "yuanrong", "YR_SERVER_ADDRESS": "127.0.0.1:1"}, timeout=60)
    assert "because YR_SERVER_ADDRESS='127.0.0.1:1' names a Yuanrong cluster" in cluster.stdout
    assert cluster.returncode == 1 and "NOT reachable" in cluster.stdout


def test_interpreter_start_warns_once_per_process_tree():
    code = textwrap.dedent("""
        import subprocess, sys
        subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('child ran\\n')"])
    """)
    out = run_python(["-c", code], backend=False, env={"RAY_BACKEND": "embedded"})
    assert out.returncode == 0, out.stderr
    warnings = re.findall(r"ray-adapter: warning: RAY_BACKEND='embedded' is not a value", out.stderr)
    assert len(warnings) == 1 and "child ran" in out.stderr
    assert "RAY_BACKEND=yuanrong" in out.stderr
    quiet = run_python(["-c", "pass"], backend=False)
    assert "ray-adapter" not in quiet.stderr
    on = run_python(["-c", "import ray; print(ray.__name__)"])
    assert on.stdout.strip() == "ray_adapter.ray" and "warning" not in on.stderr


def test_the_warning_imports_nothing_heavy():
    out = run_python(["-X", "importtime", "-c", "pass"], backend=False, env={"RAY_BACKEND": "Embedded"})
    assert "is not a value ray-adapter knows" in out.stderr
    imported = set(re.findall(r"\|\s+([\w.]+)\s*$", out.stderr, flags=re.M))
    ours = {m for m in imported if m.startswith("ray_adapter")}
    assert ours == {"ray_adapter", "ray_adapter._boot"}, ours
    assert not imported & {"tomllib", "tomli", "ray_adapter.matrix", "ray_adapter.hook", "json", "ast"}


REFERENCE = os.environ.get("RAY_REFERENCE_PYTHON")


@pytest.mark.skipif(not REFERENCE, reason="RAY_REFERENCE_PYTHON (an interpreter with real Ray) is not set")
def test_doctor_sees_real_ray_and_says_the_adapter_shadows_it():
    purelib = subprocess.run([REFERENCE, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    env = {"PYTHONPATH": purelib}
    off = cli("doctor", env=env)
    assert "real Ray: installed (ray 2.60.0" in off.stdout and "`import ray` gives it" in off.stdout
    assert off.returncode == 0, off.stdout
    on = cli("doctor", env={**env, "RAY_BACKEND": "yuanrong"})
    assert "shadowed: with RAY_BACKEND=yuanrong `import ray` is the adapter" in on.stdout
    assert on.returncode == 0, on.stdout


def test_doctor_says_what_yr_local_cannot_preview():
    pytest.importorskip("yr")
    out = cli("doctor", env={"RAY_BACKEND": "yuanrong", "RAY_ADAPTER_RUNTIME": "yr-local"}, timeout=60)
    assert "mode: yr local mode" in out.stdout
    assert "os._exit / os.abort in a task or actor end the driver itself" in out.stdout
    assert "threads of the driver process" in out.stdout and "use the embedded runtime" in out.stdout
