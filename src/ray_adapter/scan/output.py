"""How ``ray-adapter scan`` reports: text for people, JSON for scripts, SARIF 2.1.0 for
code-scanning UIs (each non-supported use shown inline on its line).

The JSON document follows ``scan.schema.json`` (package data beside this module).
"""
import os
from collections import Counter
from urllib.parse import quote

from ray_adapter import RAY_API_VERSION, __version__
from ray_adapter.scan import STATUSES

JSON_SCHEMA_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scan.schema.json")
JSON_FORMAT_VERSION = 1
_LEVEL = {"gap": "error", "partial": "warning", "unknown": "note"}
_RULE_TEXT = {
    "gap": ("Ray API that ray-adapter does not provide",
            "The code uses a Ray API that ray-adapter does not provide on this backend: it raises a "
            "gap error (AttributeError / ModuleNotFoundError / ValueError subclass) when run. The "
            "message says why and what to use instead; the compat matrix has the entry."),
    "partial": ("Ray API that ray-adapter provides with differences",
                "ray-adapter provides this Ray API, but some behaviour differs from Ray; the "
                "message says what."),
    "unknown": ("Ray use that the compat matrix cannot vouch for",
                "A Ray-internal name, an option keyword Ray does not know, or options passed as "
                "**expression: the compat matrix has no entry, so the scan cannot say whether it "
                "works."),
    "parse-error": ("File that could not be parsed",
                    "The file could not be read, decoded or parsed as Python, so it was not scanned."),
}


def _where(item):
    cell = f"cell_{item.cell}:" if item.cell is not None else ""
    return f"{item.path}:{cell}{item.line}:{item.column}"


def text(result, quiet=False, stream=None):
    """The findings one per line (``file:line:col  status  symbol  — reason``; a symbol's
    reason at its first use only, later uses point back to it), then the summary per status.
    ``quiet`` leaves out supported uses."""
    lines = []
    first = {}  # symbol -> where its reason was shown
    for f in result.findings:
        if quiet and f.status == "supported":
            continue
        reason = ""
        if f.reason:
            shown = first.setdefault((f.symbol, f.status), _where(f))
            reason = f"  — {f.reason}" if shown == _where(f) else f"  — as at {shown}"
        lines.append(f"{_where(f)}  {f.status:<9}  {f.display}{reason}")
    for e in result.errors:
        lines.append(f"{_where(e)}  {'error':<9}  could not be scanned  — {e.message}")
    if lines:
        lines.append("")
    lines.extend(summary(result))
    return "\n".join(lines) + "\n"


def summary(result):
    counts = result.counts()
    used = {f.path for f in result.findings}
    head = (f"{len(result.findings)} uses of Ray in {len(used)} of {result.files} files "
            f"({result.backend} backend): "
            + ", ".join(f"{counts[s]} {s}" for s in STATUSES))
    if result.errors:
        head += f"; {len(result.errors)} could not be scanned"
    out = [head]
    for status in STATUSES:
        names = Counter(f.symbol for f in result.findings if f.status == status)
        if not names:
            continue
        listed = sorted(names.items(), key=lambda kv: (-kv[1], kv[0]))
        shown = ", ".join(f"{name} ({n})" for name, n in listed[:15])
        more = f", ... {len(listed) - 15} more" if len(listed) > 15 else ""
        out.append(f"  {status:<9} {counts[status]:>5}  {shown}{more}")
    return out


def as_json(result, fail_on="gap"):
    """The scan as a JSON-ready dict (schema: ``scan.schema.json``)."""
    data = result.as_dict()
    return {
        "format_version": JSON_FORMAT_VERSION,
        "tool": {"name": "ray-adapter", "version": __version__, "ray_api_version": RAY_API_VERSION},
        "backend": result.backend,
        "files_scanned": result.files,
        "summary": result.counts(),
        "findings": data["findings"],
        "errors": data["errors"],
        "fail_on": fail_on,
        "exit_code": result.exit_code(fail_on),
    }


def _uri(path, base):
    absolute = os.path.abspath(path)
    if absolute == base or absolute.startswith(base.rstrip(os.sep) + os.sep):
        return quote(os.path.relpath(absolute, base).replace(os.sep, "/")), True
    return "file://" + quote(absolute.replace(os.sep, "/")), False


def _location(item, base):
    uri, relative = _uri(item.path, base)
    artifact = {"uri": uri, **({"uriBaseId": "SRCROOT"} if relative else {})}
    physical = {"artifactLocation": artifact}
    if item.cell is None and item.line > 0:
        region = {"startLine": item.line}
        if item.column > 0:
            region["startColumn"] = item.column
        end_line = getattr(item, "end_line", 0)
        end_column = getattr(item, "end_column", 0)
        if end_line >= item.line and end_column > 0 and (end_line > item.line or end_column > item.column):
            region["endLine"] = end_line
            region["endColumn"] = end_column
        physical["region"] = region
    return {"physicalLocation": physical}


def sarif(result, base=None):
    """The scan as a SARIF 2.1.0 log (a dict): one result per partial, gap or unknown use and
    per file that could not be scanned; supported uses are left out. Locations are relative to
    ``base`` (default: the working directory) under the ``SRCROOT`` base id. Notebook findings
    point at the notebook; their message names the cell and line."""
    base = os.path.abspath(base or os.getcwd())
    rule_ids = [*(s for s in STATUSES if s != "supported"), "parse-error"]
    rules = [{"id": f"ray-adapter/{rid}", "name": "".join(w.capitalize() for w in rid.split("-")),
              "shortDescription": {"text": _RULE_TEXT[rid][0]},
              "fullDescription": {"text": _RULE_TEXT[rid][1]},
              "defaultConfiguration": {"level": _LEVEL.get(rid, "error")},
              "help": {"text": "Look a symbol up with `ray-adapter report --symbol NAME`."}}
             for rid in rule_ids]
    index = {rid: i for i, rid in enumerate(rule_ids)}
    results = []
    for f in result.findings:
        if f.status == "supported":
            continue
        where = f"cell {f.cell}, line {f.line}: " if f.cell is not None else ""
        message = f"{where}{f.display} is {f.status} on the {result.backend} backend"
        message += f": {f.reason}" if f.reason else "."
        results.append({"ruleId": f"ray-adapter/{f.status}", "ruleIndex": index[f.status],
                        "level": _LEVEL[f.status], "message": {"text": message},
                        "locations": [_location(f, base)],
                        "properties": {"symbol": f.symbol, "detail": f.detail, "kind": f.kind,
                                       "status": f.status,
                                       **({"cell": f.cell} if f.cell is not None else {})}})
    notifications = []
    for e in result.errors:
        where = f"cell {e.cell}: " if e.cell is not None else ""
        message = {"text": f"{where}could not be scanned: {e.message}"}
        results.append({"ruleId": "ray-adapter/parse-error", "ruleIndex": index["parse-error"],
                        "level": "error", "message": message, "locations": [_location(e, base)]})
        notifications.append({"level": "error", "message": message, "locations": [_location(e, base)]})
    return {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "ray-adapter", "version": __version__,
                                "semanticVersion": __version__, "rules": rules}},
            "originalUriBaseIds": {"SRCROOT": {"uri": "file://" + quote(base.replace(os.sep, "/").rstrip("/") + "/")}},
            "columnKind": "unicodeCodePoints",
            "invocations": [{"executionSuccessful": not result.errors,
                             "toolExecutionNotifications": notifications}],
            "properties": {"backend": result.backend, "rayApiVersion": RAY_API_VERSION},
            "results": results,
        }],
    }
