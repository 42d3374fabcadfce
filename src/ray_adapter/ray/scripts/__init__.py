"""``ray.scripts``: the package of Ray's command-line tool; only :mod:`.scripts` names that
programs import are served (see the compat matrix)."""


# A name Ray does not have here: the ImportError / AttributeError that names Ray's module.
from ray_adapter import gaps as _gaps  # noqa: E402

__getattr__ = _gaps.module_getattr("ray.scripts")
