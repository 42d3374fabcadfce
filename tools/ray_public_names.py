"""Enumerate the public names of a real Ray module: run it with an interpreter that has real Ray
(`python tools/ray_public_names.py ray.util`); prints JSON. Used to build and check the compat
matrix (tests/test_matrix.py runs it when RAY_REFERENCE_PYTHON is set).

Rule:
  * module defines __all__  -> exactly the names in __all__ (no filtering; some may fail getattr).
  * otherwise dir(module) names not starting with '_', minus:
      - module objects that are not submodules of this module (stdlib/third-party/other-Ray imports)
      - typing helpers: TYPE_CHECKING, objects from typing/typing_extensions/collections.abc,
        TypeVar/ParamSpec instances, typing aliases (e.g. SchedulingStrategyT)
      - logging.Logger instances (module loggers)
      - classes/functions defined outside Ray (stdlib/third-party), and values of non-Ray,
        non-builtin types (e.g. __future__ features)
      - EXTRA_DROP (documented leftovers)
    plus EXTRA_KEEP (deliberate re-exports of stdlib objects, e.g. cloudpickle.load/loads).
"""
import importlib, inspect, json, logging, sys, types, typing, warnings

EXTRA_DROP = {
    # leaked module-level loop variables: `for k, v in types.__dict__.items()` in cloudpickle.py
    "ray.cloudpickle": {"k", "v"},
    # `import tqdm.auto as real_tqdm` (None when tqdm is not installed): an import either way
    "ray.experimental.tqdm_ray": {"real_tqdm"},
}
EXTRA_KEEP = {
    # `load, loads = pickle.load, pickle.loads` in cloudpickle.py; part of upstream cloudpickle.__all__
    "ray.cloudpickle": {"load", "loads"},
}
BUILTIN_VALUE_TYPES = (int, float, str, bytes, bool, tuple, list, set, frozenset, dict, type(None))
TYPING_MODULES = {"typing", "typing_extensions", "collections.abc", "_collections_abc"}


def _is_ray_module_name(modname):
    modname = modname or ""
    return modname == "ray" or modname.startswith("ray.") or modname.startswith("src.ray.")


def _is_typing_helper(name, v):
    if name == "TYPE_CHECKING":
        return True
    if isinstance(v, (typing.TypeVar, typing.ParamSpec)):
        return True
    if type(v).__module__ in TYPING_MODULES:
        return True
    mod = getattr(v, "__module__", None)
    if mod in TYPING_MODULES and (inspect.isclass(v) or callable(v)):
        return True
    return False


def classify(modname, name, v):
    """Return None to drop, else a category string."""
    if isinstance(v, types.ModuleType):
        return "module" if v.__name__.startswith(modname + ".") else None
    if _is_typing_helper(name, v):
        return None
    if isinstance(v, logging.Logger):
        return None
    if inspect.isclass(v):
        if not _is_ray_module_name(v.__module__):
            return None
        return "exception" if issubclass(v, BaseException) else "class"
    if callable(v):
        return "function" if _is_ray_module_name(getattr(v, "__module__", None)) else None
    if isinstance(v, BUILTIN_VALUE_TYPES):
        return "constant"
    t = type(v)
    if _is_ray_module_name(t.__module__):
        return "constant"
    desc = getattr(v, "DESCRIPTOR", None)  # protobuf enum wrappers generated from Ray's .proto
    if desc is not None and getattr(desc, "full_name", "").startswith("ray."):
        return "constant"
    return None


def public_names(modname):
    import ray  # noqa: F401  (same import order as a user program)
    mod = importlib.import_module(modname)
    out = {}
    if hasattr(mod, "__all__"):
        for n in mod.__all__:
            try:
                v = getattr(mod, n)
                out[n] = {"cat": classify(modname, n, v) or "other", "err": None, "type": type(v).__name__,
                          "origin": getattr(v, "__module__", None) if not isinstance(v, types.ModuleType) else v.__name__}
            except Exception as e:  # lazily imported / missing names listed in __all__
                out[n] = {"cat": "unresolved", "err": f"{type(e).__name__}: {e}", "type": None, "origin": None}
        return {"has_all": True, "names": out}
    for n in dir(mod):
        if n.startswith("_"):
            continue
        v = getattr(mod, n)
        c = classify(modname, n, v)
        if n in EXTRA_KEEP.get(modname, ()):
            c = c or "function"
        if n in EXTRA_DROP.get(modname, ()):
            c = None
        if c is None:
            continue
        out[n] = {"cat": c, "err": None, "type": type(v).__name__,
                  "origin": getattr(v, "__module__", None) if not isinstance(v, types.ModuleType) else v.__name__}
    return {"has_all": False, "names": out}


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)
    print(json.dumps(public_names(sys.argv[1])))
