"""Runtime envs as the core sees them: plain dicts (checked by the caller), inherited and merged.

A task or actor runs in its own env merged over the env of whoever submitted it (the job's env
for the driver, the submitting worker's otherwise): each field it names replaces the parent's,
except ``env_vars``, merged per variable. Fields that decide how a worker *process* is started
(:data:`PROCESS_FIELDS`) make up :func:`process_key`: workers are only reused for tasks and
actors with the same key.
"""
import os
import sys

#: Fields that shape a worker process (its environment, cwd, import path and interpreter).
PROCESS_FIELDS = ("env_vars", "working_dir", "py_modules", "py_executable")
#: The variable naming a setup hook each worker process of the env runs at start.
SETUP_HOOK_ENV_VAR = "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR"
SETUP_HOOK_PICKLED = "ray_adapter_func::"
DEFAULT_EXCLUDES = ".git,.venv,venv,__pycache__"


def merge(parent, child):
    """``child`` over ``parent`` (either may be None): a new dict."""
    out = dict(parent or {})
    child = dict(child or {})
    env_vars = dict(out.pop("env_vars", None) or {})
    env_vars.update(child.pop("env_vars", None) or {})
    out.update(child)
    if env_vars:
        out["env_vars"] = env_vars
    return out


def py_executable(env):
    """The command that starts ``env``'s worker processes (its ``py_executable``), or None for
    the driver's own interpreter (``sys.executable``, the default: Ray's too)."""
    command = (env or {}).get("py_executable")
    if not command or command.strip() == sys.executable:
        return None
    return command


def process_key(env):
    """A hashable key of ``env``'s process-shaping fields (None for the default process)."""
    fields = {k: env[k] for k in PROCESS_FIELDS if env and env.get(k)}
    if "py_executable" in fields and py_executable(env) is None:
        del fields["py_executable"]  # the driver's interpreter: the default process
    if not fields:
        return None
    import json  # lazy: keeps `import ray` fast
    return json.dumps(fields, sort_keys=True, default=str)


def run_setup_hook(environ):
    """Run the setup hook ``environ`` names (a ``module.function`` path or a pickled
    callable), if any. Returns None, or Ray's error text when the hook failed."""
    import traceback

    key = environ.get(SETUP_HOOK_ENV_VAR)
    if not key:
        return None
    try:
        if key.startswith(SETUP_HOOK_PICKLED):
            import base64
            import pickle

            hook = pickle.loads(base64.b64decode(key[len(SETUP_HOOK_PICKLED):]))
        else:
            import importlib

            module_name, _, attr = key.rpartition(".")
            hook = getattr(importlib.import_module(module_name), attr)
        hook()
        return None
    except Exception:  # noqa: BLE001 - reported as Ray reports it; the worker then exits
        shown = key if not key.startswith(SETUP_HOOK_PICKLED) else "the setup hook function"
        return (f"Failed to execute the setup hook method, {shown} from "
                f"``ray.init(runtime_env={{'worker_process_setup_hook': {shown}}})``. Please make "
                "sure the given module exists and is available from ray workers. For more "
                f"details, see the error trace below.\n{traceback.format_exc()}")


def default_excludes():
    """Ray's default excludes of a packaged directory (``RAY_OVERRIDE_RUNTIME_ENV_DEFAULT_EXCLUDES``
    replaces them)."""
    value = os.environ.get("RAY_OVERRIDE_RUNTIME_ENV_DEFAULT_EXCLUDES", DEFAULT_EXCLUDES)
    return [x.strip() for x in value.split(",") if x.strip()]


def _ignored(path, is_dir, rules):
    """True if one of ``rules`` (``[(PathSpec, the directory its patterns are relative to)]``)
    matches ``path`` (a directory also as ``name/``, so directory-only patterns match it)."""
    for spec, where in rules:
        rel = os.path.relpath(path, where)
        if spec.match_file(rel) or (is_dir and spec.match_file(rel + "/")):
            return True
    return False


def package_files(root, excludes):
    """``[(relative path, absolute path)]`` of the files under ``root`` that a package of it
    keeps: not those ``excludes`` (gitignore patterns) or a ``.gitignore`` / ``.rayignore``
    below it match (``.gitignore`` not with ``RAY_RUNTIME_ENV_IGNORE_GITIGNORE=1``), as Ray
    packages a ``working_dir`` / ``py_modules`` entry."""
    import pathspec

    names = (".gitignore", ".rayignore")
    if os.environ.get("RAY_RUNTIME_ENV_IGNORE_GITIGNORE", "0") == "1":
        names = (".rayignore",)
    out = []
    stack = [(root, [(pathspec.GitIgnoreSpec.from_lines(list(excludes)), root)])]
    while stack:
        folder, rules = stack.pop()
        rules = list(rules)
        for name in names:
            ignore_file = os.path.join(folder, name)
            if os.path.isfile(ignore_file):
                with open(ignore_file, encoding="utf-8", errors="replace") as fh:
                    rules.append((pathspec.GitIgnoreSpec.from_lines(fh.readlines()), folder))
        for entry in os.scandir(folder):
            is_dir = entry.is_dir()
            if _ignored(entry.path, is_dir, rules):
                continue
            if is_dir:
                stack.append((entry.path, rules))
            else:
                out.append((os.path.relpath(entry.path, root), entry.path))
    return out
