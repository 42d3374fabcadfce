"""The import hook, exercised in real interpreters (subprocesses) as a user would meet it."""
import json
import textwrap

from conftest import REPO, run_code, run_python


def test_import_ray_without_variable_is_untouched():
    result = run_code("import ray", backend=False)
    assert result.returncode != 0
    assert "ModuleNotFoundError: No module named 'ray'" in result.stderr


def test_import_ray_with_variable_serves_the_proxy():
    result = run_code(
        "import ray, ray.util, ray.exceptions, ray_adapter.ray as proxy; "
        "print(ray is proxy, ray.util is proxy.util, ray.__version__)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True", "2.60.0"]


def test_variable_is_case_insensitive():
    result = run_code("import ray; print(ray.__name__)", backend=False, env={"RAY_BACKEND": "YuanRong"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ray_adapter.ray"


def test_submodules_are_the_canonical_objects():
    code = textwrap.dedent("""
        import ray.util.actor_pool
        from ray.util import ActorPool
        from ray.exceptions import RayTaskError
        import ray_adapter.ray.exceptions as ex
        import ray_adapter.ray.util.actor_pool as ap
        import sys
        print(RayTaskError is ex.RayTaskError, ActorPool is ap.ActorPool,
              sys.modules['ray.exceptions'] is ex, ray.exceptions.__spec__.name)
    """)
    result = run_code(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True", "True", "ray_adapter.ray.exceptions"]


def test_find_spec_and_metadata_answer_while_active():
    code = ("import importlib.util, importlib.metadata as md; "
            "print(importlib.util.find_spec('ray') is not None, md.version('ray'), "
            "importlib.util.find_spec('ray.util') is not None)")
    result = run_code(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "2.60.0", "True"]
    off = run_code("import importlib.util; print(importlib.util.find_spec('ray'))", backend=False)
    assert off.stdout.strip() == "None"


def test_hook_does_not_capture_lookalike_names():
    code = ("import importlib.util, sys; "
            "print(importlib.util.find_spec('raydp'), importlib.util.find_spec('rayx'), "
            "'ray' in sys.modules)")
    result = run_code(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["None", "None", "False"]


def test_importing_ray_starts_nothing():
    code = ("import threading, ray; "
            "print(threading.active_count(), ray.is_initialized())")
    result = run_code(code)
    assert result.stdout.split() == ["1", "False"]


def test_importing_ray_loads_no_module_a_program_may_not_use():
    # What `import ray` costs (issue 20: >= 15x faster than Ray's) is mostly the modules it
    # loads: the event loop, the TOML matrix, the wire codecs, the runtime core's backends and
    # its interface's dataclasses (with `dataclasses`, `inspect` and `typing`: ~10 ms) load at
    # first use, not at import.
    later = ["asyncio", "tomllib", "tomli", "msgspec", "cloudpickle", "json", "socket",
             "pickle", "base64", "ray_adapter.core.embedded", "ray_adapter.core.yuanrong",
             "dataclasses", "inspect", "typing", "ray_adapter.core.interface",
             "ray_adapter.core.scheduling"]
    code = f"import sys, ray; print([m for m in {later!r} if m in sys.modules])"
    result = run_code(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_python_dash_m_runs_a_ray_module_as_with_ray():
    # runpy asks the finder's loader for the module's code: `python -m ray.scripts.scripts` is
    # Ray's `ray` command; a package without __main__ is refused as Python refuses it.
    result = run_python(["-m", "ray.scripts.scripts", "--help"])
    assert result.returncode == 0 and result.stdout.startswith("usage: ray "), result.stderr
    result = run_python(["-m", "ray.util.state"])
    assert result.returncode == 1
    assert "No module named ray.util.state.__main__; 'ray.util.state' is a package" in result.stderr


def test_gap_submodule_raises_module_not_found_subclass_with_reason():
    code = textwrap.dedent("""
        try:
            import ray.serve
        except ImportError as e:
            print(type(e).__name__, isinstance(e, ModuleNotFoundError))
            print(e)
    """)
    result = run_code(code)
    assert result.returncode == 0, result.stderr
    first, message = result.stdout.split("\n", 1)
    assert first == "RayAdapterModuleGapError True"
    assert "ray.serve" in message and "compat_matrix/ray.toml" in message


def test_unknown_submodule_is_a_module_not_found():
    code = textwrap.dedent("""
        try:
            import ray.no_such_module
        except ModuleNotFoundError as e:
            print(e.name)
            print(e)
    """)
    result = run_code(code)
    name, message = result.stdout.split("\n", 1)
    assert name == "ray.no_such_module"
    assert message.startswith("No module named 'ray.no_such_module'")


def test_install_is_idempotent_and_auto_works():
    code = textwrap.dedent("""
        import sys
        import ray_adapter.auto
        from ray_adapter import hook
        hook.install(); hook.install()
        print(sum(1 for f in sys.meta_path if getattr(f, '_ray_adapter_finder', False)))
        import ray
        print(ray.__name__)
    """)
    result = run_code(code, backend=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1", "ray_adapter.ray"]


def test_warns_when_another_ray_was_imported_first(tmp_path):
    # A stand-in module named ``ray`` plays the part of real Ray imported before the hook.
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "__init__.py").write_text("WHO = 'other'\n")
    code = ("import warnings; warnings.simplefilter('always'); import ray; "
            "import ray_adapter.auto; import ray as again; print(again.WHO)")
    result = run_python(["-c", code], backend=False, env={"PYTHONPATH": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "other"
    assert "was already imported" in result.stderr and str(tmp_path) in result.stderr
    strict = run_python(["-c", code], backend=False,
                        env={"PYTHONPATH": str(tmp_path), "RAY_ADAPTER_STRICT": "1"})
    assert strict.returncode != 0 and "RuntimeError" in strict.stderr


def test_disabled_context_turns_the_finder_off():
    code = textwrap.dedent("""
        from ray_adapter import hook
        with hook.disabled():
            try:
                import ray
                print("imported")
            except ModuleNotFoundError:
                print("absent")
        import ray
        print(ray.__name__)
    """)
    result = run_code(code)
    assert result.stdout.split() == ["absent", "ray_adapter.ray"]


def test_pth_line_is_cheap_when_unset():
    # Loose bound here; benchmarks/hook_cost.py measures it precisely.
    line = (REPO / "hooks" / "ray_adapter.pth").read_text().strip()
    code = textwrap.dedent(f"""
        import os, time
        os.environ.pop("RAY_BACKEND", None)
        line = {line!r}
        code = compile(line, "ray_adapter.pth", "exec")
        n = 2000
        t = time.perf_counter()
        for _ in range(n):
            exec(code, {{}})
        print((time.perf_counter() - t) / n)
    """)
    result = run_code(code, backend=False)
    assert result.returncode == 0, result.stderr
    assert float(result.stdout) < 1e-3


def test_pth_is_installed_in_site_packages():
    code = ("import sysconfig, os; p = sysconfig.get_paths()['purelib']; "
            "print(os.path.exists(os.path.join(p, 'ray_adapter.pth')), "
            "os.path.exists(os.path.join(p, 'ray_adapter.start')))")
    result = run_code(code, backend=False)
    assert result.stdout.split() == ["True", "True"]


def test_workers_serve_the_same_ray():
    code = textwrap.dedent("""
        import ray
        ray.init(num_cpus=1)
        @ray.remote
        def where():
            import ray as inner, os
            return inner.__name__, os.environ.get("RAY_BACKEND")
        print(ray.get(where.remote()))
        ray.shutdown()
    """)
    result = run_code(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "('ray_adapter.ray', 'yuanrong')"


def test_module_attributes_look_like_a_package():
    code = ("import ray, json; print(json.dumps([ray.__version__, hasattr(ray, '__path__'), "
            "'init' in ray.__all__, 'init' in dir(ray), ray.__spec__ is not None]))")
    result = run_code(code)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == ["2.60.0", True, True, True, True]


def test_find_spec_answers_for_ray_modules_and_never_raises():
    # Libraries probe optional Ray modules this way (transformers' is_ray_tune_available).
    code = textwrap.dedent("""
        import importlib.util
        for name in ("ray.serve", "ray.tune", "ray.no_such_module", "ray.util", "ray.util.nope"):
            spec = importlib.util.find_spec(name)
            print(name, "spec" if spec is not None else "None")
        try:
            import ray.tune
        except ModuleNotFoundError as e:
            print(type(e).__name__)
    """)
    result = run_code(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:6] == [
        "ray.serve spec", "ray.tune spec", "ray.no_such_module None", "ray.util spec",
        "ray.util.nope None", "RayAdapterModuleGapError"]


def test_nested_disabled_blocks_keep_the_finder_off_until_the_outermost_ends():
    code = textwrap.dedent("""
        from ray_adapter import hook
        def probe():
            try:
                import ray
                return "proxy"
            except ModuleNotFoundError:
                return "absent"
        with hook.disabled():
            with hook.disabled():
                pass
            print(probe())
        print(probe())
    """)
    result = run_code(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["absent", "proxy"]


def test_proxy_classes_go_by_rays_names_and_pickle_back_to_themselves():
    # Ray's classes say ray.X (tracebacks, repr, error reporters print it); the hook publishes
    # each proxy module under its Ray name once it has run: loaded at `import ray`, imported by
    # the user later, or loaded by the adapter itself on first use (ray.dag by .bind()).
    code = textwrap.dedent("""
        import pickle, sys, traceback
        import cloudpickle
        import ray
        import ray.util.queue
        from ray_adapter.core import serialization
        names = [ray.exceptions.GetTimeoutError, ray.actor.ActorHandle, ray.util.queue.Empty,
                 ray.ObjectRef, ray._raylet.ActorID]
        print(*[f"{c.__module__}.{c.__qualname__}" for c in names])
        @ray.remote
        def f():
            pass
        node = f.bind()
        home = sys.modules["ray_adapter.ray.dag.function_node"]
        print(type(node).__module__, sys.modules[type(node).__module__] is home)
        err = ray.exceptions.GetTimeoutError("late")
        print(traceback.format_exception_only(type(err), err)[-1].strip())
        print(all(pickle.loads(pickle.dumps(c)) is c and cloudpickle.loads(cloudpickle.dumps(c)) is c
                  and len(cloudpickle.dumps(c)) < 200 for c in names))
        # The adapter's own pickles name the defining module: they load without the hook too.
        data = serialization.dumps([err, ray.util.queue.Empty]).data
        print(b"ray_adapter.ray.exceptions" in data, b"ray_adapter.ray.util.queue" in data)
        # A class its name does not find (the raw class behind a @ray.remote name, a private
        # class with a public __qualname__) keeps its own module and travels by value.
        import copy, importlib.machinery, inspect
        import ray._common.test_utils as tu
        @ray.remote
        class A:
            pass
        raw, wrapper = tu._SignalActor, A.options(num_cpus=0)
        print(raw.__module__, serialization.loads(serialization.dumps(raw)) is not tu.SignalActor,
              type(serialization.loads(serialization.dumps(wrapper))).__qualname__)
        # Sources and loaders stay what tools expect (3.13 drops __firstlineno__ with a new
        # __module__; pkg_resources and copy look at the loader's type).
        loader = ray.exceptions.__spec__.loader
        print(inspect.getsource(ray.exceptions.RayError).splitlines()[0],
              isinstance(loader, importlib.machinery.SourceFileLoader), copy.copy(loader).name)
    """)
    result = run_code(code)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["ray.exceptions.GetTimeoutError", "ray.actor.ActorHandle",
                                "ray.util.queue.Empty", "ray.ObjectRef", "ray._raylet.ActorID"]
    assert lines[1] == "ray.dag.function_node True"
    assert lines[2] == "ray.exceptions.GetTimeoutError: late"
    assert lines[3:5] == ["True", "True True"]
    assert lines[5] == "ray_adapter.ray._common.test_utils True ActorOptionWrapper"
    assert lines[6] == "class RayError(Exception): True ray_adapter.ray.exceptions"


def test_without_the_hook_proxy_classes_keep_their_own_names():
    # A process that uses ray_adapter.ray itself (no hook: the in-process tests) registers no
    # `ray` module and renames nothing; a proxy imported before the hook is published by the
    # hook's first `import ray`.
    code = textwrap.dedent("""
        import sys
        import ray_adapter.ray.exceptions as ex
        print(ex.GetTimeoutError.__module__, "ray" in sys.modules, "ray.exceptions" in sys.modules)
        from ray_adapter import hook
        hook.install()
        import ray
        print(ex.GetTimeoutError.__module__, sys.modules["ray.exceptions"] is ex)
    """)
    result = run_code(code, backend=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["ray_adapter.ray.exceptions False False",
                                          "ray.exceptions True"]
