"""``ray.cloudpickle.cloudpickle``: the implementation module (the ``cloudpickle`` package's
``cloudpickle.cloudpickle``, whose public names this module re-exports)."""
from cloudpickle.cloudpickle import *  # noqa: F401,F403
from cloudpickle.cloudpickle import (DEFAULT_PROTOCOL, CloudPickler, Pickler, dump, dumps,  # noqa: F401
                                     list_registry_pickle_by_value, load, loads,
                                     register_pickle_by_value, unregister_pickle_by_value)
