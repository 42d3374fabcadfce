"""``ray._private.runtime_env.constants``: names Ray's runtime-env machinery reads.

``RAY_JOB_CONFIG_JSON_ENV_VAR`` names the environment variable through which a submitted job's
config (its runtime env) reaches the driver: ``ray.init`` merges that env with its own, as Ray
does. The plugin constants are Ray's values; the adapter has no runtime-env plugins (an
unknown runtime_env field raises the documented gap).
"""
from ray_adapter import gaps as _gaps

RAY_JOB_CONFIG_JSON_ENV_VAR = "RAY_JOB_CONFIG_JSON_ENV_VAR"
RAY_RUNTIME_ENV_PLUGINS_ENV_VAR = "RAY_RUNTIME_ENV_PLUGINS"
RAY_RUNTIME_ENV_PLUGIN_DEFAULT_PRIORITY = 10
RAY_RUNTIME_ENV_PLUGIN_MAX_PRIORITY = 100
RAY_RUNTIME_ENV_PLUGIN_MIN_PRIORITY = 0
RAY_RUNTIME_ENV_CLASS_FIELD_NAME = "class"
RAY_RUNTIME_ENV_PRIORITY_FIELD_NAME = "priority"
RAY_RUNTIME_ENV_PLUGIN_SCHEMAS_ENV_VAR = "RAY_RUNTIME_ENV_PLUGIN_SCHEMAS"
RAY_RUNTIME_ENV_PLUGIN_SCHEMA_SUFFIX = ".json"


# A name Ray does not have here: the ImportError / AttributeError naming Ray's module.
__getattr__ = _gaps.module_getattr("ray._private.runtime_env.constants")
