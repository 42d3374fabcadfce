"""``ray.cloudpickle``: Ray's vendored cloudpickle, served by the ``cloudpickle`` package.

Ray 2.60 vendors cloudpickle 3.1 under this name; the adapter re-exports the installed
``cloudpickle`` (>= 3.0, an install requirement) with the same names: ``dumps(obj,
protocol=None, buffer_callback=None) -> bytes``, ``dump(obj, file, ...)``, ``loads`` /
``load`` (``pickle``'s), ``CloudPickler`` / ``Pickler``, ``register_pickle_by_value(module)``,
``unregister_pickle_by_value(module)``, ``list_registry_pickle_by_value()``,
``DEFAULT_PROTOCOL`` and the module's other public helpers; ``PicklingError`` is
``pickle.PicklingError``. Bytes are interchangeable with ``cloudpickle``'s of the same version.
Ray's own additions ``dumps_debug`` / ``dump_debug`` are gaps (see the compat matrix).
"""
from pickle import PicklingError  # noqa: F401 - Ray's ray.cloudpickle binds it

from cloudpickle.cloudpickle import *  # noqa: F401,F403 - the vendored module's public names
from cloudpickle.cloudpickle import (DEFAULT_PROTOCOL, CloudPickler, Pickler, dump, dumps,  # noqa: F401
                                     list_registry_pickle_by_value, load, loads,
                                     register_pickle_by_value, unregister_pickle_by_value)

from ray_adapter import gaps as _gaps
from ray_adapter.ray.cloudpickle import cloudpickle, cloudpickle_fast  # noqa: F401,E402

__getattr__ = _gaps.module_getattr("ray.cloudpickle")
