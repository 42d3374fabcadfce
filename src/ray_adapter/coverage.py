"""Coverage figures of the compat matrix, and the look-up behind ``report --symbol``.

* :func:`split_coverage` — per module, the user-facing API (``api = "public"`` in the matrix:
  what Ray marks public) apart from the Ray internals its modules happen to bind.
* :func:`usage_weighted` — the share of real-workload call sites that resolve to supported,
  partial or gap entries. The counts are ``compat_matrix/usage.csv``: a copy of the project's
  ``shared/reference/ray_symbol_usage.csv`` (an AST walk over verl, vLLM, OpenRLHF and NeMo-RL;
  ``nontest_total`` is the number of call sites outside their tests). Each row is resolved as
  ``ray-adapter scan`` resolves a use, so the two always agree.
* :func:`find` — every matrix entry a query names: a symbol or module (``ray.util.queue``), an
  option (``task.num_cpus``, ``ray.remote.num_cpus``, ``actor.max_concurrency``, bare
  ``num_cpus``), with suggestions when none matches.
"""
import csv
import difflib
import functools
import os
import re
from dataclasses import dataclass

from ray_adapter import matrix

USAGE_CSV = os.path.join(matrix.MATRIX_DIR, "usage.csv")
USAGE_PROJECTS = ("verl", "vllm", "openrlhf", "nemo_rl")
#: Usage rows that name the result of a call: what the call returns.
_CALL_RESULTS = {"ray.get_runtime_context()": "ray.runtime_context.RuntimeContext"}
#: What each options section holds, in words.
SECTION_TITLES = {"task": "ray.remote / .options on a function", "actor": "ray.remote / .options on a class",
                  "init": "ray.init", "method": "ray.method / ActorMethod.options"}


def counts_and_percent(statuses):
    """``({status: n}, percent supported or partial)`` of an iterable of statuses."""
    counts = dict.fromkeys(matrix.STATUSES, 0)
    for status in statuses:
        counts[status] = counts.get(status, 0) + 1
    total = sum(counts.values())
    return counts, (100.0 * (counts["supported"] + counts["partial"]) / total if total else 0.0)


def split_coverage(backend):
    """``{module: {"public": (counts, pct), "internal": (counts, pct), "all": (counts, pct)}}``."""
    out = {}
    for module, data in matrix.modules().items():
        entries = list(data["symbols"].values())
        row = {"all": counts_and_percent(e.status(backend) for e in entries)}
        for level in ("public", "internal"):
            row[level] = counts_and_percent(e.status(backend) for e in entries if matrix.api_level(e) == level)
        out[module] = row
    return out


def totals(split, level):
    counts = dict.fromkeys(matrix.STATUSES, 0)
    for row in split.values():
        for status, n in row[level][0].items():
            counts[status] += n
    total = sum(counts.values())
    return counts, (100.0 * (counts["supported"] + counts["partial"]) / total if total else 0.0)


@functools.lru_cache(maxsize=None)
def usage_rows():
    """``[(symbol as written in the CSV, {project: n}, non-test total)]``."""
    with open(USAGE_CSV, newline="", encoding="utf-8") as fh:
        return tuple((row["symbol"], {p: int(row[p]) for p in USAGE_PROJECTS}, int(row["nontest_total"]))
                     for row in csv.DictReader(fh))


def usage_name(symbol):
    """The dotted name a usage row stands for (``ray (bare module ref)`` -> ``ray``)."""
    symbol = symbol.split(" (", 1)[0].strip()
    for call, result in _CALL_RESULTS.items():
        if symbol.startswith(call):
            symbol = result + symbol[len(call):]
    return symbol.replace("()", "")


@dataclass(frozen=True)
class Weighted:
    call_sites: int
    counts: dict            # status -> call sites
    percent: float          # supported + partial, of all call sites
    top_gaps: tuple         # ((matrix name, call sites), ...), most used first


def usage_weighted(backend):
    """Matrix statuses weighted by how often real workloads use each symbol."""
    from ray_adapter.scan.classify import STATUSES, Classifier

    classifier = Classifier(backend)
    counts = dict.fromkeys(STATUSES, 0)
    gaps = {}
    for symbol, _, total in usage_rows():
        verdict = classifier.name(usage_name(symbol))
        counts[verdict.status] += total
        if verdict.status == "gap" and total:
            gaps[verdict.symbol] = gaps.get(verdict.symbol, 0) + total
    sites = sum(counts.values())
    percent = 100.0 * (counts["supported"] + counts["partial"]) / sites if sites else 0.0
    top = tuple(sorted(gaps.items(), key=lambda kv: (-kv[1], kv[0])))
    return Weighted(sites, counts, percent, top)


def usage_of(qualname):
    """``({project: n}, total)`` of the usage row for exactly ``qualname``, or None."""
    for symbol, per_project, total in usage_rows():
        if usage_name(symbol) == qualname:
            return per_project, total
    return None


# -- look-up ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Match:
    """One matrix entry a query names: ``name`` as shown (``task.num_cpus``), the Entry, the
    data file and table it lives in, and a kind label."""

    name: str
    entry: object
    where: str
    kind: str
    api: str


def _symbol_match(entry):
    if entry.kind == "module" and not entry.name:
        module = entry.module
        where = (f"compat_matrix/{module}.toml" if module in matrix.modules()
                 else f'compat_matrix/ray.toml [modules."{module}"]')
        return Match(module, entry, where, "module", matrix.api_levels().get(module, "public"))
    table = (f'members."{entry.name}"' if entry.name in matrix.members(entry.module)
             else f"symbols.{entry.name}")
    return Match(entry.qualname, entry, f"compat_matrix/{entry.module}.toml [{table}]",
                 entry.kind, matrix.api_level(entry) or "public")


def _option_match(section, key):
    entry = matrix.options(section)[key]
    title = SECTION_TITLES.get(section, section)
    return Match(f"{section}.{key}", entry, f"compat_matrix/options.toml [{section}.{key}]",
                 f"option of {title}", "public")


def _options_named(key, sections):
    return [_option_match(s, key) for s in sections if s in matrix.option_sections() and key in matrix.options(s)]


def find(query):
    """``(matches, see_also)``: the entries ``query`` names, and other entries it could mean
    (same last component, or close spellings) when it names none or is ambiguous."""
    query = query.strip()
    base = re.split(r"[=\[(]", query, 1)[0].rstrip(".")
    inside = re.match(r"^(.+?)\((\w+)=", query)  # ray.remote(num_cpus=...)
    matches = _option_query(f"{inside.group(1)}.{inside.group(2)}") if inside else []
    module, _, name = base.rpartition(".")
    entry = matrix.lookup(module, name) if module else None
    if entry is None and module.count(".") >= 1:  # ray.actor.ActorClass.bind: a class member
        owner_module, _, owner = module.rpartition(".")
        entry = matrix.lookup(owner_module, f"{owner}.{name}")
    if matches:
        pass
    elif entry is not None:
        matches.append(_symbol_match(entry))
    elif matrix.module_entry(base) is not None:
        matches.append(_symbol_match(matrix.module_entry(base)))
    else:
        matches = _option_query(base)
    see_also = []
    short = base.rpartition(".")[2]
    if not matches or "." not in base:
        names = _all_names()
        see_also = sorted({n for n in names if n.rpartition(".")[2] == short} - {m.name for m in matches})
        if not matches and not see_also:
            by_short = {}
            for n in names:
                by_short.setdefault(n.rpartition(".")[2], []).append(n)
            close = difflib.get_close_matches(base, names, n=3, cutoff=0.8)
            close += [n for s in difflib.get_close_matches(short, by_short, n=1, cutoff=0.8)
                      for n in by_short[s]]
            see_also = list(dict.fromkeys(close))[:6]
    return matches, see_also


def _option_query(text):
    parts = text.split(".")
    if parts[0] == "options":
        parts = parts[1:]
    sections = matrix.option_sections()
    for owner, owner_sections in matrix.OPTION_SECTIONS_OF.items():
        depth = len(owner.split("."))
        if parts[:depth] == owner.split(".") and len(parts) > depth:
            return _options_named(parts[depth], owner_sections)
    if len(parts) >= 2 and parts[0] in sections:
        return _options_named(parts[1], (parts[0],))  # task.runtime_env.pip -> task.runtime_env
    if len(parts) == 1:
        return _options_named(parts[0], sections)
    return []


@functools.lru_cache(maxsize=None)
def _all_names():
    names = [e.qualname for m in matrix.modules() for e in matrix.symbols(m).values()]
    names += [e.qualname for m in matrix.modules() for e in matrix.members(m).values()]
    names += list(matrix.modules()) + list(matrix.submodule_entries())
    names += [f"{s}.{k}" for s in matrix.option_sections() for k in matrix.options(s)]
    return tuple(sorted(set(names)))
