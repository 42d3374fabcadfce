"""Imports go one way: no import cycle among the modules of ``src/ray_adapter``.

Module-level imports and imports inside functions are both read (from the source, with ``ast``):
a cycle through a function-level import is still a cycle of the design (a hidden import-order
contract). The proxy's layers (see docs/architecture.md): ``core_access`` -> ``session`` -> refs
(``object_refs``, ``global_worker``, ``object_ref_generator``) -> options / placement ->
submission (``generators``, ``remote_function``, ``actor_methods``, ``actor``) -> graphs
(``ray.dag``) -> the API (``_private.worker``, ``cluster_utils``); Ray-named surfaces such as
``ray._raylet`` only re-export. Where a lower layer must call a higher one it is handed the
callable (``core_access.set_starter``), never imports it. ``importlib.import_module`` of our own
modules would hide an edge from this check: the last test refuses it.

Package ``__init__`` modules are not given edges to their submodules' parents (Python loads a
package before its submodule): a package's ``__init__`` is the Ray-named surface of its package.
"""
import ast
import pathlib

SRC = pathlib.Path(__file__).resolve().parent.parent / "src"

def _modules():
    out = {}
    for path in (SRC / "ray_adapter").rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _targets(module, path, node, modules):
    """The modules of ours that import ``node`` (in ``module``, file ``path``) loads."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
            package = package[:len(package) - node.level + 1]
            base = ".".join(package + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        # ``from package import name`` loads the submodule when ``name`` is one
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                 for alias in node.names]
    out = set()
    for name in names:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name and name != module:
            out.add(name)
    return out


def _graph(module_level_only):
    modules = _modules()
    graph = {m: set() for m in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        nodes = tree.body if module_level_only else ast.walk(tree)
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[module] |= _targets(module, path, node, modules)
    return graph


def _cycles(graph):
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(frozenset(component))
    return found


def test_no_module_level_import_cycle():
    assert _cycles(_graph(module_level_only=True)) == []


def test_function_level_imports_make_no_cycle():
    cycles = [sorted(c) for c in _cycles(_graph(module_level_only=False))]
    assert cycles == [], "an import cycle (move the shared code down a layer)"


def test_no_module_of_ours_is_imported_by_name_at_run_time():
    """``importlib.import_module("ray_adapter...")`` with a literal name is an import this
    check could not see (the scanner's and the hook's imports of user modules are not)."""
    hidden = []
    for module, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module"
                    and node.args and isinstance(node.args[0], ast.Constant)
                    and str(node.args[0].value).startswith("ray_adapter")):
                hidden.append(f"{module}:{node.lineno}")
    assert hidden == []


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [frozenset("abc")]
