"""``ray.experimental.state``: Ray's deprecated alias package of ``ray.util.state``."""
from ray_adapter import gaps as _gaps


# A name Ray does not have here: the ImportError / AttributeError naming Ray's module.
__getattr__ = _gaps.module_getattr("ray.experimental.state")
