"""``ray._private.runtime_env``: what Ray's runtime-env internals expose that programs import
(:mod:`.constants`, :mod:`.packaging`), and the adapter's own checks of runtime envs
(:mod:`.validation`)."""
from ray_adapter.ray._private.runtime_env import constants, packaging, validation  # noqa: E402,F401 - bound as in Ray
