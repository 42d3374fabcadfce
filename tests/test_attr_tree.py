"""After a bare ``import ray``, the Ray submodules reachable as attributes match Ray 2.60's.

Frameworks reach modules through attributes without importing them (verl calls
``ray._private.state.state.placement_group_table`` after ``import ray``), so which submodules
``import ray`` binds is part of Ray's surface. ``tests/fixtures/ray_attr_tree.json`` is real
Ray 2.60's tree, recorded with ``tools/ray_attr_tree.py`` (re-recorded and compared live when
``RAY_REFERENCE_PYTHON`` is set); the adapter's is taken the same way in a fresh interpreter.

Rules, for every package of Ray's tree that the adapter serves:
* a submodule Ray binds is bound here too (or reachable on first attribute access), or the
  compat matrix says it is a gap (then attribute access raises AttributeError);
* a submodule Ray does not bind is not reachable here either (AttributeError);
* a name that is something else in Ray (``ray.util.placement_group``, the function) is not the
  submodule here either.
"""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, run_python
from ray_adapter import matrix

FIXTURE = REPO / "tests" / "fixtures" / "ray_attr_tree.json"
TOOL = REPO / "tools" / "ray_attr_tree.py"
REFERENCE = os.environ.get("RAY_REFERENCE_PYTHON")
PROVIDED = ("module", "lazy")


def _adapter_tree():
    out = run_python([str(TOOL), "--probe-lazy", "--names-from", str(FIXTURE)])
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)["modules"]


def _state(entry, name):
    for state in ("module", "lazy", "other", "absent", "unprobed"):
        if name in entry[state]:
            return state
    return None


def _is_gap(qualname):
    parent, _, name = qualname.rpartition(".")
    entry = matrix.lookup(parent, name) or matrix.module_entry(qualname)
    return entry is not None and entry.status("embedded") == "gap"


def differences(ray_tree, adapter_tree):
    """Human-readable mismatches between Ray's tree and the adapter's."""
    problems = []
    for package, ray_entry in sorted(ray_tree.items()):
        if package not in adapter_tree:  # its parent's entry below says whether that is right
            continue
        ours = adapter_tree[package]
        for state in ("module", "lazy", "other", "absent", "unprobed"):
            for name in ray_entry[state]:
                qualname = f"{package}.{name}"
                got = _state(ours, name)
                if state in PROVIDED:
                    if got in PROVIDED or (got == "absent" and _is_gap(qualname)):
                        continue
                    problems.append(f"{qualname}: Ray binds the submodule; here {got} "
                                    f"(and the matrix does not call it a gap)")
                elif state == "other":
                    if got == "other" or (got == "absent" and _is_gap(qualname)):
                        continue
                    problems.append(f"{qualname}: Ray binds something other than the submodule; here {got}")
                elif got != "absent":  # Ray: AttributeError (absent, or a lazy import of a gap)
                    problems.append(f"{qualname}: not an attribute after Ray's `import ray`; here {got}")
    return problems


def test_fixture_is_ray_260():
    data = json.loads(FIXTURE.read_text())
    assert data["version"] == "2.60.0"
    assert "state" in data["modules"]["ray._private"]["module"]


def test_attribute_tree_after_bare_import_matches_ray():
    ray_tree = json.loads(FIXTURE.read_text())["modules"]
    problems = differences(ray_tree, _adapter_tree())
    assert not problems, "\n".join(problems)


def test_verl_reaches_private_state_after_bare_import():
    # verl.single_controller.ray.base: `import ray` then ray._private.state.state.placement_group_table
    out = run_python(["-c", "import ray; print(callable(ray._private.state.state.placement_group_table),"
                            " callable(ray._private.state.available_resources_per_node),"
                            " ray.util.scheduling_strategies.PlacementGroupSchedulingStrategy.__name__,"
                            " hasattr(ray.util, 'collective'), hasattr(ray, 'cloudpickle'))"])
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "True", "PlacementGroupSchedulingStrategy", "False", "True"]


def test_collective_bound_by_its_import_as_in_ray():
    out = run_python(["-c", "import ray, ray.util.collective; print(ray.util.collective.__name__.endswith('util.collective'))"])
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True"]


@pytest.mark.skipif(not REFERENCE, reason="RAY_REFERENCE_PYTHON (an interpreter with real Ray) is not set")
def test_fixture_matches_live_ray():
    out = subprocess.run([REFERENCE, str(TOOL)], capture_output=True, text=True, timeout=300, cwd="/",
                         env={k: v for k, v in os.environ.items() if k != "RAY_BACKEND"})
    assert out.returncode == 0, out.stderr[-3000:]
    live = json.loads(out.stdout)
    recorded = json.loads(FIXTURE.read_text())
    assert live == recorded, ("Ray's attribute tree differs from tests/fixtures/ray_attr_tree.json; "
                              "re-record it with tools/ray_attr_tree.py")
