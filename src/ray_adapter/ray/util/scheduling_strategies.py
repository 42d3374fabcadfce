"""``ray.util.scheduling_strategies``: importable; every symbol is a documented gap for now (see
``compat_matrix/ray.util.scheduling_strategies.toml``)."""
from ray_adapter import gaps

__getattr__ = gaps.module_getattr("ray.util.scheduling_strategies")
