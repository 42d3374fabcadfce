"""The compat matrix is the one source of truth: these tests fail when it and the code disagree."""
import importlib
import importlib.util
import inspect
import json
import os
import subprocess
import types

import pytest

from ray_adapter import gaps, matrix
from ray_adapter.ray._private import options as options_module

from conftest import REPO

MODULES = sorted(matrix.modules())
PROXY = "ray_adapter.ray"


def proxy_module(ray_module):
    return importlib.import_module(PROXY + ray_module[len("ray"):])


def provided(ray_module):
    return matrix.modules()[ray_module]["module_status"] != "gap"


def test_every_entry_is_well_formed():
    for module, data in matrix.modules().items():
        assert data["module_status"] in matrix.STATUSES, module
        for name, e in data["symbols"].items():
            assert e.embedded in matrix.STATUSES and e.yuanrong in matrix.STATUSES, e.qualname
            assert e.kind, e.qualname
            if "gap" in (e.embedded, e.yuanrong) or "partial" in (e.embedded, e.yuanrong):
                assert e.note.strip(), f"{e.qualname}: a gap or partial entry must say why"
    for owner in ("task", "actor", "init"):
        for name, e in matrix.options(owner).items():
            assert e.embedded in matrix.STATUSES and (e.embedded == "supported" or e.note), e.qualname


@pytest.mark.parametrize("module", MODULES)
def test_module_importability_matches_status(module):
    spec = importlib.util.find_spec(PROXY + module[len("ray"):])
    if provided(module):
        assert spec is not None, f"{module} is listed as provided but the proxy has no such module"
    else:
        assert spec is None, f"{module} is a gap in the matrix but the proxy defines it"
        err = gaps.module_gap_error(module)
        assert isinstance(err, ModuleNotFoundError) and module in str(err) and "compat_matrix" in str(err)


@pytest.mark.parametrize("module", [m for m in MODULES if provided(m)])
def test_supported_symbols_exist_and_gaps_raise(module):
    mod = proxy_module(module)
    for name, entry in matrix.symbols(module).items():
        if entry.embedded != "gap":
            value = getattr(mod, name)  # raises if the proxy lacks it
            assert value is not None, entry.qualname
        else:
            with pytest.raises(gaps.RayAdapterGapError) as info:
                getattr(mod, name)
            assert isinstance(info.value, AttributeError)
            assert entry.qualname in str(info.value) and "compat_matrix" in str(info.value)
            assert not hasattr(mod, name)


@pytest.mark.parametrize("module", [m for m in MODULES if provided(m)])
def test_every_adapter_symbol_is_in_the_matrix(module):
    mod = proxy_module(module)
    listed = matrix.symbols(module)
    for name, value in vars(mod).items():
        if name.startswith("_"):
            continue
        if isinstance(value, types.ModuleType):
            submodule = "ray" + value.__name__[len(PROXY):]
            # A submodule with a matrix file of its own is accounted for there.
            defined_here = value.__name__.startswith(mod.__name__ + ".") and submodule not in matrix.modules()
        else:
            defined_here = getattr(value, "__module__", None) == mod.__name__ and (
                inspect.isclass(value) or inspect.isfunction(value))
        if defined_here:
            assert name in listed and listed[name].available, \
                f"{module}.{name} is defined by the adapter but the matrix does not list it as provided"


def test_whole_module_gaps_are_not_provided():
    for module, entry in matrix.submodule_entries().items():
        assert entry.embedded == "gap" and entry.note, module
        assert importlib.util.find_spec(PROXY + module[len("ray"):]) is None, module


def test_option_statuses_drive_validation():
    for owner in ("task", "actor"):
        for name, entry in matrix.options(owner).items():
            if entry.embedded == "supported":
                options_module.check(owner, {name: None}, backend="embedded")
            elif entry.embedded == "gap":
                with pytest.raises(gaps.RayAdapterOptionError, match=name):
                    options_module.check(owner, {name: object()}, backend="embedded")
    with pytest.raises(ValueError, match="Invalid option keyword nope"):
        options_module.check("task", {"nope": 1}, backend="embedded")
    # Statuses are per backend: max_calls works on the embedded runtime, not on yuanrong.
    options_module.check("task", {"max_calls": 2}, backend="embedded")
    with pytest.raises(gaps.RayAdapterOptionError, match="max_calls"):
        options_module.check("task", {"max_calls": 2}, backend="yuanrong")


REFERENCE = os.environ.get("RAY_REFERENCE_PYTHON")


def ray_public(module):
    out = subprocess.run([REFERENCE, str(REPO / "tools" / "ray_public_names.py"), module],
                         capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if k != "RAY_BACKEND"})
    assert out.returncode == 0, out.stderr[-2000:]
    return set(json.loads(out.stdout)["names"])


@pytest.mark.skipif(not REFERENCE, reason="RAY_REFERENCE_PYTHON (an interpreter with real Ray) is not set")
@pytest.mark.parametrize("module", MODULES)
def test_matrix_lists_every_public_symbol_of_real_ray(module):
    extras = {n for n, spec in matrix.symbols(module).items()}
    missing = ray_public(module) - extras
    assert not missing, f"Ray's {module} has public names the matrix forgot: {sorted(missing)}"


@pytest.mark.skipif(not REFERENCE, reason="RAY_REFERENCE_PYTHON (an interpreter with real Ray) is not set")
def test_matrix_lists_every_option_of_real_ray():
    code = ("import json; from ray._common import ray_option_utils as r; "
            "print(json.dumps([sorted(r.task_options), sorted(r.actor_options)]))")
    out = subprocess.run([REFERENCE, "-c", code], capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if k != "RAY_BACKEND"})
    task, actor = json.loads(out.stdout)
    assert set(task) <= set(matrix.options("task"))
    assert set(actor) <= set(matrix.options("actor"))
