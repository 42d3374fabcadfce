"""The import hook: a ``MetaPathFinder`` that serves the adapter's proxy modules as ``ray``.

``ray`` and every ``ray.X`` name resolve to the one canonical module ``ray_adapter.ray.X`` (the
same object under both names, so classes are never loaded twice). While the finder is active,
each proxy module is *published* under its Ray name once it has run (:func:`publish`): it is
``sys.modules["ray.X"]`` from then on, and the classes it defines say ``__module__ ==
"ray.X"``, as Ray's do (tracebacks print ``ray.exceptions.GetTimeoutError: ...``, ``repr`` of a
class names ``ray.actor.ActorHandle``), and pickle by reference under that name in any process
whose ``ray`` is the adapter's (every process the adapter starts). A Ray submodule the adapter
does not provide raises :class:`ray_adapter.gaps.RayAdapterModuleGapError`, a
``ModuleNotFoundError`` subclass, with the reason recorded in the compat matrix.

The finder also answers ``importlib.metadata`` queries for the ``ray`` distribution, so library
availability checks (``find_spec("ray")``, ``version("ray")``) see Ray.

This module is imported at every interpreter start that has RAY_BACKEND=yuanrong, so it
imports only what the interpreter has loaded anyway (importlib.abc alone would cost ~20 ms):
the finder is duck-typed, and heavier modules are imported when ``ray`` is.
"""
import _thread
import importlib.machinery
import os
import sys

PROXY_PACKAGE = "ray_adapter.ray"
_PROXY_PREFIX = PROXY_PACKAGE + "."
_install_lock = _thread.RLock()


def owns(fullname):
    """True for ``ray`` and ``ray.*`` only (never ``ray_adapter`` or ``raydp``)."""
    return fullname == "ray" or fullname.startswith("ray.")


def proxy_name(fullname):
    """``ray.util.queue`` -> ``ray_adapter.ray.util.queue``."""
    return PROXY_PACKAGE + fullname[len("ray"):]


class RayProxyFinder:
    """Finder and loader for ``ray`` / ``ray.*``; one instance is installed per interpreter."""

    _ray_adapter_finder = True  # marker: recognised across reloads of this module

    def __init__(self):
        self.active = True

    # -- finder ----------------------------------------------------------------------------
    def find_spec(self, fullname, path=None, target=None):
        if not self.active:
            return None
        if fullname == PROXY_PACKAGE or fullname.startswith(_PROXY_PREFIX):
            return _publishing_spec(fullname, path)
        if not owns(fullname):
            return None
        target_spec = _proxy_spec(proxy_name(fullname))
        if target_spec is None:
            # As with real Ray, a Ray module that exists answers with a spec (importing it then
            # raises why it cannot be used here); a name Ray does not have answers None.
            from ray_adapter import matrix

            if matrix.module_entry(fullname) is None:
                return None
            return importlib.machinery.ModuleSpec(fullname, _GapLoader(), is_package=True)
        return importlib.machinery.ModuleSpec(
            fullname, self, is_package=target_spec.submodule_search_locations is not None
        )

    def find_distributions(self, context=None):
        """Answer ``importlib.metadata`` for the ``ray`` distribution while the hook is active."""
        if not self.active:
            return iter(())
        name = getattr(context, "name", None)
        if name is not None and name.lower().replace("-", "_") != "ray":
            return iter(())
        from ray_adapter import _distribution

        return iter((_distribution.RayShimDistribution(),))

    # -- loader ----------------------------------------------------------------------------
    def create_module(self, spec):
        import importlib

        module = importlib.import_module(proxy_name(spec.name))
        spec.loader_state = module.__spec__
        return module

    def get_code(self, fullname):
        """The code object of ``fullname``'s proxy module (``python -m ray.X``: runpy runs it
        as ``__main__``); None where it has none."""
        spec = _proxy_spec(proxy_name(fullname))
        if spec is None or not hasattr(spec.loader, "get_code"):
            return None
        return spec.loader.get_code(spec.name)

    def exec_module(self, module):
        # The import machinery stamped the alias spec on the canonical module; give the module
        # back its own spec so reloads and pickling keep seeing ``ray_adapter.ray...``.
        alias_spec = module.__spec__
        if alias_spec is not None and alias_spec.loader_state is not None:
            module.__spec__ = alias_spec.loader_state
            _alias_rebound_submodules(alias_spec.name, module)
            # Proxy modules imported before the finder was active are published now.
            for name, loaded in list(sys.modules.items()):
                if name.startswith(PROXY_PACKAGE) and loaded is not None:
                    publish(loaded)


def _publishing_spec(fullname, path):
    """The spec of proxy module ``fullname`` as the path finder gives it, its source loader
    replaced by :class:`_PublishingLoader` so that the module is published once it has run
    (:func:`publish`). Another kind of loader is left as it is: such a module is published at
    the next ``import ray`` / ``import ray.X`` the hook serves."""
    spec = importlib.machinery.PathFinder.find_spec(fullname, path)
    if spec is not None and type(spec.loader) is importlib.machinery.SourceFileLoader:
        spec.loader = _PublishingLoader(spec.loader.name, spec.loader.path)
    return spec


class _PublishingLoader(importlib.machinery.SourceFileLoader):
    """The source loader of a proxy module, which publishes the module once it has run. A
    subclass, not a wrapper: whatever inspects loaders by type (``pkg_resources``' providers,
    ``importlib.resources``, ``copy``) sees a ``SourceFileLoader``."""

    def exec_module(self, module):
        super().exec_module(module)
        publish(module)


#: Each class :func:`publish` renamed -> the proxy module that defines it. The adapter's own
#: pickler (``core.serialization``) refers to such a class there (:func:`canonical_class`), not
#: by its Ray name: what a worker sends loads in any process that has ray-adapter, hook or not
#: (a driver that uses ``ray_adapter.ray`` directly, as the test suite's in-process tests do).
PUBLISHED = {}


def canonical_class(module, qualname):
    """The class ``qualname`` of proxy module ``module`` (how the adapter's pickles name a
    published class); raises ImportError / AttributeError as unpickling a missing class does."""
    from importlib import import_module

    value = import_module(module)
    for part in qualname.split("."):
        value = getattr(value, part)
    return value


def publish(module):
    """Give proxy module ``module`` (``ray_adapter.ray.X``) its Ray name: registered as
    ``sys.modules["ray.X"]``, and each class it defines (whose ``__module__`` is the module's
    own name) named ``ray.X``, so that its name, its ``repr`` and its pickles read as Ray's
    and resolve back to the same class (``pickle`` and cloudpickle look the class up in
    ``sys.modules`` under that name). Nothing is done while another ``ray`` (real Ray) is
    imported, nor for a Ray name already taken; idempotent."""
    name = getattr(module, "__name__", "")
    if not (name == PROXY_PACKAGE or name.startswith(_PROXY_PREFIX)):
        return
    current = sys.modules.get("ray")
    if current is not None and current is not sys.modules.get(PROXY_PACKAGE):
        return
    alias = "ray" + name[len(PROXY_PACKAGE):]
    if sys.modules.setdefault(alias, module) is not module:
        return
    for value in list(vars(module).values()):
        if not (isinstance(value, type) and value.__module__ == name and _found_as(module, value)):
            continue  # (a class not found by its name there, pickled by value, keeps its own)
        first_line = vars(value).get("__firstlineno__")  # 3.13 drops it with a new __module__
        try:
            value.__module__ = alias
        except (AttributeError, TypeError):  # a class that does not take it keeps its own
            continue
        if first_line is not None:
            value.__firstlineno__ = first_line  # (inspect.getsource needs it)
        PUBLISHED[value] = name


def _found_as(module, cls):
    """True when ``cls`` is what its ``__qualname__`` names in ``module`` (what pickling by
    name needs: ``ray.util.queue.Empty``, not the raw class behind a ``@ray.remote`` name)."""
    value = module
    for part in cls.__qualname__.split("."):  # (vars: no module __getattr__ runs, no gap error)
        value = vars(value).get(part)
        if value is None:
            return False
    return value is cls


def _proxy_spec(name):
    """The spec of proxy module ``name`` (``ray_adapter.ray...``), or None where the proxy has
    none: ``importlib.util.find_spec`` for a module of our own package on disk, without
    ``importlib.util`` (on Python 3.9 it loads ``typing``, ~6 ms of ``import ray``)."""
    module = sys.modules.get(name)
    if module is not None:
        return module.__spec__
    parent = sys.modules.get(name.rpartition(".")[0])
    if parent is None:
        from importlib import import_module

        parent = import_module(name.rpartition(".")[0])
    path = getattr(parent, "__path__", None)
    if path is None:  # the parent is a module, not a package: nothing below it
        return None
    return importlib.machinery.PathFinder.find_spec(name, path)


def _alias_rebound_submodules(alias, package):
    """Register the already-imported submodules of a proxy package whose attribute the package
    rebinds (``ray.util.placement_group`` is a module, but ``ray.util.placement_group`` the
    attribute is the function) under their ``ray.*`` names, as they are in real Ray: a later
    ``import ray.util.placement_group`` then finds the module in ``sys.modules`` and the import
    system does not overwrite the function with the module."""
    prefix = package.__name__ + "."
    for name, value in list(vars(package).items()):
        canonical = sys.modules.get(prefix + name)
        if canonical is not None and value is not canonical:
            sys.modules.setdefault(f"{alias}.{name}", canonical)


class _GapLoader:
    """Loader of a Ray module the adapter does not provide: importing it raises the gap error
    (a ModuleNotFoundError subclass that names the reason and the matrix entry)."""

    def create_module(self, spec):
        from ray_adapter import gaps

        raise gaps.module_gap_error(spec.name)

    def exec_module(self, module):  # pragma: no cover - create_module always raises
        raise ImportError(module.__name__)


def installed_finder():
    """The active finder instance in ``sys.meta_path``, or None."""
    for finder in sys.meta_path:
        if getattr(finder, "_ray_adapter_finder", False):
            return finder
    return None


def install():
    """Install the finder at ``sys.meta_path[0]``; idempotent. Returns the finder.

    If a module named ``ray`` that is not the adapter's was imported before this call, that
    module stays in use: a ``RuntimeWarning`` names it (``RuntimeError`` when
    ``RAY_ADAPTER_STRICT=1``), because swapping it silently would mix two Rays in one process.
    """
    with _install_lock:
        finder = installed_finder()
        if finder is None:
            finder = RayProxyFinder()
            sys.meta_path.insert(0, finder)
        finder.active = True
        existing = sys.modules.get("ray")
        if existing is not None and not getattr(existing, "__name__", "").startswith(PROXY_PACKAGE):
            where = getattr(existing, "__file__", None) or repr(existing)
            message = (
                f"ray-adapter: 'ray' was already imported from {where} before the import hook "
                "was installed, so this process keeps using that module. Set RAY_BACKEND=yuanrong "
                "in the environment (or import ray_adapter.auto first) before anything imports ray."
            )
            if os.environ.get("RAY_ADAPTER_STRICT", "") == "1":
                raise RuntimeError(message)
            import warnings

            warnings.warn(message, RuntimeWarning, stacklevel=2)
        return finder


def uninstall():
    """Remove the finder (modules already imported as ``ray`` stay in ``sys.modules``)."""
    with _install_lock:
        sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "_ray_adapter_finder", False)]


_disabled_depth = 0


class disabled:
    """``with hook.disabled():`` -- inside the block ``import ray`` is not served by the adapter
    (real Ray if installed). Names already imported stay as they are; code that needs real Ray
    must import it inside the block before anything imported the proxy. Blocks nest: the
    finder is active again when the outermost one ends."""

    def __enter__(self):
        global _disabled_depth
        with _install_lock:
            self._finder = installed_finder()
            if self._finder is not None:
                _disabled_depth += 1
                self._finder.active = False
        return self

    def __exit__(self, *exc):
        global _disabled_depth
        with _install_lock:
            if self._finder is not None:
                _disabled_depth -= 1
                if _disabled_depth == 0:
                    self._finder.active = True
        return False
