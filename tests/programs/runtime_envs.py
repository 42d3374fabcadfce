"""Runtime envs: a job working_dir (excludes, .gitignore), py_modules, env_vars merged per task
and actor, config, fields set to None, a worker setup hook, inheritance by nested tasks, a .zip
working_dir, and the RuntimeEnv / RuntimeEnvConfig classes."""
import os
import shutil
import sys
import tempfile
import zipfile

import ray
from ray.runtime_env import RuntimeEnv, RuntimeEnvConfig

base = tempfile.mkdtemp(prefix="rtenv-program-")
project = os.path.join(base, "project")
for rel, text in {"data.txt": "hello", "helpers.py": "WHERE = 'working_dir'\n",
                  "sub/notes.txt": "n", "skip/big.bin": "x", "build.log": "log",
                  ".gitignore": "*.log\n", "keep/inner.log": "l"}.items():
    path = os.path.join(project, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(text)
modules = os.path.join(base, "modules", "shapes")
os.makedirs(modules)
with open(os.path.join(modules, "__init__.py"), "w") as fh:
    fh.write("SIDES = {'triangle': 3, 'square': 4}\n")


def setup_hook():
    os.environ["SET_BY_HOOK"] = "yes"


driver_cwd = os.getcwd()
ray.init(num_cpus=2, runtime_env={
    "working_dir": project, "excludes": ["skip"], "py_modules": [modules],
    "env_vars": {"LEVEL": "job", "SHARED": "job"}, "config": {"setup_timeout_seconds": 120},
    "worker_process_setup_hook": setup_hook, "conda": None, "pip": None})


def listing():
    out = []
    for root, dirs, files in os.walk("."):
        # (the bytecode `import helpers` writes there, unless PYTHONDONTWRITEBYTECODE is set:
        # under Ray as here, so the listing leaves it out)
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        out.extend(os.path.relpath(os.path.join(root, f), ".") for f in files)
    return sorted(out)


@ray.remote
def inspect_task():
    import helpers
    import shapes

    here = os.getcwd()
    return {"cwd": os.path.basename(here)[:8], "files": listing(), "helpers": helpers.WHERE,
            "shapes": shapes.SIDES["square"], "cwd on path": here in sys.path,
            "env": (os.environ.get("LEVEL"), os.environ.get("SHARED"), os.environ.get("TASK")),
            "hook": os.environ.get("SET_BY_HOOK")}


@ray.remote
def child_env():
    return os.path.basename(os.getcwd())[:8], os.environ.get("TASK"), os.environ.get("LEVEL")


@ray.remote
def parent_env():
    return ray.get(child_env.remote())


@ray.remote
class Inspector:
    def env(self):
        return (os.path.basename(os.getcwd())[:8], os.environ.get("LEVEL"),
                os.environ.get("SHARED"), os.environ.get("ACTOR"), os.environ.get("SET_BY_HOOK"))

    def context_keys(self):
        env = ray.get_runtime_context().runtime_env
        return sorted(env), sorted(k for k in env.get("env_vars", {}) if not k.startswith("__"))


for key, value in sorted(ray.get(inspect_task.remote()).items()):
    print(f"task {key}: {value}")
override = {"env_vars": {"SHARED": "task", "TASK": "1"}, "working_dir": None, "pip": None}
print("task override:", ray.get(inspect_task.options(runtime_env=override).remote())["env"])
print("nested task inherits:", ray.get(parent_env.options(runtime_env={"env_vars": {"TASK": "parent"}}).remote()))
print("actor:", ray.get(Inspector.remote().env.remote()))
actor = Inspector.options(runtime_env={"env_vars": {"ACTOR": "a", "LEVEL": "actor"}}).remote()
print("actor override:", ray.get(actor.env.remote()))
print("actor context keys:", ray.get(actor.context_keys.remote()))

job_env = ray.get_runtime_context().runtime_env
print("driver context keys:", sorted(job_env), type(job_env).__name__)
print("packages look like Ray's:", job_env["working_dir"].startswith("gcs://_ray_pkg_"),
      all(m.startswith("gcs://_ray_pkg_") for m in job_env["py_modules"]))
print("config:", sorted(job_env["config"].items()))
print("hook field:", job_env["worker_process_setup_hook"])
print("the package URI names the same files:",
      ray.get(inspect_task.options(runtime_env={"working_dir": job_env["working_dir"]}).remote())["helpers"])
print("driver cwd unchanged:", os.getcwd() == driver_cwd)
try:
    inspect_task.options(runtime_env={"working_dir": project}).remote()
except ValueError as e:
    print("task-level local path:", str(e).replace(project, "<project>"))
ray.shutdown()

# A .zip working_dir is extracted as it is.
archive = os.path.join(base, "bundle.zip")
with zipfile.ZipFile(archive, "w") as zf:
    zf.writestr("top/readme.txt", "zip")
    zf.writestr("config.json", "{}")
ray.init(num_cpus=1, runtime_env={"working_dir": archive})


@ray.remote
def zipped():
    return listing(), open("top/readme.txt").read()


print("zip working_dir:", ray.get(zipped.remote()))
ray.shutdown()

# The classes.
env = RuntimeEnv(env_vars={"A": "1"}, working_dir=None, config=RuntimeEnvConfig(setup_timeout_seconds=30))
print("RuntimeEnv:", sorted(env), env.env_vars(), isinstance(env, dict), type(env["config"]).__name__)
print("to_dict:", sorted(env.to_dict()["config"].items()))
print("empty fields dropped:", RuntimeEnv(env_vars={}, excludes=[]) == {})
print("RuntimeEnvConfig defaults:", sorted(RuntimeEnvConfig().items()))
for bad in (lambda: RuntimeEnvConfig(setup_timeout_seconds=0), lambda: RuntimeEnvConfig(eager_install="yes"),
            lambda: RuntimeEnv(env_vars={"A": 1}), lambda: RuntimeEnv(pip=["x"], conda="env"),
            lambda: RuntimeEnv(working_dir=os.path.join(base, "missing"))):
    try:
        bad()
    except (TypeError, ValueError) as e:
        print(type(e).__name__ + ":", str(e).splitlines()[0].replace(base, "<base>"))
shutil.rmtree(base)
print("done")
