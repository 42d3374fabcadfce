"""Errors for what the adapter does not provide, built from the compat matrix.

Each error names the Ray symbol, says why it is missing and what to use instead, and points to
its matrix entry. The classes subclass the builtin a Ray user's code would catch:
``AttributeError`` (so ``hasattr`` works), ``ModuleNotFoundError`` (so ``try: import ray.serve
except ImportError`` works), ``ImportError`` for ``from ray.x import name`` (so the message
reaches the user) and ``ValueError`` for options.
"""
import os
import sys

from ray_adapter import matrix


class RayAdapterGap(Exception):
    """Mixin base: every gap error carries the matrix qualname it is about."""

    qualname = ""
    #: The matrix has an entry for it, saying why it is missing (else: not a Ray name at all).
    documented = False


class RayAdapterGapError(RayAdapterGap, AttributeError):
    """A Ray attribute the adapter does not provide (a ``gap`` in the compat matrix)."""


class RayAdapterModuleGapError(RayAdapterGap, ModuleNotFoundError):
    """A Ray submodule the adapter does not provide."""


class RayAdapterImportGapError(RayAdapterGap, ImportError):
    """``from <ray module> import name`` of a Ray attribute the adapter does not provide.

    Python's ``from`` statement turns an ``AttributeError`` of the module into its own bare
    ``ImportError: cannot import name ...``, dropping the gap's message; this one (an
    ``ImportError``, which ``from`` lets through) keeps it."""


class RayAdapterOptionError(RayAdapterGap, ValueError):
    """A ``ray.remote`` / ``.options`` / ``ray.init`` option the adapter does not support."""


class RayAdapterExtraMissingError(RayAdapterGap, ModuleNotFoundError):
    """A provided Ray API that needs an optional extra of ray-adapter which is not installed."""


def _message(qualname, entry, what):
    if entry is None:
        reason = f"{what} is not part of the Ray {_ray_version()} API that ray-adapter mirrors"
        return f"{qualname}: {reason}; see {matrix.matrix_ref(qualname)}."
    note = (entry.note or "not implemented by ray-adapter yet").rstrip()
    if not note.endswith("."):
        note += "."
    return (f"{qualname} is not supported by ray-adapter ({entry.status(_backend())}): {note} "
            f"See {matrix.matrix_ref(qualname)}.")


def _backend():
    """The backend the error is about: the running one, else the one ray.init() would pick."""
    from ray_adapter import core

    current = core._current
    name = current.backend_name if current is not None else core.select_backend()
    return name if name in matrix.BACKENDS else matrix.BACKENDS[0]


def _ray_version():
    from ray_adapter import RAY_API_VERSION

    return RAY_API_VERSION


def attribute_gap_error(module, name):
    """The error for ``getattr(<ray module>, name)`` on a name the proxy does not define."""
    qualname = f"{module}.{name}"
    entry = matrix.lookup(module, name) or matrix.module_entry(qualname)
    if entry is not None and entry.status(_backend()) != "gap":
        # Provided, just not bound yet: a submodule Ray too binds only when it is imported
        # (ray.util.collective after a bare `import ray`). Python's own error, as under Ray.
        err = AttributeError(f"module {module!r} has no attribute {name!r}")
        err.name, err.obj = name, None
        return err
    if entry is None:
        err = RayAdapterGapError(f"module {module!r} has no attribute {name!r}")
    else:
        err = RayAdapterGapError(_message(qualname, entry, "attribute"))
        err.documented = True
    err.qualname = qualname
    err.name, err.obj = name, None
    return err


def module_gap_error(module):
    """The error for ``import <module>`` of a Ray submodule the adapter does not provide."""
    entry = matrix.module_entry(module)
    if entry is None:
        message = f"No module named {module!r} (not a module of the Ray API that ray-adapter serves; see {matrix.matrix_ref(module)})"
    else:
        message = _message(module, entry, "module")
    err = RayAdapterModuleGapError(message, name=module)
    err.qualname = module
    return err


def option_gap_error(owner, option, reason):
    """The error for an unsupported option of ``owner`` (e.g. ``ray.remote``)."""
    qualname = f"{owner}({option}=...)"
    err = RayAdapterOptionError(
        f"{owner}: option {option!r} is not supported by ray-adapter: {reason} See {matrix.option_ref(owner, option)}."
    )
    err.qualname = qualname
    return err


def extra_missing_error(qualname, extra, package):
    """The error for calling ``qualname`` without the optional ``package`` it runs on."""
    err = RayAdapterExtraMissingError(
        f"{qualname} needs {package!r}, which is not installed: pip install "
        f"\"ray-adapter[{extra}]\". See {matrix.matrix_ref(qualname)}.", name=package)
    err.qualname = qualname
    return err


def module_getattr(module):
    """A module-level ``__getattr__`` for proxy module ``module``: gap errors from the matrix.

    A submodule of the package that is not imported yet is only an AttributeError: ``from
    package import submodule`` asks for it before importing it (``hasattr``), and the gap
    error would load the whole matrix (tens of milliseconds) on every ``import ray``."""
    package_dirs = None

    def __getattr__(name):
        nonlocal package_dirs
        if name.startswith("__"):
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        if package_dirs is None:
            own = sys.modules.get("ray_adapter." + module)  # "ray.util" -> ray_adapter.ray.util
            package_dirs = list(getattr(own, "__path__", None) or ())
        for folder in package_dirs:
            if os.path.exists(os.path.join(folder, name + ".py")) or \
                    os.path.exists(os.path.join(folder, name, "__init__.py")):
                raise AttributeError(f"module {module!r} has no attribute {name!r}")
        err = attribute_gap_error(module, name)
        if _importing_from(sys._getframe(1)):
            if getattr(err, "documented", False):
                raise _import_gap_error(module, name, err) from None
            # Python's own ImportError would name the proxy's module (ray_adapter.ray...).
            where = getattr(sys.modules.get("ray_adapter." + module), "__file__", None)
            raise ImportError(f"cannot import name {name!r} from {module!r} "
                              f"({where or 'unknown location'})", name=module, path=where) from None
        raise err

    return __getattr__


def _importing_from(frame):
    """``frame``, or the code that called it through a module's ``__getattr__`` wrapping this
    one, is running a ``from ... import name`` statement (its IMPORT_FROM opcode)."""
    import dis  # only on a gap

    while frame is not None and frame.f_code.co_name == "__getattr__":
        frame = frame.f_back
    if frame is None:
        return False
    code = frame.f_code.co_code
    return 0 <= frame.f_lasti < len(code) and code[frame.f_lasti] == dis.opmap["IMPORT_FROM"]


def _import_gap_error(module, name, gap):
    """The ImportError ``from <module> import <name>`` raises for attribute gap ``gap``: its
    message, its qualname."""
    err = RayAdapterImportGapError(str(gap), name=module)
    err.qualname, err.documented = gap.qualname, True
    return err
