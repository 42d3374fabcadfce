"""The State API's REST routes (``GET /api/v0/...``), as a ``ray start`` head serves them on its
dashboard port beside the Jobs API, so that real Ray's ``ray list`` / ``ray get`` / ``ray
summary`` and ``ray.util.state.list_*(address="http://...")`` read this runtime unchanged.

What each route answers is what :mod:`ray.util.state <ray_adapter.ray.util.state>` returns
in-process (the same records, filters and summaries), wrapped as Ray's dashboard wraps it:
``{"result": true, "msg": "", "data": {"result": <ListApiResponse or SummaryApiResponse>}}``
with status 200; a bad filter or limit is status 400 with ``"result": false`` and the reason in
``msg`` (Ray's client raises it as ``RayStateApiException``); what is not provided (runtime
envs, logs, the task timeline) is status 501 with the matrix's reason.

:func:`routes` is handed to the head by name (``ray start`` passes
``"ray_adapter.ray.util.state._rest:routes"`` in the head's options): the runtime core serves
HTTP and knows nothing of Ray's records; this module knows nothing of the backend but its
``state(kind)`` method.
"""
from ray_adapter import gaps
from ray_adapter.ray.util import state as _state

#: Ray's default and largest ``limit`` of one list request (``RAY_MAX_LIMIT_FROM_API_SERVER``).
DEFAULT_LIMIT = 100
MAX_LIMIT = 10_000

_LISTED = ("actors", "nodes", "placement_groups", "tasks", "workers", "objects", "jobs")
#: Routes Ray's dashboard has that this runtime does not provide: the matrix symbol of each.
_NOT_PROVIDED = {"runtime_envs": "list_runtime_envs", "logs": "list_logs"}


def routes(state):
    """``{path: handler}`` for the head's HTTP server: ``state`` is the runtime's
    ``RuntimeCore.state`` (``state(kind)`` -> raw records; "jobs": the head's job records).
    Each handler takes the path's match
    info (a dict) and the query's ``(key, value)`` pairs, and returns ``(status, body)``, body
    a JSON-ready dict; it may block briefly (the server runs it off its event loop)."""
    table = {f"/api/v0/{kind}": _lister(state, kind) for kind in _LISTED}
    table["/api/v0/tasks/summarize"] = _summarizer(state, "tasks", _state._task_summary)
    table["/api/v0/actors/summarize"] = _summarizer(state, "actors", _state._actor_summary)
    table["/api/v0/objects/summarize"] = _summarizer(state, "objects", _state._object_summary)
    for path, symbol in _NOT_PROVIDED.items():
        table[f"/api/v0/{path}"] = _not_provided(symbol)
    table["/api/v0/tasks/timeline"] = lambda match, query: _reply(None, 501, (
        "The task timeline is not served over HTTP by this runtime: call ray.timeline() in a "
        "driver attached to it (it writes Chrome's trace format, as Ray's does)."))
    return table


def _reply(result, status=200, message=""):
    return status, {"result": status == 200, "msg": message, "data": {"result": result}}


def _flag(value, default):
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError(f"Cannot convert {value!r} to a bool.")


def _options(query):
    """Ray's list options from the query pairs: ``(limit, detail, filters)``; raises
    ValueError as Ray's server does (a limit above its maximum, unmatched filter lists)."""
    one = {}
    keys, predicates, values = [], [], []
    for key, value in query:
        if key == "filter_keys":
            keys.append(value)
        elif key == "filter_predicates":
            predicates.append(value)
        elif key == "filter_values":
            values.append(value)
        else:
            one.setdefault(key, value)
    if not len(keys) == len(predicates) == len(values):
        raise ValueError("filter_keys, filter_predicates and filter_values must pair up.")
    limit = int(one.get("limit", DEFAULT_LIMIT))
    if limit > MAX_LIMIT:
        raise ValueError(f"Given limit {limit} exceeds the supported limit {MAX_LIMIT}. Use a "
                         "lower limit.")
    return limit, _flag(one.get("detail"), False), list(zip(keys, predicates, values))


def _list_response(rows, total, matched):
    return {"total": total, "num_after_truncation": total, "num_filtered": matched,
            "result": rows, "partial_failure_warning": "", "warnings": None}


def _lister(state, kind):
    schema = _state._SOURCES[kind][0]

    def handle(match, query):
        try:
            limit, detail, filters = _options(query)
            raw = list(state(kind))
            records, matched = _state._select(kind, raw, filters, limit, detail)
        except ValueError as exc:
            return _reply(None, 400, str(exc))
        columns = schema.list_columns(detail)  # Ray sends only the listed columns
        rows = [{c: getattr(r, c) for c in columns} for r in records]
        return _reply(_list_response(rows, len(raw), matched))

    return handle


def _summarizer(state, kind, summarize):
    def handle(match, query):
        raw = list(state(kind))
        body = _list_response(None, len(raw), len(raw))
        body["result"] = {"node_id_to_summary": summarize(raw)}
        return _reply(body)

    return handle


def _not_provided(symbol):
    def handle(match, query):
        return _reply(None, 501, str(gaps.attribute_gap_error("ray.util.state", symbol)))

    return handle
