"""``ray.util.placement_group``: importable; every symbol is a documented gap for now (see
``compat_matrix/ray.util.placement_group.toml``)."""
from ray_adapter import gaps

__getattr__ = gaps.module_getattr("ray.util.placement_group")
