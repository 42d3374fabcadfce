"""`ray-adapter scan`: every import and call form resolves to the compat matrix's entry.

Expected statuses are read from the matrix (never written here), so these tests keep passing
as entries move from gap to supported; what they pin is the resolution (which entry a line
names) and the forms. test_scan_agreement.py checks the verdicts against what actually runs.
"""
import json
import os

import pytest

from ray_adapter import matrix, scan
from ray_adapter.scan import files as scan_files

from conftest import REPO

FIXTURES = REPO / "tests" / "scan_fixtures"


def findings(path, backend="embedded"):
    found, errors = scan.scan_file(str(path), backend)
    assert not errors, errors
    return found


def at(found, line, symbol, cell=None):
    hits = [f for f in found if f.line == line and f.symbol == symbol and f.cell == cell]
    assert hits, f"no finding for {symbol} on line {line}: {[(f.line, f.symbol) for f in found]}"
    return hits[0]


def symbol_status(qualname, backend="embedded"):
    module, _, name = qualname.rpartition(".")
    entry = matrix.lookup(module, name) or matrix.module_entry(qualname)
    assert entry is not None, qualname
    return entry.status(backend)


def option_status(qualname, backend="embedded"):
    section, _, key = qualname.partition(".")
    return matrix.options(section)[key].status(backend)


def test_aliases_and_submodule_imports():
    found = findings(FIXTURES / "aliases.py")
    expected = [  # (line, symbol the line names)
        (2, "ray"), (3, "ray.util.queue"), (4, "ray.serve"), (5, "ray.exceptions"),
        (6, "ray.util.ActorPool"), (7, "ray.util.placement_group"), (10, "ray.init"),
        (11, "ray.util.ActorPool"), (12, "ray.util.placement_group"), (13, "ray.util.queue.Queue"),
        (14, "ray.util.get_node_ip_address"), (15, "ray.util.placement_group.PlacementGroup"),
        (16, "ray.exceptions.RayTaskError"), (17, "ray.get"), (18, "ray.get"), (20, "ray.serve"),
    ]
    for line, symbol in expected:
        assert at(found, line, symbol).status == symbol_status(symbol), (line, symbol)
    # Ray internals: ray._private.services has a data file (get_node_ip_address served, the
    # rest gaps saying what to use), reached through ray._private, which has none.
    assert at(found, 8, "ray._private.services").status == "supported"
    assert at(found, 19, "ray._private.services.get_node_ip_address").status == "supported"
    from ray_adapter.scan.classify import Classifier

    launch = Classifier().name("ray._private.services.get_node_instance_id")
    assert launch.status == "gap" and "ray.nodes()" in launch.reason
    # A Ray internal the matrix does not list: provided by the adapter -> unknown; not -> gap.
    internal = Classifier().name("ray._private.profiling")
    assert internal.status == "unknown" and "not in the compat matrix" in internal.reason
    missing = Classifier().name("ray._private.gcs_utils.GcsClient")
    assert missing.status == "gap" and "does not provide it" in missing.reason
    # A Ray-internal module the matrix lists as a gap answers with its own reason.
    node = Classifier().name("ray._private.node.Node")
    assert node.status == "gap" and "not provided" in node.reason
    # `r = ray_like` rebinds the alias: nothing after it is Ray.
    assert not [f for f in found if f.line >= 23]


def test_star_imports_bind_the_modules_names():
    found = findings(FIXTURES / "star.py")
    assert at(found, 2, "ray.util.placement_group").kind == "module"
    for line, symbol in [(5, "ray.util.placement_group.placement_group"),
                         (6, "ray.util.placement_group.remove_placement_group"),
                         (9, "ray.exceptions.RayTaskError")]:
        assert at(found, line, symbol).status == symbol_status(symbol)


def test_decorator_call_and_option_forms():
    found = findings(FIXTURES / "forms.py")
    lines = {(f.line, f.symbol) for f in found}
    # @ray.remote bare, @ray.remote(...), ray.remote(Cls), ray.remote(f), ray.remote(**o)(f)
    assert {(6, "ray.remote"), (11, "ray.remote"), (16, "ray.remote"), (32, "ray.remote"),
            (33, "ray.remote"), (34, "ray.remote"), (35, "ray.remote")} <= lines
    for line, option in [(11, "task.num_cpus"), (11, "task.max_calls"), (16, "actor.max_concurrency"),
                         (31, "task.num_gpus"), (36, "actor.max_restarts"), (38, "actor.name"),
                         (38, "actor.namespace"), (40, "task.num_cpus"), (42, "task.num_gpus"),
                         (44, "init.num_cpus")]:
        assert at(found, line, option).status == option_status(option), (line, option)
    # A function is a task, a class an actor, wherever ray.remote is applied.
    assert at(found, 31, "task.accelerator_type").detail == "='A100'"   # **opts of ray.remote(**opts)(f)
    assert at(found, 36, "actor.max_restarts").detail == "=2"           # ray.remote(**dict(...))(Plain)
    # String and literal values are judged as values: SPREAD is fully supported.
    spread = at(found, 11, "task.scheduling_strategy")
    assert spread.detail == "='SPREAD'" and spread.status == "supported"
    # A strategy object is not a literal: the option's own status, and the class is a use too.
    assert at(found, 40, "task.scheduling_strategy").status == option_status("task.scheduling_strategy")
    pg = "ray.util.scheduling_strategies.PlacementGroupSchedulingStrategy"
    assert at(found, 40, pg).status == symbol_status(pg)
    # .options(...) on a remote function this module did not define, followed by .remote().
    assert at(found, 42, "task.num_gpus").status == option_status("task.num_gpus")
    # **name of something that is not a dict literal cannot be checked: unknown, never silent.
    assert at(found, 41, "task.**").status == "unknown"
    # A keyword Ray does not know is unknown, and says that Ray rejects it too.
    typo = at(found, 43, "task.num_cpu")
    assert typo.status == "unknown" and "Ray rejects it too" in typo.reason
    # ray.init: the positional address, and runtime_env split per key.
    assert at(found, 44, "init.address").detail == "='auto'"
    keys = {f.detail: f for f in found if f.symbol == "init.runtime_env"}
    assert set(keys) == {'["env_vars"]', '["pip"]'}
    assert keys['["env_vars"]'].status == "supported"
    assert keys['["pip"]'].status in ("gap", "partial", "supported")
    # @ray.method(...) is a use of ray.method; its keywords have entries only if options.toml
    # has a `method` section.
    assert at(found, 18, "ray.method").status == symbol_status("ray.method")
    method_keys = [f for f in found if f.symbol.startswith("method.")]
    assert bool(method_keys) == ("method" in matrix.option_sections())
    # ray.init's own address check: Ray Client addresses are a gap, with ray.init's reason.
    client = at(found, 47, "init.address")
    assert client.status == "gap" and "Ray Client" in client.reason and "--symbol init.address" in client.reason
    # A loop variable named ray rebinds the name: the body is not Ray.
    assert not [f for f in found if f.line == 49]
    # Findings come in source order.
    assert found == sorted(found, key=lambda f: (f.line, f.column))


def test_columns_are_characters_and_one_based(tmp_path):
    src = tmp_path / "wide.py"
    src.write_text("# -*- coding: utf-8 -*-\nimport ray\nx = ('é', ray.get)\n", encoding="utf-8")
    found = findings(src)
    assert at(found, 3, "ray.get").column == 11 and at(found, 2, "ray").column == 8


def test_notebook_cells_share_a_namespace_and_magics_are_skipped():
    found = findings(FIXTURES / "notebook.ipynb")
    assert {f.cell for f in found} == {2, 4}        # markdown (1) and %%bash (3) cells are not code
    assert at(found, 3, "ray", cell=2).column == 8  # after `%pip` and `!nvidia-smi` lines
    assert at(found, 3, "ray.put", cell=4)          # `r` bound in cell 2
    assert at(found, 6, "ray.get", cell=4)          # the statement of `%timeit r.get(refs)`
    symbol = "ray.util.placement_group"
    assert at(found, 7, symbol, cell=4).status == symbol_status(symbol)


def test_unparseable_files_are_reported_and_the_rest_still_scanned(tmp_path):
    (tmp_path / "good.py").write_text("import ray\nray.get(None)\n")
    (tmp_path / "syntax.py").write_text("import ray\ndef broken(:\n    pass\n")
    (tmp_path / "latin1_no_cookie.py").write_bytes(b"import ray\nname = '\xe9t\xe9'\n")
    (tmp_path / "latin1_cookie.py").write_bytes(b"# -*- coding: latin-1 -*-\nimport ray\nname = '\xe9t\xe9'\n")
    (tmp_path / "nul.py").write_bytes(b"import ray\x00\n")
    (tmp_path / "bad.ipynb").write_text("{not json")
    cells = [{"cell_type": "code", "source": "import ray\n"}, {"cell_type": "code", "source": "def (:\n"},
             {"cell_type": "code", "source": "ray.put(1)\n"}]
    (tmp_path / "half.ipynb").write_text(json.dumps({"nbformat": 4, "cells": cells}))
    result = scan.scan([str(tmp_path)], jobs=1)
    errors = {os.path.basename(e.path): e for e in result.errors}
    assert set(errors) == {"syntax.py", "latin1_no_cookie.py", "nul.py", "bad.ipynb", "half.ipynb"}
    assert errors["syntax.py"].line == 2 and "SyntaxError" in errors["syntax.py"].message
    assert errors["latin1_no_cookie.py"].line == 2 and "coding" in errors["latin1_no_cookie.py"].message
    assert errors["half.ipynb"].cell == 2
    scanned = {(os.path.basename(f.path), f.symbol) for f in result.findings}
    assert {("good.py", "ray.get"), ("latin1_cookie.py", "ray"), ("half.ipynb", "ray.put")} <= scanned
    assert result.exit_code() == scan.EXIT_UNPARSED


def test_gitignore_and_excludes(tmp_path):
    for rel in ("app/main.py", "app/gen/out.py", "build/x.py", "notes.ipynb", "venv/lib/ray.py",
                "app/skip_me.py", ".git/hooks/x.py", "data.txt"):
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("import ray\n" if rel.endswith(".py") else "{}")
    (tmp_path / "venv" / "pyvenv.cfg").write_text("home = /usr\n")
    (tmp_path / ".gitignore").write_text("build/\n")
    (tmp_path / "app" / ".gitignore").write_text("gen/\n")

    def rel(paths):
        return sorted(os.path.relpath(p, tmp_path) for p in paths)

    found, missing = scan_files.discover([str(tmp_path)], excludes=["skip_*.py"])
    assert rel(found) == ["app/main.py", "notes.ipynb"] and not missing
    found, _ = scan_files.discover([str(tmp_path)], use_gitignore=False)
    assert rel(found) == ["app/gen/out.py", "app/main.py", "app/skip_me.py", "build/x.py", "notes.ipynb"]
    # A file named on the command line is scanned whatever the patterns say.
    found, missing = scan_files.discover([str(tmp_path / "build" / "x.py"), str(tmp_path / "nope")],
                                         excludes=["build/"])
    assert rel(found) == ["build/x.py"] and missing == [str(tmp_path / "nope")]


def test_exit_codes_follow_fail_on(tmp_path):
    result = scan.ScanResult("embedded", findings=[])
    assert result.exit_code() == 0 and result.exit_code("partial") == 0
    partial = scan.Finding("a.py", None, 1, 1, 1, 2, "ray.cancel", "", "function", "partial", "x")
    gap = partial.__class__(**{**partial.__dict__, "status": "gap"})
    unknown = partial.__class__(**{**partial.__dict__, "status": "unknown"})
    assert scan.ScanResult("embedded", findings=[partial]).exit_code() == 0
    assert scan.ScanResult("embedded", findings=[partial]).exit_code("partial") == 1
    assert scan.ScanResult("embedded", findings=[unknown]).exit_code("partial") == 1
    assert scan.ScanResult("embedded", findings=[partial, gap]).exit_code("partial") == 2
    broken = scan.ScanResult("embedded", findings=[gap], errors=[scan.ScanError("b.py", None, 1, 1, "x")])
    assert broken.exit_code() == 3
    with pytest.raises(ValueError):
        result.exit_code("everything")


def test_backend_statuses_differ_where_the_matrix_does():
    # max_calls: supported on the embedded runtime; on yuanrong a partial entry whose only
    # supported value is 0 (no limit), so the fixture's max_calls=2 is judged a gap there.
    found = {b: at(findings(FIXTURES / "forms.py", b), 11, "task.max_calls").status for b in matrix.BACKENDS}
    assert {b: option_status("task.max_calls", b) for b in matrix.BACKENDS} == {
        "embedded": "supported", "yuanrong": "partial"}
    assert found == {"embedded": "supported", "yuanrong": "gap"}
    with pytest.raises(ValueError, match="unknown backend"):
        scan.scan([str(FIXTURES)], backend="ray")


def test_parallel_scan_matches_serial(tmp_path):
    for i in range(80):
        (tmp_path / f"m{i}.py").write_text(f"import ray\n@ray.remote(num_cpus={i % 3})\ndef f{i}(): pass\n")
    serial = scan.scan([str(tmp_path)], jobs=1)
    parallel = scan.scan([str(tmp_path)], jobs=2)  # spawned workers when this process has threads
    assert serial.findings == parallel.findings and len(serial.findings) == 80 * 3


def test_the_method_options_section_is_used(tmp_path):
    assert "method" in matrix.option_sections()
    found = findings(FIXTURES / "forms.py")
    assert at(found, 18, "method.num_returns").status == "supported"       # @ray.method(num_returns=2)
    assert at(found, 39, "method.num_returns").detail == "=1"              # a.two.options(num_returns=1)
    src = tmp_path / "m.py"
    src.write_text("import ray\nclass A:\n    @ray.method(tensor_transport='nccl')\n    def f(self): pass\n")
    assert at(findings(src), 3, "method.tensor_transport").status == "gap"
