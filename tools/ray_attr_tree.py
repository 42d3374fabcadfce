"""Print, as JSON, the tree of Ray submodules that a bare ``import ray`` leaves reachable as
attributes: for every ``ray.*`` package reached from ``ray`` through attributes, how each of its
submodules (the ones on disk) answers attribute access.

Run with an interpreter that has real Ray 2.60 to record the reference
(``/tmp/rayref/bin/python tools/ray_attr_tree.py > tests/fixtures/ray_attr_tree.json``), or with
``RAY_BACKEND=yuanrong`` to see what the adapter gives (tests/test_attr_tree.py does both).

Output: ``{"version": ..., "modules": {"ray.util": {"module": [...], "lazy": [...],
"other": [...], "absent": [...]}, ...}}`` where, for each submodule name of the package,

* ``module``: bound to the submodule right after ``import ray`` (in the module's ``vars``);
* ``lazy``: not bound yet, but attribute access (a module ``__getattr__``) gives the submodule;
* ``other``: the attribute is something else (``ray.util.placement_group`` the function);
* ``absent``: attribute access raises ``AttributeError``;
* ``unprobed``: not bound, and the package has a module ``__getattr__`` that was not called
  (real Ray's lazily imports heavy libraries such as ``ray.data``; ``--probe-lazy`` calls it,
  which the adapter's run uses: its ``__getattr__`` imports nothing heavy).

``--names-from FILE`` probes, in each package, the names of that reference output instead of
the files on disk (what the adapter's run does: the names that matter are Ray's).

The walk first snapshots every reachable package's bound names, then probes the unbound ones
(which may import them), so probing never changes what counts as bound. A package is walked
only when it is reached through ``module`` names (what ``import ray`` bound). Packages are
found on disk with ``pkgutil.iter_modules`` for real Ray; for the adapter (whose packages live
under ``ray_adapter.ray``) the names come from the same call on the proxy package.
"""
import json
import pkgutil
import sys
import types


def _submodule_names(mod):
    path = getattr(mod, "__path__", None)
    if path is None:
        return []
    return sorted(info.name for info in pkgutil.iter_modules(path))


def _is_submodule(value, parent, name):
    if not isinstance(value, types.ModuleType):
        return False
    return value.__name__ == f"{parent.__name__}.{name}"


def walk(root):
    """``{ray name: (module object, names bound to submodules)}`` for every package reached."""
    return walk_from("ray", root)


def walk_from(top, root):
    found, seen = {}, set()
    todo = [(top, root)]
    while todo:
        name, mod = todo.pop()
        if name in found or id(mod) in seen:
            continue
        seen.add(id(mod))
        bound = sorted(n for n, v in vars(mod).items() if _is_submodule(v, mod, n))
        found[name] = (mod, bound)
        for n in bound:
            todo.append((f"{name}.{n}", vars(mod)[n]))
    return found


def describe(found, probe_lazy, names=None):
    """Each package's entry (see the module docstring); ``names`` ({package: [name]}) replaces
    the names found on disk (the adapter's run probes Ray's names, not its own files)."""
    out = {}
    for name in sorted(found):
        mod, bound = found[name]
        entry = {"module": bound, "lazy": [], "other": [], "absent": [], "unprobed": []}
        probe = _submodule_names(mod) if names is None else sorted(set(names.get(name, ())) - set(bound))
        for sub in probe:
            if sub in bound:
                continue
            if sub not in vars(mod) and "__getattr__" in vars(mod) and not probe_lazy:
                entry["unprobed"].append(sub)
                continue
            try:
                value = getattr(mod, sub)
            except AttributeError:
                entry["absent"].append(sub)
            except Exception as exc:  # a lazy import that fails: say so, do not stop the walk
                entry["absent"].append(sub)
                entry.setdefault("errors", {})[sub] = type(exc).__name__
            else:
                entry["lazy" if _is_submodule(value, mod, sub) else "other"].append(sub)
        out[name] = entry
    return out


def main():
    import ray

    found = walk(ray)
    names = None
    if "--names-from" in sys.argv:
        with open(sys.argv[sys.argv.index("--names-from") + 1]) as f:
            ref = json.load(f)["modules"]
        names = {m: [n for k in ("module", "lazy", "other", "absent", "unprobed") for n in e[k]]
                 for m, e in ref.items()}
    probe_lazy = "--probe-lazy" in sys.argv
    modules = describe(found, probe_lazy, names=names)
    while probe_lazy:  # walk on into what the probes imported lazily
        more = {}
        for parent, entry in list(modules.items()):
            for sub in entry["lazy"]:
                if f"{parent}.{sub}" not in modules:
                    mod = getattr(found[parent][0], sub)
                    more.update({n: v for n, v in walk_from(f"{parent}.{sub}", mod).items() if n not in modules})
        if not more:
            break
        found.update(more)
        modules.update(describe(more, probe_lazy, names=names))
    print(json.dumps({"version": getattr(ray, "__version__", None), "modules": modules},
                     indent=1, sort_keys=True))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
