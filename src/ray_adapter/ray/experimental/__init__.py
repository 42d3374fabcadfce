"""``ray.experimental``: ``ray.experimental.state.api`` (the old home of the State API, which
real workloads still import), ``ray.experimental.tqdm_ray`` and
``ray.experimental.compiled_dag_ref`` (compiled graphs' results) are provided; Ray's other
experimental APIs are gaps (see the compat matrix)."""
import sys

from ray_adapter import gaps

_gap_getattr = gaps.module_getattr("ray.experimental")


def __getattr__(name):
    if name == "tqdm_ray":  # Ray's `import ray` binds it; here at first use
        import ray_adapter.ray.experimental.tqdm_ray  # not `from . import`: it asks this __getattr__

        return sys.modules["ray_adapter.ray.experimental.tqdm_ray"]
    if name == "compiled_dag_ref":  # bound by Ray's `import ray` too; here at first use
        import ray_adapter.ray.experimental.compiled_dag_ref  # noqa: F401

        return sys.modules["ray_adapter.ray.experimental.compiled_dag_ref"]
    return _gap_getattr(name)
