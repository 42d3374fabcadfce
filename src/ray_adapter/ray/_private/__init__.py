"""``ray._private``: the private names real workloads import (kept importable).

As after Ray's ``import ray``, ``ray._private.state``, ``ray._private.services``,
``ray._private.ray_constants`` and ``ray._private.runtime_env`` are bound attributes (verl calls ``ray._private.state.state.placement_group_table`` after a bare
``import ray``); the Ray-internal modules the adapter does not provide are gaps in the compat
matrix (``ray.toml``).
"""
from ray_adapter import gaps as _gaps
from ray_adapter.ray._private import ray_constants, runtime_env, services, state  # noqa: F401

__getattr__ = _gaps.module_getattr("ray._private")
