"""``ray.timeline()``: a Chrome trace (``chrome://tracing``, Perfetto) of the tasks that ran.

The runtime core records when each task, actor call and actor creation started and finished
on which node and worker (``RuntimeCore.state("tasks")``); this turns those records into
Chrome-tracing ``X`` events in Ray's shape (``cat`` ``task::<name>``, ``pid`` the node's IP,
``tid`` ``worker:<worker id>``, ``ts``/``dur`` in microseconds).
"""

from ray_adapter.ray._private.core_access import core, started, translated


def timeline(filename=None):
    """The trace events as a list, or written to ``filename`` as JSON (then None is
    returned), mirroring ``ray.timeline``. Raises RuntimeError before ``ray.init()``."""
    if not started():
        raise RuntimeError("Ray has not been started yet. Timeline requires Ray to be "
                           "initialized first.")
    with translated:
        c = core()
        try:
            records = c.state("tasks")
        except NotImplementedError:
            from ray_adapter import gaps

            raise NotImplementedError(str(gaps.attribute_gap_error("ray", "timeline"))) from None
        ip_of = {n["node_id"]: n["address"] for n in c.nodes()}
    events = []
    for r in records:
        start = r.get("_start")
        if start is None:
            continue
        end = r.get("_end") or start
        name = r["func_or_class_name"]
        events.append({"cat": f"task::{r['name']}", "name": name, "pid": ip_of.get(r["node_id"], ""),
                       "tid": f"worker:{r['worker_id']}", "ts": start * 1e6,
                       "dur": max(0.0, end - start) * 1e6, "ph": "X",
                       "cname": "generic_work" if r["state"] != "FAILED" else "terrible",
                       "args": {"name": name, "task_id": r["task_id"]}})
    if filename is None:
        return events
    with open(filename, "w") as fh:
        import json  # lazy: keeps `import ray` fast
        json.dump(events, fh)
    return None
