"""Ray's checks of runtime envs, and their translation into the env the runtime core gets.

- :func:`check_field`: one field, as ``RuntimeEnv`` validates it (types, existing paths; empty
  ``env_vars`` / ``excludes`` dropped).
- :func:`for_job`: ``ray.init(runtime_env=...)``: merged with a submitted job's env
  (``RAY_JOB_CONFIG_JSON_ENV_VAR``) as Ray merges them; imported modules in ``py_modules``
  become their paths; local ``working_dir`` / ``py_modules`` paths made absolute (the backend
  copies them, honouring ``excludes``); the ``worker_process_setup_hook`` exported through the
  environment variable Ray uses, so every worker process of the job runs it at start.
- :func:`for_task`: a task's or actor's env: local paths are refused as Ray refuses them
  (only URIs; the URIs of this session's own packages, as ``get_runtime_context()`` shows
  them, work).

Fields set to ``None`` are ignored everywhere, as in Ray. Which fields a backend supports is
the compat matrix's business (``options.toml``, checked before these run); remote package
URIs (``s3://``, ``https://``, ...) and ``.whl`` modules raise the documented gap here.
"""
import os
import types

from ray_adapter import gaps
from ray_adapter.core.runtime_env import SETUP_HOOK_ENV_VAR, SETUP_HOOK_PICKLED

#: The scheme of this session's packages (a working_dir or py_modules copy), as Ray's look.
PACKAGE_PREFIX = "gcs://_ray_pkg_"
_REMOTE_GAP = ("Remote packages (s3://, gs://, https://, ... URIs) are not fetched by ray-adapter; "
               "give a local directory or .zip in ray.init(runtime_env=...), whose copy tasks "
               "and actors then run in.")
_WHEEL_GAP = ".whl files in py_modules need a pip install, which ray-adapter does not do; install the wheel into the environment first."


def _is_uri(value):
    return isinstance(value, str) and "://" in value


def _is_own_package(value):
    return isinstance(value, str) and value.startswith(PACKAGE_PREFIX) and value.endswith(".zip")


def _gap(owner, field, note):
    return gaps.option_gap_error(owner, f"runtime_env[{field!r}]", note)


def _check_env_vars(env_vars):
    if not isinstance(env_vars, dict):
        raise TypeError(f"runtime_env['env_vars'] must be of type Dict[str, str], got {type(env_vars)}")
    if not env_vars:
        return None
    for key, val in env_vars.items():
        if not isinstance(key, str):
            raise TypeError("runtime_env['env_vars'] must be of type Dict[str, str], but the key "
                            f"{key} is of type {type(key)}")
        if not isinstance(val, str):
            raise TypeError("runtime_env['env_vars'] must be of type Dict[str, str], but the value "
                            f"{val} is of type {type(val)}")
    return env_vars


def _check_path(path):
    try:
        os.stat(path)
    except OSError:
        raise ValueError(f"{path} is not a valid path.") from None


def check_field(key, value):
    """Ray's validation of ``RuntimeEnv`` field ``key``; returns the value to keep (None: drop)."""
    if key == "env_vars":
        return _check_env_vars(value)
    if key == "excludes":
        if isinstance(value, list) and not value:
            return None
        if isinstance(value, list) and all(isinstance(p, str) for p in value):
            return value
        raise TypeError(f"runtime_env['excludes'] must be of type List[str], got {type(value)}")
    if key == "working_dir":
        if not isinstance(value, str):
            raise TypeError(f"`working_dir` must be a string, got {type(value)}.")
        if not _is_uri(value):
            _check_path(value)
        return value
    if key == "py_modules":
        if not isinstance(value, list):
            raise TypeError(f"`py_modules` must be a list of strings, got {type(value)}.")
        for module in value:
            if not isinstance(module, str):
                raise TypeError(f"`py_module` must be a string, got {type(module)}.")
            if not _is_uri(module):
                _check_path(module)
        return value
    if key == "config":
        return check_config(value)
    return value


#: ``RuntimeEnvConfig``'s fields and defaults, as Ray's.
CONFIG_FIELDS = {"setup_timeout_seconds": 600, "eager_install": True, "log_files": None}


def config_values(setup_timeout_seconds=600, eager_install=True, log_files=None):
    """``RuntimeEnvConfig``'s fields checked as Ray checks them (TypeError / ValueError), as a
    plain dict (``log_files`` None becomes ``[]``)."""
    if not isinstance(setup_timeout_seconds, int) or isinstance(setup_timeout_seconds, bool):
        raise TypeError(f"setup_timeout_seconds must be of type int, got: {type(setup_timeout_seconds)}")
    if setup_timeout_seconds <= 0 and setup_timeout_seconds != -1:
        raise ValueError("setup_timeout_seconds must be greater than zero or equals to -1, "
                         f"got: {setup_timeout_seconds}")
    if not isinstance(eager_install, bool):
        raise TypeError(f"eager_install must be a boolean. got {type(eager_install)}")
    if log_files is None:
        log_files = []
    elif not isinstance(log_files, list):
        raise TypeError(f"log_files must be a list of strings or None, got {log_files} with "
                        f"type {type(log_files)}.")
    elif not all(isinstance(f, str) for f in log_files):
        raise TypeError("Each item in log_files must be a string.")
    return {"setup_timeout_seconds": setup_timeout_seconds, "eager_install": eager_install,
            "log_files": log_files}


def check_config(config):
    """``runtime_env['config']`` given as a dict (or a RuntimeEnvConfig) checked: the plain
    dict of its fields (unknown keys dropped with a warning, as Ray logs them); TypeError for
    anything else."""
    if not isinstance(config, dict):
        raise TypeError(f"runtime_env['config'] must be of type dict or RuntimeEnvConfig, got: {type(config)}")
    unknown = set(config) - set(CONFIG_FIELDS)
    if unknown:
        import warnings

        warnings.warn("The following unknown entries in the runtime_env_config dictionary "
                      f"will be ignored: {unknown}.", stacklevel=4)
    return config_values(**{k: v for k, v in config.items() if k in CONFIG_FIELDS})


def _clean(runtime_env):
    """A plain dict of the env's fields without the ones set to None."""
    if runtime_env is None:
        return {}
    if not isinstance(runtime_env, dict):
        raise TypeError(f"runtime_env must be a dict or a ray.runtime_env.RuntimeEnv, got {type(runtime_env).__name__}.")
    env = {}
    for key, value in dict(runtime_env).items():
        if value is None:
            continue
        if key == "nsight":
            key = "_nsight"
        value = check_field(key, value)
        if value is not None:
            env[key] = value
    if isinstance(env.get("config"), dict):
        env["config"] = dict(env["config"])
    return env


def _module_path(module):
    """An imported module given in py_modules: its package directory or its file."""
    paths = list(getattr(module, "__path__", []) or [])
    if paths:
        if len(paths) != 1:
            raise ValueError("py_modules only supports modules whose __path__ has length 1 or "
                             "those who are single-file.")
        return paths[0]
    return module.__file__


def _local_or_own(owner, field, value, job):
    """A package location of ``field``: a local path (job level: made absolute), this
    session's package URI, or a gap (other URIs) / ValueError (a path at task level)."""
    if _is_own_package(value):
        return value
    if _is_uri(value):
        raise _gap(owner, field, _REMOTE_GAP)
    if not job:
        raise ValueError(f"{value} is not a valid URI. Passing directories or modules to be "
                         "dynamically uploaded is only supported at the job level (i.e., passed to "
                         "`ray.init`).")
    return os.path.abspath(value)


def _export_setup_hook(env):
    hook = env.get("worker_process_setup_hook")
    if hook is None:
        return
    env_vars = dict(env.get("env_vars") or {})
    if SETUP_HOOK_ENV_VAR not in env_vars:  # inherited from a job supervisor: keep that one
        if callable(hook):
            from ray_adapter.core import serialization

            import base64  # lazy: keeps `import ray` fast
            blob = base64.b64encode(serialization.dumps_plain(hook)).decode("ascii")
            env_vars[SETUP_HOOK_ENV_VAR] = SETUP_HOOK_PICKLED + blob
            env["worker_process_setup_hook"] = getattr(hook, "__name__", "setup_hook")
        elif isinstance(hook, str):
            env_vars[SETUP_HOOK_ENV_VAR] = hook
        else:
            raise TypeError(f"worker_process_setup_hook must be a function, got {type(hook)}.")
    env["env_vars"] = env_vars


def _injected_job_env(env):
    """Merge the env of a submitted job (``RAY_JOB_CONFIG_JSON_ENV_VAR``) with ``env``."""
    from ray_adapter.core.runtime_env import merge
    from ray_adapter.ray._private.runtime_env.constants import RAY_JOB_CONFIG_JSON_ENV_VAR

    raw = os.environ.get(RAY_JOB_CONFIG_JSON_ENV_VAR)
    if not raw:
        return env
    import json  # lazy: keeps `import ray` fast
    injected = dict(json.loads(raw).get("runtime_env") or {})
    if os.environ.get("RAY_OVERRIDE_JOB_RUNTIME_ENV") == "1":
        return merge(injected, env)
    own_vars, job_vars = env.get("env_vars") or {}, injected.get("env_vars") or {}
    if (set(injected) - {"env_vars"}) & (set(env) - {"env_vars"}) or set(own_vars) & set(job_vars):
        raise ValueError(
            f"Failed to merge the Job's runtime env {injected} with a ray.init's runtime env {env} "
            "because of a conflict. Specifying the same runtime_env fields or the same "
            "environment variable keys is not allowed. Use RAY_OVERRIDE_JOB_RUNTIME_ENV=1 to "
            "instruct Ray to combine Job and Driver's runtime environment in the event of "
            "a conflict.")
    return merge(injected, env)


def for_job(runtime_env):
    """The core's env for ``ray.init(runtime_env=...)`` (None when empty); raises Ray's
    TypeError / ValueError and the gaps named in the module notes."""
    raw = dict(runtime_env or {})
    if isinstance(raw.get("py_modules"), list):
        raw["py_modules"] = [_module_path(m) if isinstance(m, types.ModuleType) else m
                             for m in raw["py_modules"]]
    env = _injected_job_env(_clean(raw))
    if "working_dir" in env:
        env["working_dir"] = _local_or_own("ray.init", "working_dir", env["working_dir"], True)
    if "py_modules" in env:
        modules = []
        for module in env["py_modules"]:
            path = _local_or_own("ray.init", "py_modules", module, True)
            if path.endswith(".whl"):
                raise _gap("ray.init", "py_modules", _WHEEL_GAP)
            if not _is_own_package(path) and not (os.path.isdir(path) or path.endswith(".py")):
                raise ValueError(f"py_modules entry must be a .py file, a directory, or a .whl "
                                 f"file; got {module}")
            modules.append(path)
        env["py_modules"] = modules
    _export_setup_hook(env)
    return env or None


def for_task(runtime_env):
    """The core's env for a task's or actor's ``runtime_env`` option (None when empty).
    Raises TypeError for a value JSON cannot hold (Ray serializes a task's env to JSON)."""
    import json  # lazy: keeps `import ray` fast

    env = _clean(runtime_env)
    try:
        json.dumps(env)
    except TypeError as exc:  # json's own words, as Ray's
        raise TypeError(str(exc)) from None
    hook = env.get("worker_process_setup_hook")
    if hook is not None and not isinstance(hook, str):
        # Ray serializes a task's env to JSON; only ray.init exports a setup hook function.
        raise TypeError(f"Object of type {type(hook).__name__} is not JSON serializable")
    if "working_dir" in env:
        env["working_dir"] = _local_or_own("ray.remote", "working_dir", env["working_dir"], False)
    if "py_modules" in env:
        modules = []
        for module in env["py_modules"]:
            if module.endswith(".whl"):
                raise _gap("ray.remote", "py_modules", _WHEEL_GAP)
            modules.append(_local_or_own("ray.remote", "py_modules", module, False))
        env["py_modules"] = modules
    return env or None
