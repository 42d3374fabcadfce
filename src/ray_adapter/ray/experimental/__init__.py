"""``ray.experimental``: only ``ray.experimental.state.api`` (the old home of the State API,
which real workloads still import) is provided; Ray's other experimental APIs are gaps (see
the compat matrix)."""
from ray_adapter import gaps

__getattr__ = gaps.module_getattr("ray.experimental")
