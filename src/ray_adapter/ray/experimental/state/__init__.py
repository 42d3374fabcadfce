"""``ray.experimental.state``: Ray's deprecated alias package of ``ray.util.state``."""


# A name Ray does not have here: the ImportError / AttributeError that names Ray's module.
from ray_adapter import gaps as _gaps  # noqa: E402

__getattr__ = _gaps.module_getattr("ray.experimental.state")
