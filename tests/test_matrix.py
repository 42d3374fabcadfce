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
            statuses = [e.status(b) for b in matrix.BACKENDS]
            assert all(s in matrix.STATUSES for s in statuses), e.qualname
            assert e.kind, e.qualname
            if set(statuses) != {"supported"}:
                assert e.note.strip(), f"{e.qualname}: a gap or partial entry must say why"
    for owner in matrix.option_sections():
        for name, e in matrix.options(owner).items():
            statuses = [e.status(b) for b in matrix.BACKENDS]
            assert all(s in matrix.STATUSES for s in statuses), e.qualname
            assert set(statuses) == {"supported"} or e.note, e.qualname


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
        if entry.status("embedded") != "gap":
            if entry.kind == "module":  # bound once imported, as in Ray (ray.util.collective)
                importlib.import_module(f"{mod.__name__}.{name}")
            value = getattr(mod, name)  # raises if the proxy lacks it
            # a constant may be None in Ray too (ray.cloudpickle.builtin_code_type on CPython)
            assert value is not None or (entry.kind == "constant" and name in vars(mod)), entry.qualname
        else:
            with pytest.raises(gaps.RayAdapterGapError) as info:
                getattr(mod, name)
            assert isinstance(info.value, AttributeError)
            assert entry.qualname in str(info.value) and "compat_matrix" in str(info.value)
            assert not hasattr(mod, name)
            # `from ray.x import name` keeps the gap's message (Python's `from` would drop an
            # AttributeError's for its own "cannot import name")
            with pytest.raises(gaps.RayAdapterImportGapError) as info:
                exec(f"from {mod.__name__} import {name}", {})
            assert isinstance(info.value, ImportError) and str(info.value) == str(gaps.attribute_gap_error(module, name))
            assert info.value.name == module  # Ray's module name, not the proxy's
    # a name Ray does not have either: the ImportError Python gives under Ray, naming Ray's
    # module (Python's own would name the proxy's, ray_adapter.ray...)
    with pytest.raises(ImportError, match=rf"cannot import name 'no_such_name_in_ray' from '{module}' \(") as info:
        exec(f"from {mod.__name__} import no_such_name_in_ray", {})
    assert not isinstance(info.value, gaps.RayAdapterGap) and info.value.name == module


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
            # (a class the hook published says ray.X: pytest itself may run with the hook)
            defined_here = getattr(value, "__module__", None) in (mod.__name__, module) and (
                inspect.isclass(value) or inspect.isfunction(value))
        if defined_here:
            assert name in listed and listed[name].available, \
                f"{module}.{name} is defined by the adapter but the matrix does not list it as provided"


def test_whole_module_gaps_are_not_provided():
    for module, entry in matrix.submodule_entries().items():
        assert entry.status("embedded") == "gap" and entry.note, module
        try:
            spec = importlib.util.find_spec(PROXY + module[len("ray"):])
        except ModuleNotFoundError:  # its parent is a module, not a package (ray.runtime_env.runtime_env)
            spec = None
        assert spec is None, module


def test_option_statuses_drive_validation():
    for owner in ("task", "actor"):
        for name, entry in matrix.options(owner).items():
            if entry.status("embedded") == "supported":
                options_module.check(owner, {name: None}, backend="embedded")
            elif entry.status("embedded") == "gap":
                with pytest.raises(gaps.RayAdapterOptionError, match=name):
                    options_module.check(owner, {name: object()}, backend="embedded")
    with pytest.raises(ValueError, match="Invalid option keyword nope"):
        options_module.check("task", {"nope": 1}, backend="embedded")
    # Statuses are per backend: max_calls works on the embedded runtime, not on yuanrong.
    options_module.check("task", {"max_calls": 2}, backend="embedded")
    with pytest.raises(gaps.RayAdapterOptionError, match="max_calls"):
        options_module.check("task", {"max_calls": 2}, backend="yuanrong")
    options_module.check("task", {"max_calls": 0}, backend="yuanrong")  # no limit: yr's own way


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


def test_a_third_backend_is_a_new_column(tmp_path, monkeypatch):
    import re
    import shutil

    copy = tmp_path / "compat_matrix"
    shutil.copytree(matrix.MATRIX_DIR, copy)
    with open(copy / "backends.toml", "a", encoding="utf-8") as fh:
        fh.write('\n[backends.third]\ndescription = "a backend added as data only"\n')
    for path in copy.glob("*.toml"):
        if path.name != "backends.toml":
            text = re.sub(r'(?m)^yuanrong = ("[a-z]+")$', r'yuanrong = \1\nthird = "gap"', path.read_text())
            path.write_text(text)
    caches = [matrix._backends, matrix._module_names, matrix._module_file, matrix._module,
              matrix.modules, matrix.submodule_entries, matrix._compiled, matrix._options_data,
              matrix.options, matrix.option_sections, matrix.api_levels]
    monkeypatch.setattr(matrix, "MATRIX_DIR", str(copy))
    matrix.write_compiled()  # (what tools/gen_compat_doc.py does after an edit)
    for fn in caches:
        fn.cache_clear()
    try:
        assert matrix.BACKENDS == ("embedded", "yuanrong", "third")
        assert matrix.lookup("ray", "put").status("third") == "gap"
        assert matrix.lookup("ray", "put").status("embedded") == "supported"
        with pytest.raises(gaps.RayAdapterOptionError, match="num_cpus"):
            options_module.check("task", {"num_cpus": 1}, backend="third")
        options_module.check("task", {"num_cpus": 1}, backend="embedded")
    finally:
        monkeypatch.undo()
        for fn in caches:
            fn.cache_clear()


def test_an_entry_without_a_status_for_every_backend_is_rejected():
    with pytest.raises(ValueError, match="no status for"):
        matrix._entry("ray", "x", {"kind": "function", "embedded": "supported", "note": ""})


def test_partial_values_are_judged_by_the_matrix_data():
    check = options_module.check
    check("task", {"scheduling_strategy": "SPREAD"}, backend="embedded")
    check("task", {"num_returns": 3}, backend="embedded")
    check("task", {"runtime_env": {"env_vars": {"A": "1"}, "working_dir": None}}, backend="embedded")
    check("task", {"num_returns": "streaming"}, backend="embedded")
    # partial there: yr cannot stream on a cluster
    assert "num_returns" in options_module.partial_notes("task", {"num_returns": "streaming"},
                                                         backend="yuanrong")[0]
    check("task", {"num_returns": "dynamic"}, backend="yuanrong")  # a listed value: no warning
    with pytest.raises(gaps.RayAdapterOptionError, match="runtime_env\\['pip'\\]"):
        check("task", {"runtime_env": {"pip": ["x"]}}, backend="embedded")
    entry = matrix.options("task")["scheduling_strategy"]
    assert entry.get("supported_values") == ("DEFAULT",) and entry.get("otherwise") == "warn"
    # Partial on yuanrong: strategy objects are honoured, "SPREAD" is left to yr.
    notes = options_module.partial_notes("task", {"scheduling_strategy": "SPREAD"}, backend="yuanrong")
    assert len(notes) == 1 and "scheduling_strategy" in notes[0]
    assert options_module.partial_notes("task", {"num_returns": "dynamic"}, backend="yuanrong") == []


def test_options_are_checked_again_for_the_backend_ray_init_chose(monkeypatch):
    pytest.importorskip("yr")
    import ray_adapter.ray as ray

    if ray.is_initialized():
        ray.shutdown()
    monkeypatch.delenv("RAY_ADAPTER_RUNTIME", raising=False)

    def f():
        return 1

    limited = ray.remote(max_calls=2)(f)  # fine for the embedded runtime the guess names
    monkeypatch.setenv("RAY_ADAPTER_RUNTIME", "yr-local")
    ray.init(num_cpus=1)
    try:
        with pytest.raises(gaps.RayAdapterOptionError, match="max_calls"):
            limited.remote()
    finally:
        ray.shutdown()


def test_method_options_come_from_the_matrix():
    import ray_adapter.ray as ray

    with pytest.raises(AssertionError, match="Unexpected keyword argument to @ray.method: 'bogus'"):
        ray.method(bogus=1)
    with pytest.raises(AssertionError, match="'name'"):  # an ActorMethod.options keyword only
        ray.method(name="x")
    with pytest.raises(gaps.RayAdapterOptionError, match="tensor_transport"):
        ray.method(tensor_transport="nccl")  # only the default (the object store) is provided
    annotated = ray.method(concurrency_group="io", max_task_retries=2)(lambda self: 1)
    assert annotated.__ray_concurrency_group__ == "io" and annotated.__ray_max_task_retries__ == 2
    assert ray.method(num_returns=2)(lambda self: (1, 2)).__ray_method_options__ == {"num_returns": 2}


def test_the_compiled_backends_and_options_are_the_toml_files():
    """``compat_matrix/compiled.json`` (what the runtime reads at ``ray.init`` and ``.options()``)
    says what ``backends.toml`` and ``options.toml`` say: run ``tools/gen_compat_doc.py``
    after editing them."""
    import json

    with open(os.path.join(matrix.MATRIX_DIR, matrix.COMPILED_NAME), encoding="utf-8") as fh:
        assert json.load(fh) == matrix.compiled_data(), "run tools/gen_compat_doc.py"
