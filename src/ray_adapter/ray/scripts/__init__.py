"""``ray.scripts``: the package of Ray's command-line tool; only :mod:`.scripts` names that
programs import are served (see the compat matrix)."""
from ray_adapter import gaps as _gaps


# A name Ray does not have here: the ImportError / AttributeError naming Ray's module.
__getattr__ = _gaps.module_getattr("ray.scripts")
