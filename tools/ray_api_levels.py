"""Classify the names of real Ray modules as user-facing ("public") or Ray internals ("internal").

Run with an interpreter that has real Ray: ``python tools/ray_api_levels.py ray ray.util ...``
prints ``{module: {name: "public" | "internal"}}`` as JSON for every name that
``tools/ray_public_names.py`` enumerates. ``tools/update_matrix_api.py`` writes the result
into the compat matrix (the ``api`` field of each symbol); ``tests/test_matrix.py`` checks the
matrix against it when ``RAY_REFERENCE_PYTHON`` is set.

Rule (what Ray itself marks as public):
  * a name in the module's ``__all__`` that is not ``_private`` (dunders such as
    ``__version__`` are public) is public: Ray exports it
    deliberately (``ray.get``, ``ray.util.placement_group``, submodules such as ``ray.util``);
  * otherwise a name is public when its object carries one of Ray's API annotations
    (``@PublicAPI``, ``@DeveloperAPI`` or ``@Deprecated``, from ``ray.util.annotations``; Ray's
    API reference documents exactly these) *on the object itself* and the object is defined in
    this module; a re-export of another module's object (``ray.actor.PlacementGroupSchedulingStrategy``)
    is an internal import, documented where it is defined;
  * ``ray.cloudpickle`` is Ray's vendored copy of cloudpickle, which has no ``__all__`` and no
    annotations: its public names are upstream cloudpickle's ``__all__`` (CLOUDPICKLE_API);
  * a submodule bound as an attribute but not listed (``ray.exceptions`` is not in
    ``ray.__all__``) is public when it has public names of its own;
  * everything else (``client_mode_hook``, ``PublicAPI`` itself, constants, typing helpers,
    ids of Ray's core worker) is internal.
"""
import importlib
import json
import logging
import os
import sys
import types
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ray_public_names  # noqa: E402  (sibling tool: the name set of each module)

ANNOTATIONS = ("PublicAPI", "DeveloperAPI", "Deprecated")
#: upstream cloudpickle's ``__all__`` (cloudpickle 3.x ``cloudpickle/__init__.py``).
CLOUDPICKLE_API = {"Pickler", "CloudPickler", "dumps", "loads", "dump", "load",
                   "register_pickle_by_value", "unregister_pickle_by_value"}


def _annotation(obj):
    """Ray's annotation of ``obj`` itself (not inherited from a base class), or None."""
    try:
        marker = getattr(obj, "_annotated", None)
        kind = getattr(obj, "_annotated_type", None)
        name = getattr(obj, "__name__", None)
    except Exception:  # noqa: BLE001 - exotic objects (Cython descriptors)
        return None
    if marker is None or marker != name or kind is None:
        return None
    return getattr(kind, "value", None)


def _defined_in(obj, modname):
    origin = getattr(obj, "__module__", None)
    return origin == modname


def _private(name):
    """``_config`` is private; dunders such as ``__version__`` are not."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def levels(modname, submodules=True):
    """``{name: "public" | "internal"}`` for the public-name set of ``modname``, plus the
    submodules ``import ray`` binds as attributes without listing them (``ray.exceptions``):
    public when they define public names themselves."""
    names = ray_public_names.public_names(modname)["names"]
    mod = importlib.import_module(modname)
    exported = set(getattr(mod, "__all__", ()))
    if modname == "ray.cloudpickle":
        exported = CLOUDPICKLE_API
    out = {}
    for name in names:
        if name in exported and not _private(name):
            out[name] = "public"
            continue
        try:
            obj = getattr(mod, name)
        except Exception:  # noqa: BLE001 - unresolvable names listed in __all__
            out[name] = "internal"
            continue
        if isinstance(obj, types.ModuleType):
            out[name] = "internal"
            continue
        annotated = _annotation(obj) in ANNOTATIONS
        out[name] = "public" if annotated and _defined_in(obj, modname) else "internal"
    for name, obj in (vars(mod).items() if submodules else ()):
        if (name in out or _private(name) or not isinstance(obj, types.ModuleType)
                or obj.__name__ != f"{modname}.{name}"):
            continue
        inner = levels(obj.__name__, submodules=False).values()
        out[name] = "public" if "public" in inner else "internal"
    return out


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)
    print(json.dumps({m: levels(m) for m in sys.argv[1:]}, indent=1, sort_keys=True))
