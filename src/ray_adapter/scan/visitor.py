"""The AST walk of ``ray-adapter scan``: every use of Ray in one module, without importing it.

:class:`RayUses` follows the names a module binds to Ray (``import ray as r``, ``from ray.util
import ActorPool as Pool``, ``from ray.util.placement_group import *``, ``get = ray.get``) and
reports, in source order:

* each reference to a Ray module or symbol, as the longest dotted chain on a bound name
  (``r.util.placement_group(...)`` is ``ray.util.placement_group``);
* each keyword of ``@ray.remote(...)`` / ``ray.remote(**opts)(f)`` (a function: ``task``
  options; a class: ``actor``), of ``.options(...)`` on a remote function, actor class or actor
  method (``**{...}`` and ``**name`` of a dict literal expanded), of ``ray.init(...)`` and of
  ``@ray.method(...)``, with ``runtime_env`` dict literals split per key;
  literal values (``scheduling_strategy="SPREAD"``) are judged as such.

Positions are 1-based lines and 1-based columns in characters (code points).
"""
import ast
from dataclasses import dataclass

from ray_adapter import matrix
from ray_adapter.scan.classify import NOT_LITERAL, Verdict

_REMOTE = ("ray.remote",)
_METHOD = ("ray.method", "ray.actor.method")
_INIT = ("ray.init",)
_GET_ACTOR = ("ray.get_actor",)


@dataclass(frozen=True)
class Use:
    """One use of Ray in a source: where, what (matrix name plus ``detail`` such as
    ``="SPREAD"``), its kind and status, and the reason to show."""

    line: int
    column: int
    end_line: int
    end_column: int
    symbol: str
    detail: str
    kind: str
    status: str
    reason: str


def _literal(node):
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return NOT_LITERAL


def _short(value):
    text = repr(value)
    return text if len(text) <= 40 else None


class RayUses(ast.NodeVisitor):
    """Collects :class:`Use` records in ``uses``; ``lines`` are the source lines (for columns)."""

    def __init__(self, classifier, lines):
        self.c = classifier
        self.lines = lines
        self.uses = []
        self.ray = {}       # local name -> the Ray name it is bound to ("ray", "ray.util.ActorPool")
        self.remote = {}    # local name -> "task" | "actor" | "handle"
        self.defs = {}      # local name -> "function" | "class", defined in this module
        self.dicts = {}     # local name -> a dict literal node, for **name
        self._sections_of = {}   # id(ray.remote(...) call) -> options sections of its target
        self._before_remote = set()  # ids of .options(...) calls followed by .remote(...)

    # -- recording ---------------------------------------------------------------------------
    def _column(self, line, offset):
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        if text.isascii():
            return offset + 1
        return len(text.encode("utf-8")[:offset].decode("utf-8", "replace")) + 1

    def _add(self, node, verdict, detail=""):
        line = node.lineno
        end_line = getattr(node, "end_lineno", None) or line
        end_offset = getattr(node, "end_col_offset", None)
        self.uses.append(Use(
            line, self._column(line, node.col_offset), end_line,
            self._column(end_line, end_offset) if end_offset is not None else self._column(line, node.col_offset),
            verdict.symbol, detail, verdict.kind, verdict.status, verdict.reason))

    def _unbind(self, name):
        self.ray.pop(name, None)
        self.remote.pop(name, None)
        self.dicts.pop(name, None)

    def _dotted(self, node):
        """The Ray name an expression denotes (``r.util.ActorPool`` -> ``ray.util.ActorPool``)."""
        attrs = []
        while isinstance(node, ast.Attribute):
            attrs.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id in self.ray:
            return ".".join([self.ray[node.id], *reversed(attrs)])
        return None

    # -- imports -----------------------------------------------------------------------------
    def visit_Import(self, node):
        for alias in node.names:
            parts = alias.name.split(".")
            bound = alias.asname or parts[0]
            self._unbind(bound)
            if parts[0] != "ray":
                continue
            self._add(_at(alias, node, self.lines), self.c.name(alias.name, module_parts=len(parts)))
            self.ray[bound] = alias.name if alias.asname else "ray"

    def visit_ImportFrom(self, node):
        module = node.module or ""
        is_ray = node.level == 0 and (module == "ray" or module.startswith("ray."))
        depth = len(module.split("."))
        for alias in node.names:
            if alias.name == "*":
                if is_ray:
                    self._add(_at(alias, node, self.lines), self.c.name(module, module_parts=depth))
                    for name in matrix.symbols(module):
                        self._unbind(name)
                        self.ray[name] = f"{module}.{name}"
                continue
            bound = alias.asname or alias.name
            self._unbind(bound)
            if is_ray:
                dotted = f"{module}.{alias.name}"
                self._add(_at(alias, node, self.lines), self.c.name(dotted, module_parts=depth))
                self.ray[bound] = dotted

    # -- names -------------------------------------------------------------------------------
    def visit_Name(self, node):
        if node.id not in self.ray:
            return
        if isinstance(node.ctx, ast.Store):  # for ray in ..., with ... as ray, (ray := ...)
            self._unbind(node.id)
        else:
            self._add(node, self.c.name(self.ray[node.id]))

    def visit_Attribute(self, node):
        dotted = self._dotted(node)
        if dotted is None:
            self.generic_visit(node)
        else:
            self._add(node, self.c.name(dotted))

    # -- definitions and assignments ---------------------------------------------------------
    def _definition(self, node, kind):
        sections = ("actor",) if kind == "class" else ("task",)
        remote = False
        for decorator in node.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            if self._dotted(target) in _REMOTE:
                remote = True
                if isinstance(decorator, ast.Call):
                    self._sections_of[id(decorator)] = sections
        self._unbind(node.name)
        self.defs[node.name] = kind
        if remote:
            self.remote[node.name] = "actor" if kind == "class" else "task"
        self.generic_visit(node)

    def visit_FunctionDef(self, node):
        self._definition(node, "function")

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        self._definition(node, "class")

    def visit_Assign(self, node):
        self.visit(node.value)
        for target in node.targets:
            if isinstance(target, ast.Name):
                self._bind(target.id, node.value)
            else:
                self.visit(target)

    def visit_AnnAssign(self, node):
        self.visit(node.annotation)
        if node.value is not None:
            self.visit(node.value)
        if isinstance(node.target, ast.Name):
            self._unbind(node.target.id)
            if node.value is not None:
                self._bind(node.target.id, node.value)
        else:
            self.visit(node.target)

    def _bind(self, name, value):
        self._unbind(name)
        dotted = self._dotted(value)
        if dotted is not None:
            self.ray[name] = dotted
            return
        kind = self._remote_kind(value)
        if kind is not None:
            self.remote[name] = kind
        elif self._dict_items(value) is not None:
            self.dicts[name] = value

    def _remote_kind(self, value):
        """``task`` / ``actor`` for ``ray.remote(f)`` / ``ray.remote(**o)(Cls)``; ``handle`` for
        ``Cls.remote(...)``, ``Cls.options(...).remote(...)``, ``ray.get_actor(...)``."""
        if not isinstance(value, ast.Call):
            return None
        func = value.func
        inner = func.func if isinstance(func, ast.Call) else None
        if value.args and (self._dotted(func) in _REMOTE or (inner is not None and self._dotted(inner) in _REMOTE)):
            return "actor" if self._sections(value.args[0]) == ("actor",) else "task"
        if self._dotted(func) in _GET_ACTOR:
            return "handle"
        if isinstance(func, ast.Attribute) and func.attr == "remote":
            receiver = func.value
            if isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Attribute) \
                    and receiver.func.attr == "options":
                receiver = receiver.func.value
            if isinstance(receiver, ast.Name) and self.remote.get(receiver.id) == "actor":
                return "handle"
        return None

    def _sections(self, target):
        """Options sections for what ``ray.remote`` is applied to: a class is an actor."""
        if isinstance(target, ast.Name):
            kind = self.remote.get(target.id) or self.defs.get(target.id)
            if kind in ("class", "actor"):
                return ("actor",)
            if kind in ("function", "task"):
                return ("task",)
            return ("actor",) if target.id[:1].isupper() else ("task",)
        if isinstance(target, ast.Lambda):
            return ("task",)
        if isinstance(target, ast.Attribute):
            return ("actor",) if target.attr[:1].isupper() else ("task",)
        return ("task", "actor")

    # -- calls -------------------------------------------------------------------------------
    def visit_Call(self, node):
        func = node.func
        dotted = self._dotted(func)
        if dotted in _REMOTE:
            if not node.args:
                self._keywords(self._sections_of.pop(id(node), ("task", "actor")), node.keywords)
        elif dotted in _INIT:
            if node.args:
                self._keyword(("init",), "address", node.args[0], node.args[0])
            self._keywords(("init",), node.keywords)
        elif dotted in _METHOD:
            self._keywords(("method",), node.keywords)
        elif isinstance(func, ast.Attribute) and func.attr == "options":
            self._options_call(node)
        if isinstance(func, ast.Call) and self._dotted(func.func) in _REMOTE and node.args:
            self._sections_of[id(func)] = self._sections(node.args[0])   # ray.remote(**o)(target)
        if isinstance(func, ast.Attribute) and func.attr == "remote" and isinstance(func.value, ast.Call):
            self._before_remote.add(id(func.value))                     # x.options(...).remote()
        self.generic_visit(node)

    def _options_call(self, node):
        receiver = node.func.value
        sections = None
        if isinstance(receiver, ast.Name) and self.remote.get(receiver.id) in ("task", "actor"):
            sections = (self.remote[receiver.id],)
        elif isinstance(receiver, ast.Attribute) and isinstance(receiver.value, ast.Name) \
                and self.remote.get(receiver.value.id) == "handle":
            sections = ("method",)
        elif id(node) in self._before_remote:
            # A remote function or actor this module did not define: the keywords decide.
            keys = set()
            for kw in node.keywords:  # **{...} and **name of a dict literal count too
                items = [(kw.arg,)] if kw.arg else (self._dict_items(kw.value) or ())
                keys.update(item[0] for item in items)
            present = [s for s in ("task", "actor", "method") if s in self.c.option_sections()]
            sections = next(((s,) for s in present if all(self.c.has_option(s, k) for k in keys)),
                            ("task", "actor"))
        if sections is not None:
            self._keywords(sections, node.keywords)

    def _dict_items(self, node, depth=0):
        """``[(key, value node, key node)]`` of a dict literal / ``dict(k=v)`` / a name bound
        to one; None if it is not one (or has non-string keys)."""
        if isinstance(node, ast.Name) and node.id in self.dicts and depth < 8:
            return self._dict_items(self.dicts[node.id], depth + 1)
        if isinstance(node, ast.Dict):
            items = []
            for key, value in zip(node.keys, node.values):
                if key is None:  # {**other}
                    inner = self._dict_items(value, depth + 1)
                    if inner is None:
                        return None
                    items.extend(inner)
                elif isinstance(key, ast.Constant) and isinstance(key.value, str):
                    items.append((key.value, value, key))
                else:
                    return None
            return items
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" \
                and "dict" not in self.defs and not node.args \
                and all(kw.arg is not None for kw in node.keywords):
            return [(kw.arg, kw.value, kw) for kw in node.keywords]
        return None

    def _keywords(self, sections, keywords):
        for kw in keywords:
            if kw.arg is not None:
                self._keyword(sections, kw.arg, kw.value, kw)
                continue
            items = self._dict_items(kw.value)
            if items is None:
                present = [s for s in sections if s in self.c.option_sections()]
                if present:
                    self._add(kw.value, Verdict(
                        f"{present[0]}.**", "option", "unknown",
                        "options given as **<expression> cannot be checked without running the "
                        f"code; check each key with `ray-adapter report --symbol {present[0]}.<key>`."))
                continue
            for key, value, key_node in items:
                self._keyword(sections, key, value, key_node)

    def _keyword(self, sections, key, value_node, at):
        present = [s for s in sections if s in self.c.option_sections()]
        if not present:
            return  # the matrix has no such options section (yet): nothing to say per keyword
        section = next((s for s in present if self.c.has_option(s, key)), present[0])
        if key == "runtime_env" and self.c.has_option(section, key):
            items = self._dict_items(value_node)
            if items:
                for name, value, key_node in items:
                    value = _literal(value)
                    if value is NOT_LITERAL:
                        # Set to something (only a literal None is "not given"): the field
                        # decides, with a value of the type Ray wants for env_vars.
                        value = {} if name == "env_vars" else "<expression>"
                    verdict = self.c.option(section, key, {name: value})
                    self._add(key_node, verdict, f'["{name}"]')
                return
        value = _literal(value_node)
        shown = _short(value) if value is not NOT_LITERAL else None
        self._add(at, self.c.option(section, key, value), f"={shown}" if shown else "")


class _Position:
    __slots__ = ("lineno", "col_offset", "end_lineno", "end_col_offset")

    def __init__(self, lineno, col_offset, end_lineno, end_col_offset):
        self.lineno, self.col_offset = lineno, col_offset
        self.end_lineno, self.end_col_offset = end_lineno, end_col_offset


def _at(alias, statement, lines=None):
    """Where ``alias`` is: ``ast.alias`` has a position from Python 3.10; before that it is
    found in the statement's own source text (``lines``), else the statement's position."""
    if getattr(alias, "lineno", None):
        return alias
    if lines:
        name = alias.name
        last = getattr(statement, "end_lineno", None) or statement.lineno
        offset = statement.col_offset
        keyword = "import"
        for number in range(statement.lineno, last + 1):
            raw = lines[number - 1].encode("utf-8") if 0 < number <= len(lines) else b""
            start = offset if number == statement.lineno else 0
            if keyword:  # names follow the import keyword
                found = raw.find(keyword.encode(), start)
                if found < 0:
                    continue
                start, keyword = found + len(keyword), None
            at = _find_name(raw, name.encode(), start)
            if at >= 0:
                return _Position(number, at, number, at + len(name.encode()))
    return statement


def _find_name(raw, name, start):
    """Offset of ``name`` as a whole dotted name in ``raw`` from ``start``, or -1."""
    while True:
        at = raw.find(name, start)
        if at < 0:
            return -1
        before = raw[at - 1:at] if at else b" "
        after = raw[at + len(name):at + len(name) + 1] or b" "
        if not (before.isalnum() or before in (b"_", b".")) and not (after.isalnum() or after in (b"_", b".")):
            return at
        start = at + 1


def uses(tree, lines, classifier):
    """Every :class:`Use` of Ray in module ``tree`` (parsed from ``lines``), in source order."""
    walker = RayUses(classifier, lines)
    walker.visit(tree)
    return walker.uses
