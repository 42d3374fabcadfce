"""Runtime envs as the core sees them: plain dicts (checked by the caller), inherited and merged.

A task or actor runs in its own env merged over the env of whoever submitted it (the job's env
for the driver, the submitting worker's otherwise): each field it names replaces the parent's,
except ``env_vars``, merged per variable. Fields that decide how a worker *process* is started
(:data:`PROCESS_FIELDS`) make up :func:`process_key`: workers are only reused for tasks and
actors with the same key.
"""
import json
import sys

#: Fields that shape a worker process (its environment, cwd, import path and interpreter).
PROCESS_FIELDS = ("env_vars", "working_dir", "py_modules", "py_executable")
#: The variable naming a setup hook each worker process of the env runs at start.
SETUP_HOOK_ENV_VAR = "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR"
SETUP_HOOK_PICKLED = "ray_adapter_func::"


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
