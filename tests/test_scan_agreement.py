"""What `ray-adapter scan` says agrees with what actually runs under the adapter.

* The project's own Ray programs (examples/, tests/programs/), which test_programs.py runs
  under both runtimes, scan without a gap or unknown use on either backend.
* Every symbol of the matrix: the scan's gap <=> the adapter's ray package raises its gap error.
* Option keywords with literal values: the scan's verdict <=> what ray.remote(...) does with
  them in a fresh interpreter (gap error, warning, Ray's own ValueError/TypeError, or nothing).
* A program that uses a gap fails when run, on the line the scan names.
"""
import json
import textwrap
from pathlib import Path

import pytest

from ray_adapter import matrix, scan

from conftest import EXAMPLES, PROGRAMS, run_code, run_python
from test_programs import YR_LOCAL_SKIPS

# (section, keyword, literal value): one keyword per section at most once, since the adapter
# warns once per (section, keyword) and process.
OPTION_CASES = [
    ("task", "scheduling_strategy", "SPREAD"),
    ("task", "num_returns", 2),
    ("task", "_generator_backpressure_num_objects", 4),
    ("task", "accelerator_type", "A100"),
    ("task", "num_cpu", 1),
    ("task", "runtime_env", {"pip": ["requests"]}),
    ("task", "max_calls", 2),
    ("task", "num_cpus", -1),
    ("task", "enable_task_events", False),
    ("task", "_metadata", {"k": "v"}),
    ("actor", "lifetime", "detached"),
    ("actor", "concurrency_groups", {"io": 2}),
    ("actor", "max_concurrency", 3),
    ("actor", "max_pending_calls", 10),
    ("actor", "allow_out_of_order_execution", True),
    ("actor", "object_store_memory", 1024),
    ("actor", "label_selector", {"zone": "a"}),
]


_MISUSE = {"misuse_errors.py", "init_refusals.py"}


@pytest.mark.parametrize("backend", matrix.BACKENDS)
def test_the_projects_own_programs_scan_clean(backend):
    result = scan.scan([str(EXAMPLES), str(PROGRAMS)], backend=backend, jobs=1)
    assert not result.errors
    # misuse_errors.py passes values Ray refuses (pip=123, num_returns=-1, ...) on purpose, and
    # init_refusals.py keywords ray.init refuses (through **kwargs): the scan cannot call those
    # supported, and says unknown; nothing else may.
    # A program test_programs does not run on yr-local (saying why) may use what the
    # yuanrong backend lacks (state_workers: list_tasks).
    not_run = set(YR_LOCAL_SKIPS) if backend == "yuanrong" else set()
    bad = [(f.path, f.line, f.symbol, f.status) for f in result.findings
           if (f.status == "gap" and Path(f.path).stem not in not_run)
           or (f.status == "unknown" and Path(f.path).name not in _MISUSE)]
    assert not bad, f"these programs run under the adapter, yet the scan says: {bad}"
    assert result.exit_code() == (2 if any(f.status == "gap" for f in result.findings) else 0)
    assert {f.path for f in result.findings} == {str(p) for p in (*EXAMPLES.glob("*.py"), *PROGRAMS.glob("*.py"))}


def _proxy_raises_gap(module, name):
    import importlib

    from ray_adapter import gaps

    proxy = importlib.import_module("ray_adapter.ray" + module[len("ray"):])
    try:
        getattr(proxy, name)
    except gaps.RayAdapterGap:
        return True
    except AttributeError:  # `from X import Y` then imports the submodule X.Y, as Python does
        importlib.import_module(proxy.__name__ + "." + name)
    return False


def test_every_matrix_symbol_is_a_gap_exactly_when_the_adapter_raises():
    lines, expected = [], {}
    for module, data in matrix.modules().items():
        if data["module_status"] == "gap":
            continue
        for name in data["symbols"]:
            lines.append(f"from {module} import {name}")
            expected[len(lines)] = (module, name)
    found, errors = scan.scan_source("\n".join(lines), backend="embedded")
    assert not errors
    by_line = {f.line: f for f in found}
    mismatches = []
    for line, (module, name) in expected.items():
        scanned_gap = by_line[line].status == "gap"
        if scanned_gap != _proxy_raises_gap(module, name):
            mismatches.append((f"{module}.{name}", by_line[line].symbol, by_line[line].status))
    assert not mismatches


def test_literal_option_values_agree_with_the_validator_at_decoration_time():
    """(runtime_env fields: at submission, where Ray sets them up.)"""
    script = textwrap.dedent(f"""
        import json, warnings
        import ray
        from ray_adapter import gaps
        out = []
        for section, key, value in {OPTION_CASES!r}:
            def f():
                pass
            class C:
                pass
            target = C if section == "actor" else f
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    decorated = ray.remote(**{{key: value}})(target)
                    if key == "runtime_env":  # as Ray, an env's fields are set up at submission
                        decorated.remote()
                verdict = "partial" if caught else "supported"
            except gaps.RayAdapterOptionError:
                verdict = "gap"
            except (ValueError, TypeError):
                verdict = "invalid"
            out.append(verdict)
        print(json.dumps(out))
    """)
    ran = run_code(script, env={"RAY_ADAPTER_WARN_PARTIAL": "1"})  # partial values warn then
    assert ran.returncode == 0, ran.stderr
    actual = json.loads(ran.stdout)
    source = ["import ray", "def f(): pass", "class C: pass"]
    for section, key, value in OPTION_CASES:
        source.append(f"ray.remote({key}={value!r})({'C' if section == 'actor' else 'f'})")
    found, _ = scan.scan_source("\n".join(source))
    scanned = []
    for i, (section, key, _) in enumerate(OPTION_CASES):
        hits = [x for x in found if x.line == 4 + i and x.symbol == f"{section}.{key}"]
        assert len(hits) == 1, (section, key, found)
        scanned.append({"unknown": "invalid"}.get(hits[0].status, hits[0].status))
    assert scanned == actual, list(zip(OPTION_CASES, scanned, actual))


def test_a_ray_client_address_is_a_gap_in_both():
    ran = run_code("import ray\nray.init(address='ray://head:10001')\n")
    assert ran.returncode != 0 and "RayAdapterOptionError" in ran.stderr
    found, _ = scan.scan_source("import ray\nray.init(address='ray://head:10001')\n")
    assert [f.status for f in found if f.symbol == "init.address"] == ["gap"]


def _gap_symbol():
    for module, data in matrix.modules().items():
        if data["module_status"] == "gap" or module != "ray":
            continue
        for name, entry in sorted(data["symbols"].items()):
            if entry.status("embedded") == "gap" and entry.kind == "function" and not name.startswith("_"):
                return f"{module}.{name}"
    return None


def test_a_program_with_a_gap_fails_where_the_scan_says(tmp_path):
    symbol = _gap_symbol()
    uses = "import ray\nray.init(num_cpus=1)\n"
    if symbol:
        uses += f"print({symbol})\n"
    uses += "import ray.data\n"  # a whole-module gap of ray.toml [modules]
    program = tmp_path / "uses_gap.py"
    program.write_text(uses)
    found, _ = scan.scan_file(str(program))
    gaps = [(f.line, f.symbol) for f in found if f.status == "gap"]
    first = gaps[0]
    assert first == ((3, symbol) if symbol else (3, "ray.data"))
    ran = run_python([str(program)], timeout=120)
    assert ran.returncode != 0
    assert f'uses_gap.py", line {first[0]}' in ran.stderr and first[1] in ran.stderr
    assert "not supported by ray-adapter" in ran.stderr
