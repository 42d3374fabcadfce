"""``ray.runtime_env``: :class:`RuntimeEnv` (env_vars honoured; see the compat matrix)."""
from ray_adapter import gaps


class RuntimeEnv(dict):
    """A runtime environment (mirrors ``ray.runtime_env.RuntimeEnv``): a dict of fields.

    The embedded runtime applies ``env_vars``; any other field raises
    :class:`ray_adapter.gaps.RayAdapterOptionError` where it is used.
    """

    def __init__(self, *, py_modules=None, working_dir=None, pip=None, conda=None, container=None,
                 env_vars=None, worker_process_setup_hook=None, nsight=None, config=None,
                 _validate=True, mpi=None, image_uri=None, uv=None, py_executable=None, **kwargs):
        super().__init__()
        fields = dict(py_modules=py_modules, working_dir=working_dir, pip=pip, conda=conda,
                      container=container, env_vars=env_vars,
                      worker_process_setup_hook=worker_process_setup_hook, nsight=nsight,
                      config=config, mpi=mpi, image_uri=image_uri, uv=uv,
                      py_executable=py_executable, **kwargs)
        if env_vars is not None and not (isinstance(env_vars, dict) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in env_vars.items())):
            raise TypeError("runtime_env['env_vars'] must be of type Dict[str, str]")
        self.update({k: v for k, v in fields.items() if v is not None})

    def env_vars(self):
        return dict(self.get("env_vars") or {})

    def to_dict(self):
        return dict(self)


__getattr__ = gaps.module_getattr("ray.runtime_env")
