"""``ray-adapter report``: the compat matrix as tables, JSON, or one entry (``--symbol``), and
the generated ``docs/compat.md`` (:func:`compat_markdown`).

The headline coverage is of Ray's user-facing API (``api = "public"`` in the matrix); the Ray
internals its modules re-export are counted apart, and a third figure weights every status by
how often real workloads use the symbol (see :mod:`ray_adapter.coverage`).
"""
import json

from ray_adapter import RAY_API_VERSION, __version__, coverage, matrix

#: Exit codes of ``report --symbol``.
EXIT_FOUND, EXIT_UNKNOWN, EXIT_GAP = 0, 1, 2
_PUBLIC_TITLE = "User-facing API (what Ray marks public: __all__, @PublicAPI, @DeveloperAPI)"
_INTERNAL_TITLE = ("Ray internals that Ray's modules also bind (client_mode_hook, PublicAPI, ids, "
                   "re-exports); not user API")


def _table(header, rows, markdown):
    lines = []
    if markdown:
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "|".join("---" for _ in header) + "|")
        lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
        return lines
    widths = [min(60, max(len(str(r[i])) for r in [header, *rows])) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines.append(fmt.format(*header).rstrip())
    lines.append(fmt.format(*("-" * w for w in widths)).rstrip())
    lines += [fmt.format(*row).rstrip() for row in rows]
    return lines


def _coverage_rows(split, level):
    rows = []
    for module, row in split.items():
        counts, pct = row[level]
        if not sum(counts.values()):
            continue
        status = matrix.modules()[module]["module_status"]
        label = module if status == "supported" else f"{module} (module: {status})"
        rows.append((label, counts["supported"], counts["partial"], counts["gap"], f"{pct:.0f}%"))
    counts, pct = coverage.totals(split, level)
    rows.append(("TOTAL", counts["supported"], counts["partial"], counts["gap"], f"{pct:.0f}%"))
    return rows


def _weighted_lines(backend):
    w = coverage.usage_weighted(backend)
    share = {s: (100.0 * n / w.call_sites if w.call_sites else 0.0) for s, n in w.counts.items()}
    lines = [f"{w.percent:.0f}% of {w.call_sites} Ray call sites in real workloads "
             f"({', '.join(coverage.USAGE_PROJECTS)}; outside their tests) use supported "
             f"({share['supported']:.0f}%) or partial ({share['partial']:.0f}%) APIs; "
             f"gap {share['gap']:.0f}%, unknown {share['unknown']:.0f}%."]
    if w.top_gaps:
        lines.append("most-used gaps: " + ", ".join(f"{n} ({c})" for n, c in w.top_gaps[:8]))
    return lines


def _options_rows(backend):
    rows = []
    for section in matrix.option_sections():
        counts, pct = coverage.counts_and_percent(e.status(backend) for e in matrix.options(section).values())
        rows.append((f"{section} ({coverage.SECTION_TITLES.get(section, section)})", counts["supported"],
                     counts["partial"], counts["gap"], f"{pct:.0f}%"))
    return rows


def report_lines(backend, markdown=False, verbose=False):
    """The text (or Markdown) report for ``backend`` as a list of lines."""
    h1, h2 = ("# ", "## ") if markdown else ("", "")
    split = coverage.split_coverage(backend)
    header = ("module", "supported", "partial", "gap", "coverage")
    lines = [f"{h1}ray-adapter {__version__}: Ray {RAY_API_VERSION} API coverage ({backend} backend)", ""]
    lines += [f"{h2}{_PUBLIC_TITLE}", *_table(header, _coverage_rows(split, "public"), markdown), ""]
    lines += [f"{h2}{_INTERNAL_TITLE}", *_table(header, _coverage_rows(split, "internal"), markdown), ""]
    lines += [f"{h2}Weighted by real-workload use", *_weighted_lines(backend), ""]
    lines += [f"{h2}Options (ray.remote, .options, ray.init keywords)",
              *_table(("options", "supported", "partial", "gap", "coverage"), _options_rows(backend), markdown), ""]
    whole = [(name, e.status(backend), e.note) for name, e in sorted(matrix.submodule_entries().items())]
    lines += [f"{h2}Ray modules not provided ({len(whole)}): importing one raises "
              "ModuleNotFoundError with the reason", *_table(("module", "status", "note"), whole, markdown)]
    if verbose:
        for module, data in matrix.modules().items():
            entries = sorted(data["symbols"].values(), key=lambda e: e.name)
            lines += ["", f"{h2}{module}", *_table(
                ("symbol", "kind", "api", "status", "note"),
                [(e.name, e.kind, matrix.api_level(e), e.status(backend), e.note) for e in entries], markdown)]
        for section in matrix.option_sections():
            lines += ["", f"{h2}options: {section} ({coverage.SECTION_TITLES.get(section, section)})", *_table(
                ("option", "status", "note"),
                [(k, e.status(backend), e.note) for k, e in sorted(matrix.options(section).items())], markdown)]
    return lines


def report_json(backend):
    """The whole matrix for ``backend`` as a JSON-ready dict."""
    split = coverage.split_coverage(backend)
    out = {"ray_version": RAY_API_VERSION, "adapter_version": __version__, "backend": backend, "modules": {}}
    for module, data in matrix.modules().items():
        counts, pct = split[module]["all"]
        out["modules"][module] = {
            "module_status": data["module_status"], "counts": counts, "coverage_percent": round(pct, 1),
            **{level: {"counts": split[module][level][0], "coverage_percent": round(split[module][level][1], 1)}
               for level in ("public", "internal")},
            "symbols": {e.name: {"kind": e.kind, "api": matrix.api_level(e), "status": e.status(backend),
                                 "note": e.note} for e in data["symbols"].values()}}
    out["submodules"] = {name: {"status": e.status(backend), "note": e.note}
                         for name, e in matrix.submodule_entries().items()}
    out["options"] = {section: {k: {"status": e.status(backend), "note": e.note}
                                for k, e in matrix.options(section).items()}
                      for section in matrix.option_sections()}
    w = coverage.usage_weighted(backend)
    out["coverage"] = {
        **{level: dict(zip(("counts", "coverage_percent"), _rounded(coverage.totals(split, level))))
           for level in ("public", "internal", "all")},
        "usage_weighted": {"source": "compat_matrix/usage.csv (non-test call sites of "
                                     + ", ".join(coverage.USAGE_PROJECTS) + ")",
                           "call_sites": w.call_sites, "counts": w.counts,
                           "coverage_percent": round(w.percent, 1),
                           "top_gaps": [{"symbol": n, "call_sites": c} for n, c in w.top_gaps]}}
    return out


def _rounded(pair):
    return pair[0], round(pair[1], 1)


# -- one entry -------------------------------------------------------------------------------
def symbol_report(query, backend, as_json=False):
    """``(text, exit code)`` for ``report --symbol QUERY``: 0 found, 2 a gap on ``backend``,
    1 not in the matrix (with suggestions)."""
    matches, see_also = coverage.find(query)
    code = EXIT_UNKNOWN if not matches else (
        EXIT_GAP if any(m.entry.status(backend) == "gap" for m in matches) else EXIT_FOUND)
    # A Ray name outside the matrix (a Ray internal, a name Ray lacks) gets the verdict
    # `ray-adapter scan` and the usage-weighted coverage give it, so every name they list is
    # answered here.
    outside = _outside_verdicts(query) if not matches else None
    if outside and outside[backend].status == "gap" and query.strip().rpartition(".")[0] not in matrix.modules():
        code = EXIT_GAP  # (a name missing from a module the matrix lists in full is a typo: exit 1)
    if as_json:
        data = {"query": query, "backend": backend, "found": bool(matches), "exit_code": code,
                "matches": [_match_json(m, backend) for m in matches], "see_also": see_also}
        if outside:
            data["outside_matrix"] = {"status": outside[backend].status, "note": outside[backend].reason,
                                      "statuses": {b: v.status for b, v in outside.items()}}
        return json.dumps(data, indent=2, sort_keys=True), code
    lines = []
    if not matches:
        lines.append(f"{query}: not in the compat matrix (not a public symbol or option of Ray "
                     f"{RAY_API_VERSION})")
    if outside:
        for b in matrix.BACKENDS:
            lines.append(f"  {b}: {outside[b].status}")
        lines.append(f"  note: {outside[backend].reason}")
        usage = coverage.usage_of(query)
        if usage and usage[1]:
            per = ", ".join(f"{p} {n}" for p, n in usage[0].items() if n)
            lines.append(f"  used by real workloads: {usage[1]} call sites outside tests ({per})")
    for m in matches:
        api = f", {m.api} API" if m.api and not m.kind.startswith("option") else ""
        lines.append(f"{m.name} ({m.kind}{api}; {m.where})")
        for b in matrix.BACKENDS:
            lines.append(f"  {b}: {m.entry.status(b)}")
        if m.entry.note:
            lines.append(f"  note: {m.entry.note}")
        usage = coverage.usage_of(m.name)
        if usage and usage[1]:
            per = ", ".join(f"{p} {n}" for p, n in usage[0].items() if n)
            lines.append(f"  used by real workloads: {usage[1]} call sites outside tests ({per})")
    if see_also:
        lines.append(("did you mean: " if not matches else "see also: ") + ", ".join(see_also))
    return "\n".join(lines), code


def _outside_verdicts(query):
    """``{backend: Verdict}`` for a dotted Ray name the matrix has no entry for, else None."""
    from ray_adapter.scan.classify import Classifier

    name = query.strip()
    if not (name.startswith("ray.") and all(part.isidentifier() for part in name.split("."))):
        return None
    return {b: Classifier(b).name(name) for b in matrix.BACKENDS}


def _match_json(m, backend):
    usage = coverage.usage_of(m.name)
    return {"name": m.name, "kind": m.kind, "api": m.api, "where": m.where,
            "status": m.entry.status(backend),
            "statuses": {b: m.entry.status(b) for b in matrix.BACKENDS}, "note": m.entry.note,
            "usage": {"projects": usage[0], "nontest_total": usage[1]} if usage else None}


# -- docs/compat.md --------------------------------------------------------------------------
def compat_markdown():
    """The text of ``docs/compat.md``: every entry of the matrix, both backends."""
    lines = [f"# Ray {RAY_API_VERSION} compatibility of ray-adapter {__version__}", "",
             "Generated from the compat matrix (`src/ray_adapter/compat_matrix/`) by "
             "`python tools/gen_compat_doc.py`; do not edit by hand (a test fails when it is stale). "
             "`ray-adapter report --symbol NAME` shows one entry; `ray-adapter scan PATH` checks a "
             "code base against it.", "",
             "Statuses: **supported** (Ray's behaviour), **partial** (provided; the note says what "
             "differs), **gap** (not provided; using it raises an error that carries the note). "
             "*api*: **public** is what Ray marks as user API (`__all__`, `@PublicAPI`, "
             "`@DeveloperAPI`, `@Deprecated`); **internal** is a Ray-internal name a module binds.", "",
             "## Coverage", ""]
    rows = []
    splits = {b: coverage.split_coverage(b) for b in matrix.BACKENDS}
    for level, title in (("public", "user-facing API"), ("internal", "Ray internals")):
        cells = []
        for b in matrix.BACKENDS:
            counts, pct = coverage.totals(splits[b], level)
            cells.append(f"{pct:.0f}% ({counts['supported']} supported, {counts['partial']} partial, "
                         f"{counts['gap']} gap)")
        rows.append((title, *cells))
    weighted = [coverage.usage_weighted(b) for b in matrix.BACKENDS]
    rows.append(("weighted by real-workload use", *(f"{w.percent:.0f}% of {w.call_sites} call sites"
                                                    for w in weighted)))
    lines += [*_table(("", *matrix.BACKENDS), rows, True), ""]
    for module, data in matrix.modules().items():
        lines += [f"## `{module}`", ""]
        if data.get("note"):
            lines += [data["note"], ""]
        if data["module_status"] != "supported":
            lines += [f"Module status: **{data['module_status']}**.", ""]
        entries = sorted(data["symbols"].values(), key=lambda e: (matrix.api_level(e) != "public", e.name))
        lines += [*_table(("symbol", "kind", "api", *matrix.BACKENDS, "note"),
                          [(f"`{e.name}`", e.kind, matrix.api_level(e), *(e.status(b) for b in matrix.BACKENDS),
                            e.note) for e in entries], True), ""]
    lines += ["## Ray modules not provided", "",
              *_table(("module", *matrix.BACKENDS, "note"),
                      [(f"`{n}`", *(e.status(b) for b in matrix.BACKENDS), e.note)
                       for n, e in sorted(matrix.submodule_entries().items())], True), ""]
    for section in matrix.option_sections():
        lines += [f"## Options: `{section}` ({coverage.SECTION_TITLES.get(section, section)})", "",
                  *_table(("option", *matrix.BACKENDS, "note"),
                          [(f"`{k}`", *(e.status(b) for b in matrix.BACKENDS), e.note)
                           for k, e in sorted(matrix.options(section).items())], True), ""]
    return "\n".join(lines)
