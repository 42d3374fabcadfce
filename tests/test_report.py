"""`ray-adapter report`: options as entries, exit codes, split and weighted coverage, and the
generated docs/compat.md."""
import csv
import json
import os
import subprocess

import pytest

from ray_adapter import coverage, gaps, matrix, report

from conftest import REPO
from test_cli import cli

SHARED_USAGE = REPO.parent / "shared" / "reference" / "ray_symbol_usage.csv"
REFERENCE = os.environ.get("RAY_REFERENCE_PYTHON")


def symbol_cli(query, *extra):
    return cli("report", "--symbol", query, *extra)


def _expected_code(statuses):
    return 2 if "gap" in statuses else 0


@pytest.mark.parametrize("query, names", [
    ("num_cpus", ["task.num_cpus", "actor.num_cpus", "init.num_cpus"]),
    ("ray.remote.num_cpus", ["task.num_cpus", "actor.num_cpus"]),
    ("ray.init.num_cpus", ["init.num_cpus"]),
    ("actor.max_concurrency", ["actor.max_concurrency"]),
    ("task.scheduling_strategy", ["task.scheduling_strategy"]),
    ("options.task.max_calls", ["task.max_calls"]),
    ("ray.remote(accelerator_type=...)", ["task.accelerator_type", "actor.accelerator_type"]),
    ('task.scheduling_strategy="SPREAD"', ["task.scheduling_strategy"]),
    ('init.runtime_env["pip"]', ["init.runtime_env"]),
])
def test_options_are_first_class_entries(query, names):
    out = symbol_cli(query, "--format", "json")
    data = json.loads(out.stdout)
    assert [m["name"] for m in data["matches"]] == names
    statuses = [matrix.options(n.split(".")[0])[n.split(".")[1]].status("embedded") for n in names]
    assert [m["status"] for m in data["matches"]] == statuses
    assert out.returncode == data["exit_code"] == _expected_code(statuses)
    assert all(m["where"].startswith("compat_matrix/options.toml [") for m in data["matches"])
    text = symbol_cli(query)
    assert text.returncode == out.returncode and names[0] in text.stdout and "embedded: " in text.stdout


def test_symbol_exit_codes_follow_the_backend():
    gap = next(e for m in matrix.modules() for e in matrix.symbols(m).values() if e.status("embedded") == "gap")
    out = symbol_cli(gap.qualname)
    assert out.returncode == 2 and "embedded: gap" in out.stdout and "note:" in out.stdout
    assert symbol_cli("ray.get").returncode == 0
    differs = next(f"{owner}.{k}" for owner in matrix.option_sections()
                   for k, e in matrix.options(owner).items()
                   if e.status("embedded") != "gap" and e.status("yuanrong") == "gap")
    assert symbol_cli(differs).returncode == 0
    assert symbol_cli(differs, "--backend", "yuanrong").returncode == 2


def test_unknown_symbols_exit_1_with_suggestions():
    miss = symbol_cli("ray.util.placement_grup")
    assert miss.returncode == 1 and "not in the compat matrix" in miss.stdout
    assert "did you mean:" in miss.stdout and "ray.util.placement_group" in miss.stdout
    data = json.loads(symbol_cli("nothing_like_this", "--format", "json").stdout)
    assert data["found"] is False and data["exit_code"] == 1 and data["matches"] == []
    # A bare name that is both an option and a symbol's last component shows the options and
    # names the symbols.
    both = symbol_cli("placement_group")
    assert "task.placement_group" in both.stdout and "see also: ray.util.placement_group" in both.stdout


def test_option_errors_point_to_options_toml():
    err = gaps.option_gap_error("ray.remote", "accelerator_type", "Not detected.")
    assert "--symbol ray.remote.accelerator_type" in str(err)
    assert "compat_matrix/options.toml [task.accelerator_type], [actor.accelerator_type]" in str(err)
    err = gaps.option_gap_error("ray.init", "address='ray://x'", "No Ray Client.")
    assert "--symbol init.address" in str(err) and "[init.address]" in str(err)
    # The query an error names is one report --symbol resolves.
    for message in (str(err),):
        query = message.split("--symbol ", 1)[1].split("`", 1)[0]
        assert coverage.find(query)[0]


def test_coverage_is_split_into_user_facing_api_and_internals():
    for backend in matrix.BACKENDS:
        split = coverage.split_coverage(backend)
        for module, row in split.items():
            assert sum(row["public"][0].values()) + sum(row["internal"][0].values()) == \
                sum(row["all"][0].values()), module
    assert all(level in ("public", "internal") for level in matrix.api_levels().values())
    for module in matrix.modules():
        for entry in matrix.symbols(module).values():
            assert matrix.api_level(entry) in ("public", "internal"), \
                f"{entry.qualname} has no api field: run tools/update_matrix_api.py"
    out = cli("report")
    assert out.returncode == 0
    assert "User-facing API" in out.stdout and "Ray internals" in out.stdout
    assert "Weighted by real-workload use" in out.stdout and "call sites" in out.stdout
    data = json.loads(cli("report", "--format", "json").stdout)
    assert data["modules"]["ray.actor"]["symbols"]["client_mode_hook"]["api"] == "internal"
    assert data["modules"]["ray"]["symbols"]["get"]["api"] == "public"
    public = data["coverage"]["public"]["counts"]
    internal = data["coverage"]["internal"]["counts"]
    assert {k: public[k] + internal[k] for k in public} == data["coverage"]["all"]["counts"]


def test_usage_weighting_counts_every_call_site():
    with open(coverage.USAGE_CSV, newline="", encoding="utf-8") as fh:
        total = sum(int(row["nontest_total"]) for row in csv.DictReader(fh))
    for backend in matrix.BACKENDS:
        weighted = coverage.usage_weighted(backend)
        assert weighted.call_sites == total == sum(weighted.counts.values())
        share = 100.0 * (weighted.counts["supported"] + weighted.counts["partial"]) / total
        assert weighted.percent == pytest.approx(share)
        from ray_adapter.scan.classify import Classifier

        for symbol, _ in weighted.top_gaps:
            assert Classifier(backend).name(symbol).status == "gap", symbol
    assert coverage.usage_name("ray (bare module ref)") == "ray"
    assert coverage.usage_name("ray.get_runtime_context().get_node_id") == \
        "ray.runtime_context.RuntimeContext.get_node_id"


@pytest.mark.skipif(not SHARED_USAGE.exists(), reason="the project's shared/ folder is not beside the checkout")
def test_packaged_usage_csv_is_the_shared_reference():
    assert (REPO / "src" / "ray_adapter" / "compat_matrix" / "usage.csv").read_bytes() == SHARED_USAGE.read_bytes()


def test_compat_doc_is_current():
    path = REPO / "docs" / "compat.md"
    assert path.exists(), "docs/compat.md is missing: run python tools/gen_compat_doc.py"
    assert path.read_text(encoding="utf-8") == report.compat_markdown(), \
        "docs/compat.md is stale: run python tools/gen_compat_doc.py"


def test_compat_doc_lists_every_entry():
    text = report.compat_markdown()
    for module in matrix.modules():
        assert f"## `{module}`" in text
        for name in matrix.symbols(module):
            assert f"| `{name}` |" in text, f"{module}.{name}"
    for section in matrix.option_sections():
        for key in matrix.options(section):
            assert f"| `{key}` |" in text


@pytest.mark.skipif(not REFERENCE, reason="RAY_REFERENCE_PYTHON (an interpreter with real Ray) is not set")
def test_api_levels_match_rays_own_annotations():
    modules = sorted(matrix.modules())
    out = subprocess.run([REFERENCE, str(REPO / "tools" / "ray_api_levels.py"), *modules],
                         capture_output=True, text=True, timeout=300,
                         env={**{k: v for k, v in os.environ.items() if k != "RAY_BACKEND"},
                              "RAY_USAGE_STATS_ENABLED": "0"})
    assert out.returncode == 0, out.stderr[-2000:]
    levels = json.loads(out.stdout)
    wrong = [(e.qualname, matrix.api_level(e), levels[m][n]) for m in modules
             for n, e in matrix.symbols(m).items() if n in levels[m] and levels[m][n] != matrix.api_level(e)]
    assert not wrong, f"run tools/update_matrix_api.py: {wrong}"


def test_report_never_starts_a_runtime(monkeypatch, capsys):
    """Classifying names (global_worker.node.node_ip_address...) must not evaluate proxy
    properties: one of them starting the embedded runtime left a worker template behind
    that wrote a BrokenPipeError when `report -v | head -1` closed the pipe."""
    from ray_adapter import cli as cli_module
    from ray_adapter import core

    started = []

    def refuse(*args, **kwargs):  # recorded: the classifier swallows what a lookup raises
        started.append(args)
        raise AssertionError("report started a runtime")

    monkeypatch.setattr(core, "start", refuse)
    monkeypatch.setattr("sys.argv", ["ray-adapter", "report", "-v"])
    try:
        cli_module.main()
    except SystemExit as exc:
        assert exc.code in (0, 2, None)
    assert "API coverage" in capsys.readouterr().out
    # Called in-process, the CLI leaves process-wide state alone: with SIGPIPE at its default,
    # this test process would later die from a write to a dead worker's socket.
    import signal

    assert signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN
    assert not started and not core.is_started()


@pytest.mark.parametrize("backend", matrix.BACKENDS)
def test_every_gap_the_report_lists_is_known_to_report_symbol(backend):
    # `report` names the most-used gaps; `report --symbol` must answer each of them with the
    # same status (it said "not in the compat matrix" for ray.ActorHandle, a name Ray 2.60
    # does not have: Ray raises AttributeError too, so it is no gap of the adapter).
    top = coverage.usage_weighted(backend).top_gaps
    assert top
    for name, _ in top:
        text, code = report.symbol_report(name, backend)
        assert code == report.EXIT_GAP, (name, text)
        assert f"{backend}: gap" in text, (name, text)
    assert "ray.ActorHandle" not in dict(top)
    text, code = report.symbol_report("ray.ActorHandle", backend)
    assert code == report.EXIT_UNKNOWN and "raises AttributeError under Ray too" in text
