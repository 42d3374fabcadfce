"""The ``ray`` command (mirrors Ray 2.60's ``ray.scripts.scripts:main``) on the embedded runtime.

``ray start --head`` starts a headless runtime that drivers attach to (``ray.init()``,
``ray.init(address="auto")``, ``RAY_ADDRESS``) and that serves Ray's Jobs API; ``ray stop``
ends it; ``ray status`` and ``ray list actors|tasks|nodes|placement-groups|workers|objects|jobs``
show it, in Ray's layouts; ``ray job submit|status|logs|stop|list|delete`` drive jobs through
the Jobs API (``ray.job_submission.JobSubmissionClient``), ours or any server of it.
Commands Ray has and the adapter does not (``ray up``, ``ray memory``, joining a second node
with ``ray start --address``, ...) exit 1 with an error naming the gap.

Exit status: 0 done, 1 failed (the reason on stderr), 2 a usage error (as click reports one).
"""
import argparse
import asyncio
import datetime
import enum
import json
import os
import shlex
import sys

from ray_adapter.core import runtimes

_GAP = ("ray-adapter: `ray {cmd}` is not provided{why}. The compat matrix says what is "
        "(`ray-adapter report`, module ray.scripts.scripts).\n")
_LIST_KINDS = {"actors": "list_actors", "tasks": "list_tasks", "nodes": "list_nodes",
               "placement-groups": "list_placement_groups", "workers": "list_workers",
               "objects": "list_objects", "jobs": "list_jobs"}
#: ``ray summary`` resources: (State API function, title, what the table groups by).
_SUMMARIES = {"tasks": ("summarize_tasks", "Tasks", "func_name"),
              "actors": ("summarize_actors", "Actors", "class"),
              "objects": ("summarize_objects", "Object", "callsite")}


def main(args=None):
    """Run the ``ray`` command with ``args`` (default ``sys.argv[1:]``); exits with its status
    (as Ray's click entry point does)."""
    sys.exit(run(sys.argv[1:] if args is None else list(args)))


def run(argv):
    """The ``ray`` command's work; returns its exit status."""
    parser = _parser()
    if argv and argv[0] not in ("start", "stop", "status", "list", "get", "summary", "job", "-h",
                                "--help", "--version"):
        sys.stderr.write(_GAP.format(cmd=argv[0], why=_why(argv[0])))
        return 1
    options = parser.parse_args(argv)
    try:
        return options.func(options)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        sys.stderr.write(f"{type(exc).__name__}: {exc}\n")
        return 1


def _why(cmd):
    if cmd in ("up", "down", "attach", "exec", "submit", "rsync-up", "rsync-down", "get-head-ip"):
        return ": cluster launching is Ray's autoscaler's; a Yuanrong cluster has its own tooling"
    return ""


def _parser():
    from ray_adapter import __version__

    parser = argparse.ArgumentParser(prog="ray", description="The ray command of ray-adapter "
                                     "(embedded runtime).")
    parser.add_argument("--version", action="version", version=f"ray, version 2.60.0 (ray-adapter {__version__})")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("start", help="start a runtime on this machine")
    p.add_argument("--head", action="store_true", help="start the head of a new runtime")
    p.add_argument("--address", help="join a running runtime as another node (not provided)")
    p.add_argument("--port", type=int, default=None, help="the head's port (default 6379): its address is 127.0.0.1:PORT")
    p.add_argument("--num-cpus", type=int, default=None)
    p.add_argument("--num-gpus", type=int, default=None)
    p.add_argument("--memory", type=int, default=None)
    p.add_argument("--object-store-memory", type=int, default=None)
    p.add_argument("--resources", default=None, help="custom resources, a JSON object")
    p.add_argument("--labels", default=None, help="node labels: key1=value1,key2=value2")
    p.add_argument("--node-ip-address", default=None)
    p.add_argument("--dashboard-host", default="127.0.0.1")
    p.add_argument("--dashboard-port", type=int, default=None)
    p.add_argument("--include-dashboard", default=None)
    p.add_argument("--temp-dir", default=None)
    p.add_argument("--block", action="store_true", help="stay in the foreground until the runtime ends")
    p.add_argument("--disable-usage-stats", action="store_true")
    # Where Ray's own processes would listen: this runtime opens none of these ports (its
    # workers talk over socket pairs, drivers over a private Unix socket), so launch scripts
    # that pin them (NeMo-RL's ray.sub, SLURM and Kubernetes templates) start unchanged.
    for flag in ("--node-manager-port", "--object-manager-port", "--runtime-env-agent-port",
                 "--min-worker-port", "--max-worker-port", "--worker-port-list",
                 "--metrics-export-port", "--dashboard-agent-grpc-port",
                 "--dashboard-agent-listen-port", "--ray-client-server-port", "--gcs-server-port",
                 "--redis-shard-ports", "--dashboard-grpc-port"):
        p.add_argument(flag, default=None, help="accepted; no such port is opened here")
    p.set_defaults(func=_start)

    p = sub.add_parser("stop", help="stop the runtimes `ray start` started on this machine")
    p.add_argument("-f", "--force", action="store_true", help="SIGKILL at once")
    p.add_argument("-g", "--grace-period", type=int, default=16, help="seconds before SIGKILL")
    p.add_argument("-v", "--verbose", action="store_true")
    p.set_defaults(func=_stop)

    p = sub.add_parser("status", help="nodes, resources and pending demands of the runtime")
    p.add_argument("--address", default=None)
    p.add_argument("-v", "--verbose", action="store_true")
    p.set_defaults(func=_status)

    p = sub.add_parser("list", help="State API records")
    p.add_argument("resource", choices=sorted(list(_LIST_KINDS) + ["cluster-events",
                                                                   "runtime-envs"]))
    p.add_argument("--address", default=None)
    p.add_argument("-f", "--filter", action="append", default=[], help='"key=value" or "key!=value"')
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--detail", action="store_true", help="every field (printed as YAML by default)")
    p.add_argument("--format", choices=("default", "json", "yaml", "table"), default="default")
    p.set_defaults(func=_list)

    p = sub.add_parser("get", help="one State API record by id, as YAML")
    p.add_argument("resource", choices=sorted(k for k in _LIST_KINDS if k != "jobs"))  # as Ray's
    p.add_argument("id", nargs="?", default=None)
    p.add_argument("--address", default=None)
    p.set_defaults(func=_get)

    p = sub.add_parser("summary", help="State API summaries (tasks, actors, objects)")
    p.add_argument("resource", choices=sorted(_SUMMARIES))
    p.add_argument("--address", default=None)
    p.set_defaults(func=_summary)

    job = sub.add_parser("job", help="submit and manage jobs (Ray's Jobs API)")
    jobs = job.add_subparsers(dest="job_command", required=True)
    p = jobs.add_parser("submit", help="submit a job: ray job submit [options] -- ENTRYPOINT...")
    _job_address(p)
    p.add_argument("--job-id", default=None, help="deprecated: use --submission-id")
    p.add_argument("--submission-id", default=None)
    p.add_argument("--runtime-env", default=None, help="a YAML or JSON file of the runtime env")
    p.add_argument("--runtime-env-json", default=None)
    p.add_argument("--working-dir", default=None)
    p.add_argument("--metadata-json", default=None)
    p.add_argument("--entrypoint-num-cpus", type=float, default=None)
    p.add_argument("--entrypoint-num-gpus", type=float, default=None)
    p.add_argument("--entrypoint-memory", type=int, default=None)
    p.add_argument("--entrypoint-resources", default=None, help="a JSON object")
    p.add_argument("--no-wait", action="store_true", help="do not follow the logs")
    p.add_argument("entrypoint", nargs=argparse.REMAINDER)
    p.set_defaults(func=_job_submit)
    for name, func in (("status", _job_status), ("logs", _job_logs), ("stop", _job_stop),
                       ("delete", _job_delete)):
        p = jobs.add_parser(name)
        _job_address(p)
        p.add_argument("job_id")
        if name == "logs":
            p.add_argument("-f", "--follow", action="store_true")
        if name == "stop":
            p.add_argument("--no-wait", action="store_true")
        p.set_defaults(func=func)
    p = jobs.add_parser("list")
    _job_address(p)
    p.set_defaults(func=_job_list)
    return parser


def _job_address(p):
    p.add_argument("--address", default=None, help="the Jobs API (default: RAY_API_SERVER_ADDRESS, "
                   "RAY_ADDRESS, else http://localhost:8265)")
    p.add_argument("--verify", default=True)
    p.add_argument("--headers", default=None, help="a JSON object of HTTP headers")


# -- ray start / stop --------------------------------------------------------------------------
def _start(o):
    if not o.head:
        if o.address:
            sys.stderr.write(_GAP.format(cmd="start --address", why=(
                ": the embedded runtime is one machine's; another node cannot join it (a "
                "Yuanrong cluster is the multi-machine runtime)")))
            return 1
        sys.stderr.write("Error: ray start needs --head (start a runtime) or --address.\n")
        return 2
    if o.temp_dir:
        os.environ["RAY_TMPDIR"] = o.temp_dir
    include = o.include_dashboard
    if include is not None and include.lower() not in ("true", "false", "1", "0"):
        raise ValueError(f"--include-dashboard takes true or false, got {include!r}")
    options = {"num_cpus": o.num_cpus, "num_gpus": o.num_gpus, "memory": o.memory,
               "object_store_memory": o.object_store_memory, "port": o.port,
               "include_dashboard": include is None or include.lower() in ("true", "1"),
               "dashboard_host": o.dashboard_host, "dashboard_port": o.dashboard_port,
               "resources": json.loads(o.resources) if o.resources else {},
               "labels": _labels(o.labels),
               # the State API's REST routes, served beside the Jobs API (`ray list --address`)
               "http_routes": ["ray_adapter.ray.util.state._rest:routes"]}
    if not isinstance(options["resources"], dict):
        raise ValueError(f"--resources must be a JSON object, got {o.resources!r}")
    record = runtimes.start_head(options)
    address, log, dashboard = record["address"], record["log"], record.get("dashboard")
    jobs = (f"  To submit a Ray job using the Ray Jobs CLI:\n    RAY_API_SERVER_ADDRESS='{dashboard}' "
            "ray job submit --working-dir . -- python my_script.py\n\n" if dashboard else "")
    print(f"Local node IP: {address.rsplit(':', 1)[0]}\n\n--------------------\nRay runtime started.\n"
          "--------------------\n\nNext steps\n  To connect to this Ray runtime from a driver on "
          "this machine:\n    import ray\n    ray.init()\n\n"
          f"  (or ray.init(address='{address}'), or RAY_ADDRESS='{address}')\n\n{jobs}"
          "  To see its nodes and resources, run\n    ray status\n\n"
          "  To terminate the Ray runtime, run\n    ray stop\n\n"
          f"  Its log: {log}\n"
          + (f"  The Jobs API (no dashboard pages): {dashboard}" if dashboard else
             "  No Jobs API (--include-dashboard false)."))
    sys.stdout.flush()
    if o.block:
        return _block(record)
    return 0


def _block(record):
    """``--block``: wait in the foreground until the runtime ends; SIGINT / SIGTERM stop it."""
    import select
    import signal

    stopping = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopping.append(True))
    try:
        fd = os.pidfd_open(record["pid"])
    except ProcessLookupError:
        return 1
    try:
        while True:
            try:
                ready, _, _ = select.select([fd], [], [])
            except InterruptedError:
                ready = []
            if stopping:
                runtimes.stop_heads()
                return 0
            if ready:
                sys.stderr.write("The Ray runtime ended.\n")
                return 1
    finally:
        os.close(fd)


def _labels(text):
    if not text:
        return {}
    labels = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--labels takes key1=value1,key2=value2; got {text!r}")
        labels[key.strip()] = value.strip()
    return labels


def _stop(o):
    stopped = runtimes.stop_heads(force=o.force, grace=o.grace_period)
    if not stopped:
        print("Did not find any active Ray processes.")
    else:
        print(f"Stopped all {len(stopped)} Ray processes.")
    return 0


# -- ray status / list -------------------------------------------------------------------------
class _Attached:
    """The runtime at ``address`` (None: the one ``ray start`` started, else the newest),
    attached to for one command, as a tool (an observer: no job of its own)."""

    def __init__(self, address):
        self.address = address

    def __enter__(self):
        from ray_adapter.ray._private import worker

        address = self.address or os.environ.get("RAY_ADDRESS") or "auto"
        if "://" in address:  # a Jobs API URL (what `ray job` takes): the runtime of this machine
            address = "auto"
        worker.init(address=address, logging_level="WARNING", log_to_driver=False,
                    _ray_adapter_observer=True)
        return self

    def __exit__(self, *exc):
        from ray_adapter.ray._private import worker

        worker.shutdown()


def _status(o):
    from ray_adapter.ray._private import state
    from ray_adapter.ray._private.core_access import core, translated

    with _Attached(o.address):
        nodes = state.nodes()
        total = state.cluster_resources()
        available = state.available_resources()
        demands = _pending_demands()
        with translated:
            stored = core().object_store_stats()["bytes_used"]  # what puts and results hold
    now = datetime.datetime.now()
    lines = [f"======== Autoscaler status: {now} ========", "Node status",
             "-" * 63, "Active:"]
    lines += [f" 1 node_{n['NodeID']}" for n in nodes if n.get("Alive")]
    lines += ["Pending:", " (no pending nodes)", "Recent failures:", " (no failures)", "",
              "Resources", "-" * 63, "Total Usage:"]
    for key in sorted(total, key=_resource_order):
        if key.startswith("node:"):
            continue
        used = stored if key == "object_store_memory" else total[key] - available.get(key, 0.0)
        if key in ("memory", "object_store_memory"):
            lines.append(f" {_bytes(used)}/{_bytes(total[key])} {key}")
        else:
            lines.append(f" {used:.1f}/{total[key]:.1f} {key}")
    lines += ["", "Total Constraints:", " (no request_resources() requests)", "Total Demands:"]
    lines += [f" {shape}: {count}+ pending tasks/actors" for shape, count in demands] or [
        " (no resource demands)"]
    print("\n".join(lines))
    return 0


def _resource_order(key):
    return ({"CPU": 0, "GPU": 1, "memory": 3, "object_store_memory": 4}.get(key, 2), key)


def _bytes(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return f"{int(n)}B"


def _pending_demands():
    from ray_adapter.ray.util import state

    counts = {}
    for task in state.list_tasks(filters=[("state", "=", "PENDING_NODE_ASSIGNMENT")], limit=10000):
        shape = json.dumps(dict(sorted((task.required_resources or {}).items())))
        counts[shape] = counts.get(shape, 0) + 1
    return sorted(counts.items())


def _list(o):
    if o.resource not in _LIST_KINDS:
        sys.stderr.write(_GAP.format(cmd=f"list {o.resource}", why=""))
        return 1
    filters = []
    for text in o.filter:
        op = "!=" if "!=" in text else "="
        key, _, value = text.partition(op)
        filters.append((key.strip(), op, value.strip()))
    records = _records(o, filters or None, o.limit, o.detail)
    if not records:
        print("No resource in the cluster")
        return 0
    style = "yaml" if o.detail and o.format == "default" else o.format  # as Ray's --detail
    return _print_rows([_plain(r) for r in records], style)


def _records(o, filters, limit, detail):
    """The State API's records of ``o.resource`` from the runtime at ``o.address``."""
    from ray_adapter.ray.util import state

    with _Attached(o.address):
        return getattr(state, _LIST_KINDS[o.resource])(filters=filters, limit=limit, detail=detail)


def _get(o):
    """``ray get RESOURCE ID``: the record(s) of that id, as YAML (Ray's output), or Ray's
    not-found line."""
    if not o.id:
        sys.stderr.write(f"Error: Missing argument 'ID'. Do you mean 'ray list {o.resource}'?\n")
        return 2
    column = {"placement-groups": "placement_group_id"}.get(o.resource, o.resource[:-1] + "_id")
    records = _records(o, [(column, "=", o.id)], 10_000, True)
    if not records:
        print(f"Resource with id={o.id} not found in the cluster.")
        return 0
    return _print_rows([_plain(r) for r in records], "yaml")


def _summary(o):
    """``ray summary tasks|actors|objects``: Ray's summary of the runtime, as Ray prints it
    (the scalar figures, then a table grouped by function, class or call site)."""
    from ray_adapter.ray.util import state

    function, title, group = _SUMMARIES[o.resource]
    with _Attached(o.address):
        summary = getattr(state, function)()["cluster"]
    rule = "-" * 36
    stats = "\n".join(f"{k}: {v}" for k, v in sorted(summary.items())
                      if k not in ("summary", "summary_by"))
    print(f"======== {title} Summary: {datetime.datetime.now()} ========\nStats:\n{rule}\n{stats}\n")
    rows = list(summary["summary"].items())
    print(f"Table (group by {group}):\n{rule}")
    if o.resource == "objects":  # one table per call site, under its name
        for site, entry in rows:
            print(site)
            print(_table([{k: _flat(v) for k, v in sorted(entry.items())}]))
    else:
        print(_table([{k: _flat(v) for k, v in sorted(entry.items())} for _, entry in rows]))
    return 0


def _flat(value):
    """A summary's count dict as one cell (``FINISHED: 3, FAILED: 1``)."""
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in value.items())
    return value


def _print_rows(rows, style):
    """Print State API ``rows`` as Ray's ``ray list`` does in ``style``: ``json`` (one line),
    ``yaml`` (a document, fields in their order), else a table under Ray's header."""
    if style == "json":
        print(json.dumps(rows, default=str))
        return 0
    if style == "yaml":
        import yaml

        print(yaml.dump(rows, indent=4, explicit_start=True, sort_keys=False, explicit_end=True))
        return 0
    print(f"======== List: {datetime.datetime.now()} ========\nStats:\n{'-' * 30}\n"
          f"Total: {len(rows)}\n\nTable:\n{'-' * 30}")
    print(_table(rows))
    return 0


def _plain(record):
    import dataclasses

    data = dataclasses.asdict(record) if dataclasses.is_dataclass(record) else dict(record)
    return {k: (v.value if isinstance(v, enum.Enum) else v) for k, v in data.items()}  # None: null, as Ray prints it


def _table(rows):
    if not rows:
        return ""
    # the scalar columns some row has a value in (a field no record has is left out)
    columns = list(dict.fromkeys(k for row in rows for k in row
                                 if row[k] is not None and not isinstance(row[k], (dict, list))))
    cells = [[str(i)] + ["" if row.get(c) is None else str(row[c]).replace("\n", " ") for c in columns]
             for i, row in enumerate(rows)]
    header = [""] + [c.upper() for c in columns]
    widths = [max(len(r[i]) for r in cells + [header]) for i in range(len(header))]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    return "\n".join(" " + line for line in out)


# -- ray job -----------------------------------------------------------------------------------
def _client(o):
    from ray_adapter.ray.job_submission import JobSubmissionClient

    headers = json.loads(o.headers) if getattr(o, "headers", None) else None
    verify = getattr(o, "verify", True)
    if isinstance(verify, str):
        verify = verify.lower() not in ("false", "0") and (verify if verify.lower() not in ("true", "1") else True)
    client = JobSubmissionClient(getattr(o, "address", None), headers=headers, verify=verify)
    print(f"Job submission server address: {client._address}", file=sys.stderr)
    return client


def _job_submit(o):
    entrypoint = o.entrypoint[1:] if o.entrypoint[:1] == ["--"] else o.entrypoint
    if not entrypoint:
        sys.stderr.write("Error: ray job submit needs an entrypoint: ray job submit [options] -- "
                         "python my_script.py\n")
        return 2
    runtime_env = {}
    if o.runtime_env:
        with open(o.runtime_env) as f:
            text = f.read()
        try:
            runtime_env = json.loads(text)
        except ValueError:
            import yaml  # a YAML file, as Ray takes one

            runtime_env = yaml.safe_load(text) or {}
    if o.runtime_env_json:
        runtime_env = json.loads(o.runtime_env_json)
    if o.working_dir:
        runtime_env["working_dir"] = o.working_dir
    client = _client(o)
    submission_id = client.submit_job(
        entrypoint=shlex.join(entrypoint),
        submission_id=o.submission_id or o.job_id, runtime_env=runtime_env or None,
        metadata=json.loads(o.metadata_json) if o.metadata_json else None,
        entrypoint_num_cpus=o.entrypoint_num_cpus, entrypoint_num_gpus=o.entrypoint_num_gpus,
        entrypoint_memory=o.entrypoint_memory,
        entrypoint_resources=json.loads(o.entrypoint_resources) if o.entrypoint_resources else None)
    line = "-" * (len(submission_id) + 33)
    print(f"{line}\nJob '{submission_id}' submitted successfully\n{line}\n\nNext steps\n"
          f"  Query the logs of the job:\n    ray job logs {submission_id}\n"
          f"  Query the status of the job:\n    ray job status {submission_id}\n"
          f"  Request the job to be stopped:\n    ray job stop {submission_id}\n", flush=True)
    if o.no_wait:
        return 0
    print("Tailing logs until the job exits (disable with --no-wait):", flush=True)
    _follow(client, submission_id)
    info = client.get_job_info(submission_id)
    word = {"SUCCEEDED": "succeeded", "STOPPED": "was stopped", "FAILED": "failed"}.get(
        info.status.value, info.status.value)
    line = "-" * (len(submission_id) + len(word) + 7)
    print(f"{line}\nJob '{submission_id}' {word}\n{line}")
    if info.status.value == "FAILED":
        print(f"Status message: {info.message}")
    return 0 if info.status.value == "SUCCEEDED" else 1


def _follow(client, submission_id):
    async def tail():
        async for chunk in client.tail_job_logs(submission_id):
            sys.stdout.write(chunk)
            sys.stdout.flush()

    asyncio.run(tail())


def _job_status(o):
    info = _client(o).get_job_info(o.job_id)
    print(f"Status for job '{o.job_id}': {info.status.value}\nStatus message: {info.message}")
    return 0


def _job_logs(o):
    client = _client(o)
    if o.follow:
        _follow(client, o.job_id)
    else:
        sys.stdout.write(client.get_job_logs(o.job_id))
    return 0


def _job_stop(o):
    client = _client(o)
    if not client.stop_job(o.job_id):
        print(f"Job '{o.job_id}' has already ended ({client.get_job_status(o.job_id).value}): "
              "nothing to stop")
        return 0
    print(f"Attempting to stop job '{o.job_id}'")
    if o.no_wait:
        return 0
    import time

    print("Waiting for job to exit (disable with --no-wait):", flush=True)
    while not client.get_job_status(o.job_id).is_terminal():
        time.sleep(0.2)  # the Jobs API has no wait: Ray's CLI polls it too
    print(f"Job '{o.job_id}' was stopped")
    return 0


def _job_delete(o):
    _client(o).delete_job(o.job_id)
    print(f"Job '{o.job_id}' deleted successfully")
    return 0


def _job_list(o):
    print(repr(_client(o).list_jobs()))
    return 0
