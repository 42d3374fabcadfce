"""``ray.cloudpickle.cloudpickle_fast``: the backward-compatible name of the implementation
module, as in cloudpickle 3: it binds ``cloudpickle`` and forwards every other attribute to it."""
from ray_adapter.ray.cloudpickle import cloudpickle


def __getattr__(name):
    return getattr(cloudpickle, name)
