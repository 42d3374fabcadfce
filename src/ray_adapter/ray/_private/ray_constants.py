"""``ray._private.ray_constants``: the names and fixed values of Ray 2.60 that programs and Ray's
own tests read -- environment variable names, default ports, ID size, KV namespaces, resource
names, process types, default actor and task settings, the logger's format and level. Ray's
settings of its own processes (GCS, raylet, dashboard, log monitor, object store) are gaps
(see the compat matrix).
"""
import logging
import os

from ray_adapter import gaps
from ray_adapter.core.runtime_env import SETUP_HOOK_ENV_VAR
from ray_adapter.ray._private.log_setup import LOGGER_FORMAT, LOGGER_LEVEL  # noqa: F401 - one source

_logger = logging.getLogger("ray._common.utils")  # where Ray's helpers log


def env_integer(key, default):
    """The environment variable ``key`` as an ``int``; ``default`` when it is unset, or not an
    integer (then with a warning on the ``ray`` logger, as Ray)."""
    return _env_number(key, default, int, "an integer")


def env_float(key, default):
    """The environment variable ``key`` as a ``float``; ``default`` when unset or not a number."""
    return _env_number(key, default, float, "a float")


def env_bool(key, default):
    """True when the environment variable ``key`` is ``"1"`` or ``"true"`` (any case), False for
    any other value, ``default`` when it is unset."""
    if key not in os.environ:
        return default
    value = os.environ[key]
    return value == "1" or value.lower() == "true"


def _env_number(key, default, kind, what):
    if key not in os.environ:
        return default
    value = os.environ[key]
    try:
        return kind(value)
    except ValueError:
        _logger.warning(f"Found {key} in environment, but value must be {what}. Got: {value}. "
                        f"Returning provided default {default}.")
        return default


ID_SIZE = 28  # bytes of a unique id (object ids add 4)
DEFAULT_PORT = 6379
DEFAULT_DASHBOARD_PORT = 8265
DEFAULT_DASHBOARD_AGENT_LISTEN_PORT = 52365

RAY_ADDRESS_ENVIRONMENT_VARIABLE = "RAY_ADDRESS"
RAY_NAMESPACE_ENVIRONMENT_VARIABLE = "RAY_NAMESPACE"
RAY_RUNTIME_ENV_ENVIRONMENT_VARIABLE = "RAY_RUNTIME_ENV"
RAY_OVERRIDE_DASHBOARD_URL = "RAY_OVERRIDE_DASHBOARD_URL"
GCS_PORT_ENVIRONMENT_VARIABLE = "RAY_GCS_SERVER_PORT"
RESOURCES_ENVIRONMENT_VARIABLE = "RAY_OVERRIDE_RESOURCES"
LABELS_ENVIRONMENT_VARIABLE = "RAY_OVERRIDE_LABELS"
WORKER_PROCESS_SETUP_HOOK_ENV_VAR = SETUP_HOOK_ENV_VAR

KV_NAMESPACE_CLUSTER = b"cluster"
KV_NAMESPACE_DASHBOARD = b"dashboard"
KV_NAMESPACE_FUNCTION_TABLE = b"fun"
KV_NAMESPACE_HEALTHCHECK = b"healthcheck"
KV_NAMESPACE_JOB = b"job"
KV_NAMESPACE_PACKAGE = None
KV_NAMESPACE_PDB = b"ray_pdb"
KV_NAMESPACE_SESSION = b"session"
KV_NAMESPACE_TRACING = b"tracing"

LOGGER_LEVEL_CHOICES = ["debug", "info", "warning", "error", "critical"]

GPU = "GPU"
NPU = "NPU"
TPU = "TPU"
HPU = "HPU"
NEURON_CORES = "neuron_cores"
DEFAULT_RESOURCES = {"CPU", "GPU", "memory", "object_store_memory"}
MIN_RESOURCE_GRANULARITY = 0.0001
MAX_RESOURCE_QUANTITY = 100e12
MAX_INT64_VALUE = 2 ** 63 - 1

DEFAULT_ACTOR_METHOD_NUM_RETURN_VALS = 1
DEFAULT_TASK_MAX_RETRIES = 3
DEFAULT_MAX_CONCURRENCY_THREADED = 1
# CPUs an actor holds: without resources given, 1 to be scheduled and 0 while it lives (its
# methods use 1); with resources given, what was given for its lifetime (methods 0).
DEFAULT_ACTOR_CREATION_CPU_SIMPLE = 0
DEFAULT_ACTOR_CREATION_CPU_SPECIFIED = 1
DEFAULT_ACTOR_METHOD_CPU_SIMPLE = 1
DEFAULT_ACTOR_METHOD_CPU_SPECIFIED = 0

PROCESS_TYPE_DASHBOARD = "dashboard"
PROCESS_TYPE_DASHBOARD_AGENT = "dashboard_agent"
PROCESS_TYPE_GCS_SERVER = "gcs_server"
PROCESS_TYPE_LOG_MONITOR = "log_monitor"
PROCESS_TYPE_MONITOR = "monitor"
PROCESS_TYPE_PYTHON_CORE_WORKER = "python-core-worker"
PROCESS_TYPE_PYTHON_CORE_WORKER_DRIVER = "python-core-driver"
PROCESS_TYPE_RAYLET = "raylet"
PROCESS_TYPE_RAY_CLIENT_SERVER = "ray_client_server"
PROCESS_TYPE_REAPER = "reaper"
PROCESS_TYPE_REDIS_SERVER = "redis_server"
PROCESS_TYPE_RUNTIME_ENV_AGENT = "runtime_env_agent"
PROCESS_TYPE_WORKER = "worker"

__getattr__ = gaps.module_getattr("ray._private.ray_constants")
