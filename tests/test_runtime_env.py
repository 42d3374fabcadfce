"""Runtime envs with real workers on both backends: env_vars merged as Ray merges them, a job
working_dir (copied, excludes, ignore files) and py_modules, fields set to None, the setup
hook, submitted-job envs, workers per env, the documented gaps, RuntimeEnv / RuntimeEnvConfig.
The differential program tests/programs/runtime_envs.py compares the same with real Ray."""
import json
import os
import sys

import pytest

from ray_adapter import gaps

from conftest import run_code

THREADS = "yr local mode runs tasks as threads of the driver: no process per env, one cwd"


def _project(root):
    files = {"data.txt": "d", "mod_in_wd.py": "VALUE = 'wd'\n", "skip/x.txt": "x", "a.log": "l",
             ".gitignore": "*.log\n", "sub/.rayignore": "secret.txt\n", "sub/secret.txt": "s",
             "sub/kept.txt": "k", ".git/HEAD": "ref", "__pycache__/c.pyc": "c"}
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


# With a working_dir, workers import from its copy, not from the driver's folders (as in Ray):
# the remote functions below define what they need inside themselves.


def test_job_and_task_env_vars_merge_and_none_fields_are_ignored(ray_module):
    ray = ray_module
    ray.init(num_cpus=2, runtime_env={"working_dir": None, "pip": None,
                                      "env_vars": {"LEVEL": "job", "KEEP": "job"}})

    @ray.remote
    def read():
        return os.environ.get("LEVEL"), os.environ.get("KEEP"), os.environ.get("EXTRA")

    @ray.remote
    class Reader:
        def read(self):
            return os.environ.get("LEVEL"), os.environ.get("KEEP"), os.environ.get("EXTRA")

    assert ray.get(read.remote()) == ("job", "job", None)
    task_env = {"env_vars": {"LEVEL": "task", "EXTRA": "x"}, "conda": None}
    assert ray.get(read.options(runtime_env=task_env).remote()) == ("task", "job", "x")
    actor = Reader.options(runtime_env={"env_vars": {"EXTRA": "actor"}}).remote()
    assert ray.get(actor.read.remote()) == ("job", "job", "actor")


@pytest.mark.embedded_only(THREADS)
def test_working_dir_is_copied_with_excludes_and_ignore_files(ray_module, tmp_path):
    ray = ray_module
    project = _project(tmp_path / "project")
    ray.init(num_cpus=1, runtime_env={"working_dir": str(project), "excludes": ["skip"]})

    @ray.remote
    def look():
        import os
        import sys

        import mod_in_wd

        # (Not __pycache__: the import above writes it there unless PYTHONDONTWRITEBYTECODE is
        # set, under Ray too.)
        files = sorted(os.path.relpath(os.path.join(folder, f), ".")
                       for folder, _, names in os.walk(".") for f in names
                       if "__pycache__" not in folder)
        return os.path.basename(os.getcwd()), files, mod_in_wd.VALUE, os.getcwd() in sys.path

    name, files, value, on_path = ray.get(look.remote(), timeout=60)
    assert name.startswith("_ray_pkg_") and value == "wd" and on_path
    assert files == [".gitignore", "data.txt", "mod_in_wd.py", "sub/.rayignore", "sub/kept.txt"]
    env = ray.get_runtime_context().runtime_env
    assert env["working_dir"].startswith("gcs://_ray_pkg_") and "excludes" not in env
    # A task may name this session's package by its URI (not a local path, as in Ray).
    assert ray.get(look.options(runtime_env={"working_dir": env["working_dir"]}).remote())[2] == "wd"
    with pytest.raises(ValueError, match="only supported at the job level"):
        look.options(runtime_env={"working_dir": str(project)}).remote()
    with pytest.raises(ray.exceptions.RuntimeEnvSetupError, match="not one of this session's"):
        look.options(runtime_env={"working_dir": "gcs://_ray_pkg_0123456789abcdef.zip"}).remote()
    assert os.getcwd() != name  # the driver's own cwd does not change


@pytest.mark.embedded_only(THREADS)
def test_packages_are_removed_at_shutdown(ray_module, tmp_path):
    ray = ray_module
    ray.init(num_cpus=1, runtime_env={"working_dir": str(_project(tmp_path / "p"))})

    @ray.remote
    def where():
        import os

        return os.getcwd()

    copy = ray.get(where.remote(), timeout=60)
    assert os.path.isdir(copy)
    ray.shutdown()
    assert not os.path.exists(copy)


def test_py_modules_import_in_tasks(ray_module, tmp_path):
    ray = ray_module
    package = tmp_path / "mods" / "geometry"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("SIDES = 4\n")
    single = tmp_path / "single" / "lonely.py"
    single.parent.mkdir()
    single.write_text("NAME = 'lonely'\n")
    ray.init(num_cpus=1, runtime_env={"py_modules": [str(package), str(single)]})

    @ray.remote
    def use():
        import geometry
        import lonely

        return geometry.SIDES, lonely.NAME

    assert ray.get(use.remote(), timeout=60) == (4, "lonely")


def test_imported_modules_are_accepted_in_py_modules(ray_module, tmp_path, monkeypatch):
    ray = ray_module
    package = tmp_path / "pkgs" / "imported_mod_for_test"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("X = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path / "pkgs"))
    import imported_mod_for_test

    ray.init(num_cpus=1, runtime_env={"py_modules": [imported_mod_for_test]})

    @ray.remote
    def use():
        import imported_mod_for_test as m

        return m.X

    assert ray.get(use.remote(), timeout=60) == 42
    sys.modules.pop("imported_mod_for_test", None)


@pytest.mark.embedded_only(THREADS)
def test_workers_are_started_per_env(ray):
    @ray.remote
    def pid_and_var():
        return os.getpid(), os.environ.get("PER_ENV")

    plain = {ray.get(pid_and_var.remote())[0] for _ in range(6)}
    a = ray.get(pid_and_var.options(runtime_env={"env_vars": {"PER_ENV": "a"}}).remote())
    b = ray.get(pid_and_var.options(runtime_env={"env_vars": {"PER_ENV": "b"}}).remote())
    again = ray.get(pid_and_var.options(runtime_env={"env_vars": {"PER_ENV": "a"}}).remote())
    assert a[1] == "a" and b[1] == "b" and again == a  # reused for the same env
    assert len({a[0], b[0]} | plain) == len(plain) + 2  # a process of their own per env
    assert ray.get(pid_and_var.remote())[1] is None


@pytest.mark.embedded_only(THREADS)
def test_env_vars_are_set_at_process_start_and_inherited_by_nested_tasks(ray):
    @ray.remote
    def child():
        return os.environ.get("FROM_PARENT")

    @ray.remote
    def parent():
        return ray.get(child.remote())

    @ray.remote
    class Spawner:
        def spawn(self):
            return ray.get(child.remote())

    assert ray.get(parent.options(runtime_env={"env_vars": {"FROM_PARENT": "t"}}).remote()) == "t"
    spawner = Spawner.options(runtime_env={"env_vars": {"FROM_PARENT": "a"}}).remote()
    assert ray.get(spawner.spawn.remote()) == "a"


def test_setup_hook_runs_in_each_worker_process(ray_module, tmp_path):
    ray = ray_module

    def hook():
        os.environ["HOOK_MARK"] = "ran"

    ray.init(num_cpus=1, runtime_env={"worker_process_setup_hook": hook})

    @ray.remote
    def read():
        return os.environ.get("HOOK_MARK")

    @ray.remote
    class A:
        def read(self):
            return os.environ.get("HOOK_MARK")

    assert ray.get(read.remote(), timeout=60) == "ran"
    assert ray.get(A.remote().read.remote(), timeout=60) == "ran"
    assert ray.get_runtime_context().runtime_env["worker_process_setup_hook"] == "hook"
    with pytest.raises(TypeError, match="not JSON serializable"):
        read.options(runtime_env={"worker_process_setup_hook": hook}).remote()


def test_setup_hook_given_as_a_module_path(ray_module, tmp_path, monkeypatch):
    ray = ray_module
    (tmp_path / "hook_module_for_test.py").write_text(
        "import os\ndef setup():\n    os.environ['HOOK_PATH_MARK'] = 'module'\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.syspath_prepend(str(tmp_path))
    ray.init(num_cpus=1, runtime_env={"worker_process_setup_hook": "hook_module_for_test.setup"})

    @ray.remote
    def read():
        return os.environ.get("HOOK_PATH_MARK")

    assert ray.get(read.remote(), timeout=60) == "module"


@pytest.mark.embedded_only("a failing hook ends the worker process; in yr local mode ray.init raises")
def test_a_failing_setup_hook_fails_the_tasks(ray_module):
    ray = ray_module

    def broken():
        raise RuntimeError("no setup")

    ray.init(num_cpus=1, runtime_env={"worker_process_setup_hook": broken})

    @ray.remote(max_retries=0)
    def f():
        return 1

    with pytest.raises(ray.exceptions.WorkerCrashedError):
        ray.get(f.remote(), timeout=60)


def test_a_submitted_jobs_env_is_merged_with_init_s(ray_module, monkeypatch):
    ray = ray_module
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", json.dumps({"runtime_env": {"env_vars": {"JOB": "1"}}}))
    ray.init(num_cpus=1, runtime_env={"env_vars": {"DRIVER": "2"}})

    @ray.remote
    def read():
        return os.environ.get("JOB"), os.environ.get("DRIVER")

    assert ray.get(read.remote(), timeout=60) == ("1", "2")
    ray.shutdown()
    with pytest.raises(ValueError, match="because of a conflict"):
        ray.init(num_cpus=1, runtime_env={"env_vars": {"JOB": "other"}})
    monkeypatch.setenv("RAY_OVERRIDE_JOB_RUNTIME_ENV", "1")
    ray.init(num_cpus=1, runtime_env={"env_vars": {"JOB": "other"}})
    assert ray.get(read.remote(), timeout=60) == ("other", None)


@pytest.mark.parametrize("field, value", [
    ("pip", ["requests"]), ("uv", ["requests"]), ("conda", "base"),
    ("container", {"image": "x"}), ("image_uri", "docker.io/x"), ("nsight", "default"),
    ("java_jars", ["a.jar"])])
def test_unsupported_fields_raise_the_gap_naming_them(ray, field, value):
    """As Ray, a runtime env is set up when the task is submitted or the actor created: the
    decorator and .options() accept the field (NeMo-RL decorates classes with nsight envs at
    module level), .remote() raises the gap naming it and pointing to the matrix."""
    @ray.remote
    def f():
        return 1

    options = f.options(runtime_env={field: value})
    decorated = ray.remote(runtime_env={field: value})(type("C", (), {}))
    with pytest.raises(gaps.RayAdapterOptionError, match=rf"runtime_env\['{field}'\]") as info:
        options.remote()
    assert "compat_matrix" in str(info.value)
    with pytest.raises(gaps.RayAdapterOptionError, match=rf"runtime_env\['{field}'\]"):
        decorated.remote()
    with pytest.raises(gaps.RayAdapterOptionError, match=rf"runtime_env\['{field}'\]"):
        decorated.options(num_cpus=0).remote()
    assert ray.get(f.remote(), timeout=60) == 1  # the function itself is unharmed


def test_a_key_that_is_no_ray_field_is_a_plugin_ignored_as_ray_ignores_it(ray):
    """Ray treats a runtime_env key it does not know as a plugin's name and, with no such
    plugin installed, runs the task without it (no error): so do we, for tasks, actors and
    the job's env."""
    @ray.remote
    def read():
        return os.environ.get("PLUGIN_TEST")

    @ray.remote
    class Reader:
        def read(self):
            return os.environ.get("PLUGIN_TEST")

    env = {"my_plugin": {"a": 1}, "env_vars": {"PLUGIN_TEST": "set"}}
    assert ray.get(read.options(runtime_env=env).remote(), timeout=60) == "set"
    assert ray.get(Reader.options(runtime_env=env).remote().read.remote(), timeout=60) == "set"
    ray.shutdown()
    ray.init(num_cpus=1, runtime_env=env)
    assert ray.get(read.remote(), timeout=60) == "set"


def test_a_class_decorated_with_nsight_imports_and_fails_only_when_created():
    """NeMo-RL's test module decorates a class with ``runtime_env={"nsight": ...}`` at import:
    importing it must work (it did not: the gap was raised by the decorator)."""
    out = run_code(
        "import ray\n"
        "@ray.remote(num_gpus=1, runtime_env={'nsight': {'t': 'cuda,cudnn,cublas'}})\n"
        "class Profiled:\n"
        "    def ping(self):\n"
        "        return 1\n"
        "print('imported')\n"
        "ray.init(num_cpus=1, num_gpus=1)\n"
        "try:\n"
        "    Profiled.remote()\n"
        "except ValueError as exc:\n"
        "    print(type(exc).__name__, \"runtime_env['nsight']\" in str(exc))\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["imported", "RayAdapterOptionError True"]


def test_py_executable_is_a_gap_on_the_yuanrong_backend():
    from ray_adapter.ray._private import options

    with pytest.raises(gaps.RayAdapterOptionError, match=r"runtime_env\['py_executable'\]"):
        options.check_runtime_env("actor", {"py_executable": "python3"}, backend="yuanrong")
    options.check_runtime_env("actor", {"py_executable": "python3"}, backend="embedded")


def test_remote_packages_and_wheels_are_gaps(ray_module, tmp_path):
    ray = ray_module
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    wheel.write_bytes(b"PK")
    for env in ({"working_dir": "s3://bucket/pkg.zip"}, {"py_modules": ["https://x.org/m.zip"]},
                {"py_modules": [str(wheel)]}):
        with pytest.raises(gaps.RayAdapterOptionError, match="runtime_env"):
            ray.init(num_cpus=1, runtime_env=env)
    with pytest.raises(ValueError, match="is not a valid path"):
        ray.init(num_cpus=1, runtime_env={"working_dir": str(tmp_path / "missing")})


def test_runtime_env_classes():
    from ray_adapter.ray.runtime_env import RuntimeEnv, RuntimeEnvConfig

    env = RuntimeEnv(env_vars={"A": "1"}, working_dir=None, pip=None, config={"eager_install": False})
    assert sorted(env) == ["config", "env_vars"] and isinstance(env["config"], RuntimeEnvConfig)
    assert env.env_vars() == {"A": "1"} and env.to_dict()["config"]["eager_install"] is False
    assert RuntimeEnv(env_vars={}, excludes=[]) == {}
    assert json.loads(RuntimeEnv(env_vars={"B": "2"}).serialize()) == {"env_vars": {"B": "2"}}
    assert RuntimeEnv.deserialize('{"env_vars": {"C": "3"}}').env_vars() == {"C": "3"}
    assert RuntimeEnvConfig() == {"setup_timeout_seconds": 600, "eager_install": True, "log_files": []}
    with pytest.raises(ValueError, match="greater than zero or equals to -1"):
        RuntimeEnvConfig(setup_timeout_seconds=0)
    with pytest.raises(TypeError, match="must be of type int"):
        RuntimeEnvConfig(setup_timeout_seconds=1.5)
    with pytest.raises(TypeError, match="Each item in log_files must be a string"):
        RuntimeEnvConfig(log_files=[1])
    with pytest.raises(ValueError, match="cannot be specified at the same time"):
        RuntimeEnv(pip=["x"], uv=["y"])
    with pytest.raises(ValueError, match="'container' field currently cannot be used together"):
        RuntimeEnv(container={"image": "x"}, working_dir=".")
    with pytest.raises(TypeError, match=r"runtime_env\['excludes'\] must be of type List\[str\]"):
        RuntimeEnv(excludes="*.log")


# -- py_executable (embedded): workers started with the command, as Ray's are -------------------
def _wrapper(tmp_path):
    """A py_executable that records each start (its arguments) and runs this interpreter."""
    log = tmp_path / "starts.log"
    script = tmp_path / "wrapped-python"
    script.write_text(f"#!/bin/bash\necho \"$@\" >> {log}\nexport VIA_WRAPPER=1\n"
                      f"exec {sys.executable} \"$@\"\n")
    script.chmod(0o755)
    return str(script), log


def _second_venv(tmp_path, with_adapter):
    """A real second virtualenv (no pip: fast); ``with_adapter``: it sees this interpreter's
    site-packages (so ray-adapter and its dependencies), through a .pth file."""
    import site
    import subprocess
    import sysconfig

    venv = tmp_path / ("venv-with" if with_adapter else "venv-without")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    if with_adapter:
        purelib = sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"]
        lines = "".join(f"import site; site.addsitedir({p!r})\n" for p in site.getsitepackages())
        (venv.parent / purelib).joinpath("driver-site.pth").write_text(lines)
    return str(venv / "bin" / "python")


@pytest.mark.embedded_only("py_executable is an embedded-backend field (a gap on yuanrong)")
def test_py_executable_starts_tasks_and_actors_with_that_command(ray, tmp_path):
    wrapper, log = _wrapper(tmp_path)

    @ray.remote
    def where():
        return os.environ.get("VIA_WRAPPER"), os.environ.get("PYEXEC_PREFIX_VAR")

    @ray.remote
    class Where:
        def where(self):
            return os.environ.get("VIA_WRAPPER"), sys.executable

    assert ray.get(where.remote(), timeout=60) == (None, None)
    env = {"py_executable": wrapper}
    assert ray.get(where.options(runtime_env=env).remote(), timeout=60) == ("1", None)
    # A command prefix with words of its own, as Ray's (bash runs it).
    prefix = {"py_executable": f"env PYEXEC_PREFIX_VAR=prefix {wrapper}"}
    assert ray.get(where.options(runtime_env=prefix).remote(), timeout=60) == ("1", "prefix")
    actor = Where.options(runtime_env=env).remote()
    assert ray.get(actor.where.remote(), timeout=60) == ("1", sys.executable)
    starts = log.read_text().splitlines()
    # (the actor may reuse the idle worker of the first task: same env, as Ray's pool does)
    assert len(starts) >= 2 and all(line.split()[0].endswith("default_worker.py") for line in starts)
    # The driver's own interpreter named explicitly is the default process (NeMo-RL's SYSTEM).
    assert ray.get(where.options(runtime_env={"py_executable": sys.executable}).remote(),
                   timeout=60) == (None, None)


@pytest.mark.embedded_only("py_executable is an embedded-backend field (a gap on yuanrong)")
def test_py_executable_of_a_second_venv_runs_its_interpreter(ray, tmp_path):
    python = _second_venv(tmp_path, with_adapter=True)

    @ray.remote
    def interpreter():
        return sys.executable

    @ray.remote
    class Interpreter:
        def get(self):
            return sys.executable

    env = {"py_executable": python}
    assert ray.get(interpreter.options(runtime_env=env).remote(), timeout=60) == python
    assert ray.get(Interpreter.options(runtime_env=env).remote().get.remote(), timeout=60) == python
    assert ray.get(interpreter.remote(), timeout=60) == sys.executable


@pytest.mark.embedded_only("py_executable is an embedded-backend field (a gap on yuanrong)")
def test_a_py_executable_that_cannot_start_a_worker_fails_with_runtime_env_setup_error(ray, tmp_path):
    """Ray retries such a worker and never answers; the adapter fails the task or actor with
    RuntimeEnvSetupError naming the py_executable (and why), and does not retry it."""
    without = _second_venv(tmp_path, with_adapter=False)

    @ray.remote
    def f():
        return 1

    @ray.remote
    class A:
        def ping(self):
            return 1

    other_version = tmp_path / "other-adapter-python"  # a worker speaking another protocol
    other_version.write_text(
        f"#!/bin/bash\nexec {sys.executable} -c 'import runpy, sys; "
        "import ray_adapter.core.embedded.protocol as p; p.VERSION = 99; "
        "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name=\"__main__\")' \"$@\"\n")
    other_version.chmod(0o755)
    for command, why in ((without, "cannot import ray_adapter"),
                         ("/nonexistent/python", "not found"),
                         (str(other_version), "another protocol version")):
        env = {"py_executable": command}
        with pytest.raises(ray.exceptions.RuntimeEnvSetupError) as info:
            ray.get(f.options(runtime_env=env).remote(), timeout=60)
        assert command in str(info.value) and why in str(info.value)
        assert str(info.value).startswith("Failed to set up runtime environment.")
        actor = A.options(runtime_env=env, max_restarts=2).remote()
        with pytest.raises(ray.exceptions.RuntimeEnvSetupError) as info:
            ray.get(actor.ping.remote(), timeout=60)
        assert "Could not create the actor" in str(info.value) and command in str(info.value)
    assert ray.get(f.remote(), timeout=60) == 1


@pytest.mark.embedded_only("py_executable is an embedded-backend field (a gap on yuanrong)")
def test_a_job_py_executable_starts_every_worker_with_it(ray_module, tmp_path):
    ray = ray_module
    wrapper, log = _wrapper(tmp_path)
    ray.init(num_cpus=2, runtime_env={"py_executable": wrapper})

    @ray.remote
    def where():
        return os.environ.get("VIA_WRAPPER")

    @ray.remote
    class Where:
        def where(self):
            return os.environ.get("VIA_WRAPPER")

    assert ray.get([where.remote() for _ in range(4)], timeout=60) == ["1"] * 4
    assert ray.get(Where.remote().where.remote(), timeout=60) == "1"
    assert ray.get(where.options(runtime_env={"env_vars": {"X": "1"}}).remote(), timeout=60) == "1"
    assert log.read_text().count("default_worker.py") >= 2


def test_a_task_env_must_be_json_and_its_env_vars_strings_as_in_ray(ray):
    """Ray serializes a task's or actor's env to JSON: a value JSON cannot hold raises json's
    TypeError at .remote() (a plugin key's too), and env_vars name the offending value."""
    @ray.remote
    def f():
        return 1

    class Obj:
        pass

    for bad, name in ((b"ab", "bytes"), (Obj(), "Obj")):
        with pytest.raises(TypeError, match=f"Object of type {name} is not JSON serializable"):
            f.options(runtime_env={"my_plugin": bad}).remote()
    with pytest.raises(TypeError, match=r"but the value 1 is of type <class 'int'>"):
        f.options(runtime_env={"env_vars": {"FOO": 1}})


def test_metadata_is_no_option_of_ray_2_60(ray):
    @ray.remote
    def f():
        return 1

    with pytest.raises(ValueError, match="Invalid option keyword _metadata for remote functions"):
        f.options(_metadata={"a": 1})
    with pytest.raises(ValueError, match="Invalid option keyword _metadata for actors"):
        ray.remote(_metadata={"a": 1})(type("C", (), {}))
