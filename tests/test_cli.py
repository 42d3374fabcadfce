"""The ray-adapter command, run as a user runs it (a real subprocess)."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from ray_adapter import matrix

from conftest import run_python

CLI = shutil.which("ray-adapter") or os.path.join(os.path.dirname(sys.executable), "ray-adapter")


def cli(*args, env=None, timeout=60):
    full_env = {k: v for k, v in os.environ.items() if k not in ("RAY_BACKEND", "RAY_ADAPTER_RUNTIME")}
    full_env.update(env or {})
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout, env=full_env, cwd="/")


def test_report_table_lists_modules_coverage_and_module_gaps():
    out = cli("report")
    assert out.returncode == 0, out.stderr
    assert "ray.exceptions" in out.stdout and "TOTAL" in out.stdout and "%" in out.stdout
    assert "ray.serve" in out.stdout and "ray.data" in out.stdout


def test_report_json_is_complete():
    out = cli("report", "--format", "json", "--backend", "yuanrong")
    data = json.loads(out.stdout)
    assert data["backend"] == "yuanrong" and data["ray_version"] == "2.60.0"
    assert data["modules"]["ray"]["symbols"]["get"]["status"] == "supported"
    assert data["modules"]["ray"]["symbols"]["cancel"]["status"] == "partial"
    assert data["submodules"]["ray.serve"]["status"] == "gap"


def test_report_markdown():
    out = cli("report", "--format", "markdown")
    assert out.stdout.startswith("# ray-adapter") and "| module |" in out.stdout


def test_report_symbol_and_suggestions():
    out = cli("report", "--symbol", "ray.util.placement_group")
    status = matrix.lookup("ray.util", "placement_group").status("embedded")
    assert f"embedded: {status}" in out.stdout and "note:" in out.stdout
    assert out.returncode == (2 if status == "gap" else 0)
    miss = cli("report", "--symbol", "placement_groups")
    assert miss.returncode == 1 and "did you mean:" in miss.stdout and "ray.util.placement_group" in miss.stdout


def test_report_survives_a_closed_pipe():
    proc = subprocess.run(f"{CLI} report -v | head -1", shell=True, capture_output=True, text=True, timeout=60)
    assert "BrokenPipeError" not in proc.stderr


def test_run_installs_the_hook_even_without_site(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text("import ray, sys\nray.init(num_cpus=1)\n"
                      "print(ray.get(ray.remote(lambda x: x * 2).remote(21)), sys.argv[1:])\nray.shutdown()\n")
    for flags in ([], ["-S"]):
        out = cli("run", "--", sys.executable, *flags, str(script), "a", "b")
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "42 ['a', 'b']"
    mod = cli("run", "--", sys.executable, "-c", "import ray; print(ray.__name__)")
    assert mod.stdout.strip() == "ray_adapter.ray"


def test_doctor_reports_backend_selection():
    out = cli("doctor", env={"RAY_BACKEND": "yuanrong"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ray_adapter.pth" in out.stdout and "runtime backend for ray.init(): embedded" in out.stdout
    assert "(because the default" in out.stdout and "result: OK" in out.stdout
    pytest.importorskip("yr")
    local = cli("doctor", env={"RAY_BACKEND": "yuanrong", "RAY_ADAPTER_RUNTIME": "yr-local"})
    assert "yr local mode" in local.stdout and local.returncode == 0


def test_doctor_explains_an_unreachable_cluster():
    pytest.importorskip("yr")
    out = cli("doctor", "--address", "127.0.0.1:1", timeout=60)
    assert out.returncode == 1
    assert "NOT reachable" in out.stdout and "hint:" in out.stdout


def test_auto_import_fallback():
    out = run_python(["-c", "import ray_adapter.auto, ray; print(ray.__name__)"], backend=False)
    assert out.stdout.strip() == "ray_adapter.ray"
