"""The status of one use of Ray, read from the compat matrix.

A :class:`Classifier` answers, for one backend:

* :meth:`~Classifier.name` — a dotted Ray name as code reaches it (``ray.util.placement_group``,
  ``ray.exceptions.RayTaskError``, an ``import ray.serve``): the matrix entry of the longest
  prefix the matrix knows (a symbol, a module with a data file, or a whole-module entry of
  ``ray.toml``). A name the matrix does not list (a Ray internal such as
  ``ray._private.services``) is ``gap`` when the adapter's ``ray`` package does not provide it
  (the code would fail) and ``unknown`` when it does (provided, but unchecked against Ray).
* :meth:`~Classifier.option` — a keyword of ``ray.remote`` / ``.options`` / ``ray.init`` /
  ``ray.method``, from ``options.toml`` (any section it has). With a literal value the
  adapter's own option validator decides, so the scan agrees with what would run:
  ``scheduling_strategy="SPREAD"`` is supported although the option is ``partial``, and
  ``num_returns="streaming"`` is a gap.

Statuses are never hard-coded here: they come from the matrix (or the validator that reads it).
"""
import functools
import importlib
import importlib.util
import inspect
import types
from dataclasses import dataclass

from ray_adapter import gaps, matrix

STATUSES = ("supported", "partial", "gap", "unknown")
#: Marker for an option value that is not a Python literal.
NOT_LITERAL = object()


@dataclass(frozen=True)
class Verdict:
    """What a use resolves to: the matrix name (``ray.get``, ``task.num_cpus``), its kind
    (``function``, ``module``, ``option``, ...), status and the reason to show."""

    symbol: str
    kind: str
    status: str
    reason: str


class Classifier:
    """Statuses for one backend (``"embedded"`` or ``"yuanrong"``); answers are cached."""

    def __init__(self, backend="embedded"):
        if backend not in matrix.BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; known: {', '.join(matrix.BACKENDS)}")
        self.backend = backend
        self._names = {}
        self._options = {}

    # -- names -------------------------------------------------------------------------------
    def name(self, dotted, module_parts=1):
        """Verdict for ``dotted`` (``"ray.util.placement_group"``). The first ``module_parts``
        components are known to be modules (an ``import`` or the ``from`` part of one)."""
        key = (dotted, module_parts)
        if key not in self._names:
            self._names[key] = self._resolve(dotted.split("."), module_parts)
        return self._names[key]

    def _resolve(self, parts, module_parts):
        files = matrix.modules()
        whole = matrix.submodule_entries()
        module = "ray"
        for i in range(1, len(parts)):
            name, sub = parts[i], f"{module}.{parts[i]}"
            entry = matrix.lookup(module, name)
            as_module = i < module_parts or entry is None or entry.kind == "module" or (
                i + 1 < len(parts) and parts[i + 1] in files.get(sub, {}).get("symbols", {}))
            if sub in files and as_module:
                module = sub
                continue
            if sub in whole:
                return self._entry(whole[sub], "module")
            if entry is not None:
                return self._entry(entry, entry.kind)
            if _has_data_files_under(sub, files, whole):
                # A package with no data file of its own whose submodules have one
                # (ray._private -> ray._private.runtime_env.constants): walk on.
                module = sub
                continue
            if module in files and i >= module_parts and name[:1].isupper():
                # The data file lists every class and constant Ray's module defines: Ray lacks
                # this one too (a lower-case name may be a submodule the file does not list).
                return self._not_in_ray(".".join(parts), module, name)
            return self._outside_matrix(".".join(parts), module)
        entry = matrix.module_entry(module)
        if entry is None:  # the walk ended on such a package (import ray._private)
            return self._outside_matrix(".".join(parts), module)
        return self._entry(entry, "module")

    def _entry(self, entry, kind):
        status = entry.status(self.backend)
        return Verdict(entry.qualname, kind or "symbol", status, _sentence(entry.note))

    def _not_in_ray(self, dotted, module, name):
        return Verdict(dotted, "internal", "unknown",
                       f"Ray {_ray_version()}'s {module} has no name {name!r} (the compat matrix lists "
                       "every name it defines): using it raises AttributeError under Ray too (in an "
                       "annotation that is never evaluated it is harmless).")

    def _outside_matrix(self, dotted, known_module):
        where = f"not a public name of Ray {_ray_version()}'s {known_module} (not in the compat matrix)"
        if _proxy_provides(dotted):
            return Verdict(dotted, "internal", "unknown",
                           f"{where}; ray-adapter has a name for it, but its behaviour is not checked "
                           "against Ray's.")
        return Verdict(dotted, "internal", "gap",
                       f"{where}, and ray-adapter does not provide it: using it raises "
                       "AttributeError / ModuleNotFoundError. Use a public Ray API instead.")

    # -- options -----------------------------------------------------------------------------
    def option_sections(self):
        return matrix.option_sections()

    def has_option(self, section, key):
        return key in matrix.options(section)

    def option(self, section, key, value=NOT_LITERAL):
        """Verdict for keyword ``key`` of options section ``section`` (``task``, ``actor``,
        ``init``, ``method``, ...); ``value`` is its literal value or :data:`NOT_LITERAL`."""
        try:
            cache_key = (section, key, repr(value) if value is not NOT_LITERAL else None)
        except Exception:  # noqa: BLE001 - exotic literal reprs
            cache_key = None
        if cache_key is not None and cache_key in self._options:
            return self._options[cache_key]
        verdict = self._option(section, key, value)
        if cache_key is not None:
            self._options[cache_key] = verdict
        return verdict

    def _option(self, section, key, value):
        symbol = f"{section}.{key}"
        entry = matrix.options(section).get(key)
        if entry is None:
            return Verdict(symbol, "option", "unknown",
                           f"not a keyword of {_owner_api(section)} in Ray {_ray_version()}: Ray rejects it too "
                           f"(valid ones: `ray-adapter report --symbol {section}.<name>`).")
        status = entry.status(self.backend)
        note = _sentence(entry.note)
        if value is NOT_LITERAL:
            return Verdict(symbol, "option", status, note)
        ruling = _validator_ruling(section, key, value, self.backend)
        if ruling is None:
            return Verdict(symbol, "option", status, note)
        verdict, message = ruling
        if verdict == "invalid":
            return Verdict(symbol, "option", "unknown", f"Ray rejects this value too: {message}")
        if verdict == "gap":
            # The validator's own words: why this value, and where the entry is.
            why = message.split(" is not supported by ray-adapter: ", 1)[-1].strip()
            return Verdict(symbol, "option", "gap", why or note)
        if verdict == "supported" and status != "supported":
            return Verdict(symbol, "option", "supported", f"this value is fully supported. {note}".strip())
        return Verdict(symbol, "option", status if verdict == "partial" else verdict, note)


def _has_data_files_under(package, files, whole):
    """True when the matrix has a data file or a whole-module entry below ``package``."""
    prefix = package + "."
    return any(name.startswith(prefix) for name in files) or any(name.startswith(prefix) for name in whole)


def _owner_api(section):
    return {"task": "ray.remote (functions)", "actor": "ray.remote (classes)", "init": "ray.init",
            "method": "ray.method / ActorMethod.options"}.get(section, section)


def _sentence(note):
    note = (note or "").strip()
    return note if not note or note.endswith((".", "!", "?")) else note + "."


def _ray_version():
    from ray_adapter import RAY_API_VERSION

    return RAY_API_VERSION


@functools.lru_cache(maxsize=None)
def _proxy_provides(dotted):
    """True when the adapter's proxy ``ray`` package has ``dotted`` (imports only the adapter's
    own modules, never user code)."""
    parts = dotted.split(".")
    target = None
    for i in range(len(parts), 0, -1):
        modname = "ray_adapter." + ".".join(parts[:i])
        try:
            if importlib.util.find_spec(modname) is None:
                continue
            target = importlib.import_module(modname)
        except (ImportError, ValueError):
            continue
        rest = parts[i:]
        break
    if target is None:
        return False
    for attr in rest:
        try:
            if isinstance(target, types.ModuleType):
                target = getattr(target, attr)  # a module's __getattr__ answers for its gaps
            else:
                # Never computed: a property may start the runtime (global_worker.node...).
                target = inspect.getattr_static(target, attr)
                if isinstance(target, property):
                    return True  # it exists; what it returns is known only by running it
        except (AttributeError, gaps.RayAdapterGap):
            return False
        except Exception:  # noqa: BLE001 - a proxy attribute that fails to compute
            return False
    return True


def _check_init_address(address):
    """ray.init's own address check (Ray Client ``ray://`` addresses are a gap). Only its gap
    error counts: whether ``"auto"`` finds a cluster depends on where the code will run."""
    try:
        from ray_adapter.ray._private import worker
    except ImportError:
        return
    check = getattr(worker, "_check_address", None)
    if check is None:
        return
    try:
        check(address)
    except gaps.RayAdapterOptionError:
        raise
    except Exception:  # noqa: BLE001 - environment-dependent outcomes (no cluster to attach to)
        pass


def _validator_ruling(section, key, value, backend):
    """Run the adapter's option validator (``ray._private.options.check``) on one literal
    option: ``("supported" | "partial" | "gap" | "invalid", message)``, or None when it cannot
    judge this section. Nothing is started: the validator only reads the matrix."""
    try:
        from ray_adapter.ray._private import options as validator
    except ImportError:
        return None
    try:
        notes = validator.partial_notes(section, {key: value}, backend=backend)
        if section == "init" and key == "address" and isinstance(value, str):
            _check_init_address(value)
    except gaps.RayAdapterOptionError as exc:
        return "gap", str(exc)
    except (ValueError, TypeError) as exc:
        return "invalid", str(exc)
    except Exception:  # noqa: BLE001 - a section the validator does not know (KeyError, ...)
        return None
    # A partial option whose value the adapter honours only in part.
    return ("partial", notes[0]) if notes else ("supported", "")
