"""``ray.runtime_env``: :class:`RuntimeEnv` and :class:`RuntimeEnvConfig` (mirror Ray's).

A runtime env is a dict of fields; ``RuntimeEnv(...)`` validates them as Ray does (types,
existing local paths, ``pip``/``uv``/``conda`` exclusive, ``container`` alone) and drops fields
given as ``None`` or empty. What each field does on each backend, and which are gaps, is in
the compat matrix (``options.toml``, the ``runtime_env`` entries); a gap field raises where the
env is used (``ray.init``, ``.remote()``), naming the field.
"""

from ray_adapter import gaps
from ray_adapter.ray._private.runtime_env import validation

_DEFAULT_SETUP_TIMEOUT_S = 600  # RuntimeEnvConfig's default, as Ray's


class RuntimeEnvConfig(dict):
    """Options for setting up a runtime env (mirrors ``ray.runtime_env.RuntimeEnvConfig``).

    ``setup_timeout_seconds``: int seconds, > 0 or -1 (no limit); ``eager_install``: bool;
    ``log_files``: list of str. Raises TypeError / ValueError as Ray does. The embedded
    runtime sets an env up when a worker for it starts (copying files takes far less than any
    timeout); the values are kept and reported by ``get_runtime_context().runtime_env``."""

    known_fields = {"setup_timeout_seconds", "eager_install", "log_files"}

    def __init__(self, setup_timeout_seconds=_DEFAULT_SETUP_TIMEOUT_S, eager_install=True,
                 log_files=None):
        super().__init__(validation.config_values(setup_timeout_seconds, eager_install, log_files))

    @staticmethod
    def parse_and_validate_runtime_env_config(config):
        """A RuntimeEnvConfig from one or a dict (unknown keys are dropped with a warning, as
        Ray logs them); TypeError for anything else."""
        if isinstance(config, RuntimeEnvConfig):
            return config
        return RuntimeEnvConfig(**validation.check_config(config))

    @classmethod
    def default_config(cls):
        return cls()

    def to_dict(self):
        return {k: (list(v) if isinstance(v, list) else v) for k, v in self.items()}


def _validate_field(key, value):
    """Ray's check of one field; returns the value to keep, or None to drop it."""
    if key == "config":
        return RuntimeEnvConfig.parse_and_validate_runtime_env_config(value)
    return validation.check_field(key, value)


class RuntimeEnv(dict):
    """A runtime environment for a job, task or actor (mirrors ``ray.runtime_env.RuntimeEnv``),
    usable wherever a dict is: ``ray.init(runtime_env=...)``, ``.options(runtime_env=...)``.

    Fields: ``working_dir`` (a local directory or .zip, job level only; tasks and actors run
    in a copy of it), ``py_modules`` (local directories, .py files or imported modules, job
    level only), ``excludes`` (gitignore-style patterns left out of both), ``env_vars``
    (``Dict[str, str]``), ``config`` (:class:`RuntimeEnvConfig`), ``worker_process_setup_hook``
    (a callable or ``"module.function"``, run in each worker process at start),
    ``py_executable`` (the command starting worker processes, embedded backend), and ``pip``,
    ``uv``, ``conda``, ``container``, ``image_uri``, ``nsight``, which are gaps raised when the
    task is submitted or the actor created (see the compat matrix). Extra keyword fields are
    kept as given (Ray's plugins).
    """

    known_fields = {"py_modules", "py_executable", "java_jars", "working_dir", "conda", "pip", "uv",
                    "container", "excludes", "env_vars", "_ray_release", "_ray_commit",
                    "_inject_current_ray", "config", "worker_process_setup_hook", "_nsight",
                    "_rocprof_sys", "image_uri"}
    extensions_fields = {"_ray_release", "_ray_commit", "_inject_current_ray"}

    def __init__(self, *, py_modules=None, py_executable=None, working_dir=None, pip=None,
                 conda=None, container=None, env_vars=None, worker_process_setup_hook=None,
                 nsight=None, rocprof_sys=None, config=None, _validate=True, image_uri=None,
                 uv=None, **kwargs):
        super().__init__()
        fields = dict(kwargs)
        for key, value in (("py_modules", py_modules), ("py_executable", py_executable),
                           ("working_dir", working_dir), ("pip", pip), ("uv", uv), ("conda", conda),
                           ("_nsight", nsight), ("_rocprof_sys", rocprof_sys),
                           ("container", container), ("env_vars", env_vars), ("config", config),
                           ("worker_process_setup_hook", worker_process_setup_hook),
                           ("image_uri", image_uri)):
            if value is not None:
                fields[key] = value
        if not _validate:
            dict.update(self, fields)
            return
        if sum(fields.get(k) is not None for k in ("conda", "pip", "uv")) > 1:
            raise ValueError(
                "The 'pip' field, 'uv' field, and 'conda' field of runtime_env cannot be specified "
                f"at the same time.\nspecified pip field: {fields.get('pip')}\nspecified conda "
                f"field: {fields.get('conda')}\nspecified uv field: {fields.get('uv')}\nTo use pip "
                "with conda, please only set the 'conda'field, and specify your pip dependencies "
                "within the conda YAML config dict: see https://conda.io/projects/conda/en/latest/"
                "user-guide/tasks/manage-environments.html#create-env-file-manually")
        if fields.get("container"):
            invalid = set(fields) - {"container", "config", "env_vars"}
            if invalid:
                raise ValueError("The 'container' field currently cannot be used together with "
                                 f"other fields of runtime_env. Specified fields: {invalid}")
        for key, value in fields.items():
            self[key] = value

    def __setitem__(self, key, value):
        if value is None:
            return
        if key in self.known_fields:
            value = _validate_field(key, value)
            if value is None:  # empty env_vars / excludes: dropped, as Ray does
                return
        super().__setitem__(key, value)

    def set(self, name, value):
        self.__setitem__(name, value)

    def get(self, name, default=None, data_class=None):
        if name not in self:
            return default
        return self[name]

    @classmethod
    def deserialize(cls, serialized_runtime_env):
        import json  # lazy: keeps `import ray` fast
        return cls(_validate=False, **json.loads(serialized_runtime_env))

    def serialize(self):
        import json  # lazy: keeps `import ray` fast
        return json.dumps(type(self)(_validate=True, **self), sort_keys=True)

    def to_dict(self):
        out = dict(self)
        if isinstance(out.get("config"), RuntimeEnvConfig):
            out["config"] = out["config"].to_dict()
        return out

    # -- accessors (Ray's) -------------------------------------------------------------------
    def has_working_dir(self):
        return self.get("working_dir") is not None

    def working_dir_uri(self):
        return self.get("working_dir")

    def working_dir(self):
        return self.get("working_dir", "")

    def py_modules(self):
        return list(self.get("py_modules") or [])

    py_modules_uris = py_modules

    def py_executable(self):
        return self.get("py_executable")

    def env_vars(self):
        return dict(self.get("env_vars") or {})

    def has_conda(self):
        return bool(self.get("conda"))

    def has_pip(self):
        return bool(self.get("pip"))

    def has_uv(self):
        return bool(self.get("uv"))

    def has_py_container(self):
        return bool(self.get("container"))

    def nsight(self):
        return self.get("_nsight")

    def image_uri(self):
        return self.get("image_uri")

    def java_jars(self):
        return list(self.get("java_jars") or [])

    def plugin_uris(self):
        return []

    def get_extension(self, key):
        if key not in self.extensions_fields:
            raise ValueError(f"Extension key must be one of {self.extensions_fields}, got: {key}")
        return self.get(key)

    def plugins(self):
        return [(k, v) for k, v in self.items() if k not in self.known_fields]


__getattr__ = gaps.module_getattr("ray.runtime_env")
