"""The compat matrix: which Ray symbols the adapter supports, per backend.

Data lives in ``compat_matrix/<module>.toml`` (package data; also reachable from the repository
root as ``compat_matrix/``). It is the single source of truth: proxy modules take their public
surface and their gap errors from it, ``ray-adapter report`` prints it, and the tests fail when
matrix and code disagree.
"""
import collections
import functools
import os

STATUSES = ("supported", "partial", "gap")
MATRIX_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "compat_matrix")
#: Keys of a data-file entry that are not backend statuses.
_ENTRY_FIELDS = ("kind", "note", "api")


class Entry(collections.namedtuple("Entry", "module name kind statuses note extra", defaults=((),))):
    """One symbol, option or submodule of a Ray module and its status per backend (an
    immutable record: a named tuple, not a dataclass, so that ``import ray`` does not load
    ``dataclasses``).

    ``module``, ``name`` and ``kind`` are strings; ``statuses`` holds ``(backend, status)``
    pairs, one per backend of ``backends.toml``; ``note`` says why; ``extra`` the entry's other
    data fields as ``(field, value)`` pairs (e.g. an option's ``supported_values``)."""

    __slots__ = ()

    @property
    def qualname(self):
        return f"{self.module}.{self.name}" if self.name else self.module

    def status(self, backend="embedded"):
        """This entry's status on ``backend`` (KeyError for a backend the matrix lacks)."""
        for name, status in self.statuses:
            if name == backend:
                return status
        raise KeyError(f"the compat matrix has no backend {backend!r} (backends: {', '.join(_backends())})")

    @property
    def available(self):
        """True when some backend provides the symbol (the proxy module must define it)."""
        return any(status != "gap" for _, status in self.statuses)

    def get(self, field, default=None):
        """A data field of the entry other than its statuses (``supported_values``...)."""
        for name, value in self.extra:
            if name == field:
                return value
        return default


#: ``backends.toml`` and ``options.toml`` as JSON, written by ``tools/gen_compat_doc.py`` beside
#: them (``tests/test_matrix.py`` fails when it differs from them): what ``ray.init`` and every
#: ``.options()`` check read, in 0.1 ms, where the TOML parser's import and parse take ~10 ms.
COMPILED_NAME = "compiled.json"


def compiled_data():
    """What :data:`COMPILED_NAME` holds, read from the TOML files: ``{"backends": [...],
    "options": {section: {option: spec}}}``."""
    return {"generated_by": "tools/gen_compat_doc.py from backends.toml and options.toml",
            "backends": list(_load_toml(os.path.join(MATRIX_DIR, "backends.toml"))["backends"]),
            "options": _load_toml(os.path.join(MATRIX_DIR, "options.toml"))}


def write_compiled():
    """Write :data:`COMPILED_NAME` from the TOML files; returns its path."""
    import json

    path = os.path.join(MATRIX_DIR, COMPILED_NAME)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(compiled_data(), fh, indent=1)
        fh.write("\n")
    return path


@functools.lru_cache(maxsize=None)
def _compiled():
    """:data:`COMPILED_NAME`, read once; from the TOML files when it is not there (a checkout
    that never ran the tool). (``json`` is imported here: ``import ray`` loads this module.)"""
    import json

    try:
        with open(os.path.join(MATRIX_DIR, COMPILED_NAME), "rb") as fh:
            return json.load(fh)
    except FileNotFoundError:
        return compiled_data()


def _load_toml(path):
    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11
        import tomli as tomllib
    with open(path, "rb") as fh:
        return tomllib.load(fh)


def _freeze(value):
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _freeze(v)) for k, v in value.items())
    return value


def _entry(module, name, spec, kind=None):
    """An Entry from a data-file table; every backend must have a status."""
    backends = _backends()
    missing = [b for b in backends if b not in spec]
    if missing:
        raise ValueError(f"compat matrix entry {module}.{name} has no status for {missing}")
    statuses = tuple((b, spec[b]) for b in backends)
    extra = tuple((k, _freeze(v)) for k, v in spec.items() if k not in backends and k not in _ENTRY_FIELDS)
    return Entry(module, name, kind or spec.get("kind", ""), statuses, spec.get("note", ""), extra)


@functools.lru_cache(maxsize=None)
def _backends():
    """The backends the matrix gives statuses for (``backends.toml``), read at first use."""
    return tuple(_compiled()["backends"])


@functools.lru_cache(maxsize=None)
def _module_names():
    """The Ray modules the matrix has a data file for (``<module>.toml``; no file is parsed)."""
    return tuple(sorted(filename[:-len(".toml")] for filename in os.listdir(MATRIX_DIR)
                        if filename.startswith("ray") and filename.endswith(".toml")))


@functools.lru_cache(maxsize=None)
def _module_file(module):
    """``compat_matrix/<module>.toml`` parsed, once per process."""
    return _load_toml(os.path.join(MATRIX_DIR, f"{module}.toml"))


@functools.lru_cache(maxsize=None)
def _module(module):
    """``{"module_status", "symbols", "members", "note"}`` of one module, its data file parsed
    at first use (a proxy's missing attribute reads one file, not the whole matrix); None if
    the matrix has no file for it."""
    if module not in _module_names():
        return None
    data = _module_file(module)
    if data["module"] != module:
        raise ValueError(f"compat_matrix/{module}.toml describes module {data['module']!r}")
    symbols = {name: _entry(module, name, spec) for name, spec in data.get("symbols", {}).items()}
    members = {name: _entry(module, name, spec) for name, spec in data.get("members", {}).items()}
    return {"module_status": data.get("module_status", "supported"), "symbols": symbols,
            "members": members, "note": data.get("note", "")}


@functools.lru_cache(maxsize=None)
def modules():
    """``{module name: {"module_status": str, "symbols": {name: Entry}, "members", "note"}}``
    for every data file (all of them parsed: the report and the scanner ask for this)."""
    return {module: _module(module) for module in _module_names()}


@functools.lru_cache(maxsize=None)
def submodule_entries():
    """Ray submodules listed only as whole modules (``[modules]`` in ``ray.toml``)."""
    return {name: _entry(name, "", spec, kind="module")
            for name, spec in _module_file("ray").get("modules", {}).items()}


def symbols(module):
    """``{name: Entry}`` for a Ray module (empty if the matrix does not list it)."""
    return (_module(module) or {}).get("symbols", {})


def members(module):
    """``{"Class.attr": Entry}``: attributes of the module's classes the matrix records
    (``ActorClass.bind``...), from the ``[members]`` tables."""
    return (_module(module) or {}).get("members", {})


def lookup(module, name):
    """The Entry for ``module.name`` (a symbol, or a ``Class.attr`` member), or None."""
    return symbols(module).get(name) or members(module).get(name)


def module_entry(module):
    """The Entry describing a whole Ray module, or None if the matrix does not know it."""
    if module in submodule_entries():
        return submodule_entries()[module]
    data = _module(module)
    if data is not None:
        status = data["module_status"]
        return Entry(module, "", "module", tuple((b, status) for b in _backends()), data["note"])
    return None


def public_names(module):
    """Names a proxy module exports (``__all__``): symbols some backend provides."""
    return sorted(name for name, entry in symbols(module).items() if entry.available)


@functools.lru_cache(maxsize=None)
def _options_data():
    """``options.toml``'s data, once per process (from :data:`COMPILED`)."""
    return _compiled()["options"]


@functools.lru_cache(maxsize=None)
def options(owner):
    """``{option: Entry}`` for ``owner`` (a section of ``options.toml``: "task", "actor",
    "init", "method") from ``options.toml``."""
    return {name: _entry(f"options.{owner}", name, spec, kind="option")
            for name, spec in _options_data().get(owner, {}).items()}


def matrix_ref(qualname):
    """Where a user reads about a symbol: the report command and the data file."""
    module = qualname
    while module not in _module_names() and "." in module:
        module = module.rsplit(".", 1)[0]
    return f"`ray-adapter report --symbol {qualname}` (compat_matrix/{module}.toml)"


@functools.lru_cache(maxsize=None)
def api_levels():
    """``{qualname: "public" | "internal"}``: the ``api`` field of every symbol (and of every
    ``[modules]`` entry of ``ray.toml``, which are public Ray libraries).

    "public" is what Ray itself marks as user API (``__all__``, ``@PublicAPI``,
    ``@DeveloperAPI``, ``@Deprecated``); "internal" is a Ray-internal name a module happens to
    bind (``client_mode_hook``, ``PublicAPI``, ids). Derived by ``tools/ray_api_levels.py``.
    """
    out = {}
    for module in _module_names():
        data = _module_file(module)
        for name, spec in data.get("symbols", {}).items():
            out[f"{module}.{name}"] = spec.get("api", "")
        for name, spec in data.get("modules", {}).items():
            out[name] = spec.get("api", "public")
    return out


def api_level(entry):
    """``"public"``, ``"internal"`` or ``""`` (not recorded) for a symbol Entry."""
    return api_levels().get(entry.qualname, "")


@functools.lru_cache(maxsize=None)
def option_sections():
    """The sections of ``options.toml`` in file order: ``task``, ``actor``, ``init`` and any
    other it has (e.g. ``method``); each is a valid argument of :func:`options`."""
    return tuple(name for name, value in _options_data().items() if isinstance(value, dict))


#: The options sections that list the keywords of each Ray API that takes options.
OPTION_SECTIONS_OF = {"ray.remote": ("task", "actor"), "ray.init": ("init",),
                      "ray.method": ("method",), "ActorMethod.options": ("method",)}
_OPTION_OWNER_SYMBOL = {"ActorMethod.options": "ray.actor.ActorMethod"}


def option_ref(owner_api, option):
    """Where a user reads about option ``option`` of ``owner_api`` (``"ray.remote"``,
    ``"ray.init"``, ``"ray.method"``, ``"ActorMethod.options"``); ``option`` may carry a value
    (``"num_returns='dynamic'"``, ``"runtime_env['pip']"``)."""
    key = option.split("=", 1)[0].split("[", 1)[0]
    sections = [s for s in OPTION_SECTIONS_OF.get(owner_api, ())
                if s in option_sections() and key in options(s)]
    if not sections:
        return matrix_ref(_OPTION_OWNER_SYMBOL.get(owner_api, owner_api))
    query = f"{sections[0]}.{key}" if len(sections) == 1 else f"{owner_api}.{key}"
    tables = ", ".join(f"[{s}.{key}]" for s in sections)
    return f"`ray-adapter report --symbol {query}` (compat_matrix/options.toml {tables})"


def __getattr__(name):
    # BACKENDS is read from its data file at first use, not when ``import ray`` imports this.
    if name == "BACKENDS":
        return _backends()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
