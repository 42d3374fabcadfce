"""``ray._private.state``: the cluster-state helpers workloads import at top level.

Ray serves these from its GCS; here the runtime core answers them (no separate process).
Provided: ``available_resources_per_node()``, ``total_resources_per_node()``,
``cluster_resources()``, ``available_resources()``, ``nodes()``, ``current_node_id()``,
``node_ids()``, ``timeline()``, ``actors()``, ``jobs()``, and ``state`` (a
:class:`GlobalState`) with ``placement_group_table(placement_group_id=None)``,
``get_placement_group_by_name``, ``node_table``, ``actor_table``, ``job_table``,
``_live_node_ids`` and the per-node resource methods. Ray's other names here
(its GCS tables and client plumbing) raise the matrix's gap error
(``compat_matrix/ray._private.state.toml``).
"""
from ray_adapter import gaps as _gaps
from ray_adapter.ray._private import session as _session
from ray_adapter.ray._private.errors import actor_record as _actor_record
from ray_adapter.ray._private.core_access import context_if_started, core_if_started, translated

NODE_ID_PREFIX = "node:"
HEAD_NODE_RESOURCE_NAME = "node:__internal_head__"


def _core():
    """The running core. Unlike the rest of Ray's API these helpers never start a runtime:
    before ``ray.init()`` (or after ``ray.shutdown()``, even one racing the caller) they raise
    RaySystemError with Ray's text, as Ray's global state does."""
    running = core_if_started()
    if running is None:
        from ray_adapter.ray.exceptions import RaySystemError

        raise RaySystemError("Ray has not been started yet. Trying to use state API before "
                             "ray.init() has been called.")
    return running


def _group_entry(record):
    """Ray's ``placement_group_table`` entry for a core record."""
    nodes = record["bundle_nodes"]
    return {
        "placement_group_id": record["placement_group_id"].hex(),
        "name": record["name"],
        "bundles": {i: dict(b) for i, b in enumerate(record["bundles"])},
        "bundles_to_node_id": {i: (nodes[i] or "") if i < len(nodes) else ""
                               for i in range(len(record["bundles"]))},
        "strategy": record["strategy"],
        "state": record["state"],
        "stats": dict(record["stats"]),
    }


class GlobalState:
    """``ray._private.state.state``: the cluster state the runtime core reports."""

    def placement_group_table(self, placement_group_id=None):
        """One group's entry (``{}`` if unknown) or ``{id hex: entry}`` for every group."""
        with translated:
            if placement_group_id is not None:
                records = _core().placement_group_table(placement_group_id.binary())
                return _group_entry(records[0]) if records else {}
            return {r["placement_group_id"].hex(): _group_entry(r)
                    for r in _core().placement_group_table(None)}

    def get_placement_group_by_name(self, placement_group_name, ray_namespace):
        with translated:
            for record in _core().placement_group_table(None):
                if (record["name"] == placement_group_name and record["namespace"] == ray_namespace
                        and record["state"] != "REMOVED"):
                    return _group_entry(record)
        return None

    def node_table(self):
        """One dict per node, with Ray's keys (what ``ray.nodes()`` returns)."""
        core_ = _core()
        out = []
        with translated:
            found = core_.nodes()
        for n in found:
            out.append({
                "NodeID": n["node_id"],
                "Alive": n["alive"],
                "NodeManagerAddress": n["address"],
                "NodeManagerHostname": n["hostname"],
                "NodeManagerPort": 0,
                "ObjectManagerPort": 0,
                "ObjectStoreSocketName": "",
                "RayletSocketName": "",
                "MetricsExportPort": _session._context.address_info.get("metrics_export_port", -1)
                if _session._context is not None else -1,  # one endpoint per machine: every node's
                "MetricsAgentPort": -1,
                "DashboardAgentListenPort": -1,
                "NodeName": n["address"],
                "RuntimeEnvAgentPort": 0,
                "DeathReason": 0,
                "DeathReasonMessage": "",
                "alive": n["alive"],
                "Resources": dict(n["resources_total"]),
                "Labels": {"ray.io/node-id": n["node_id"], **n.get("labels", {})},
            })
        return out

    def available_resources_per_node(self):
        """``{node id hex: {resource: amount}}`` of what is free on each live node (a
        resource with nothing free is omitted; bundles appear as ``CPU_group_...``)."""
        with translated:
            return _core().resources_per_node("available")

    _available_resources_per_node = available_resources_per_node

    def total_resources_per_node(self):
        """``{node id hex: {resource: amount}}`` of each live node's total resources."""
        with translated:
            return _core().resources_per_node("total")

    def _live_node_ids(self):
        return set(self.total_resources_per_node())

    def cluster_resources(self):
        with translated:
            return _core().cluster_resources()

    def available_resources(self):
        with translated:
            return _core().available_resources()

    def actor_table(self, actor_id, job_id=None, actor_state_name=None):
        """Ray's actor table: the entry of actor ``actor_id`` (hex; ``{}`` if unknown), or,
        with ``actor_id`` None, ``{actor id hex: entry}`` of every actor (live and dead) of job
        ``job_id`` (a ``ray.JobID``; None: every job) in state ``actor_state_name`` (None:
        any). An entry: ActorID, ActorClassName, IsDetached, Name, JobID, Address and
        OwnerAddress (IPAddress, Port, NodeID), State, NumRestarts, Timestamp, StartTime,
        EndTime (ms since the epoch; 0: not yet), DeathCause (None while alive; else the
        State API's ``death_cause``), Pid.
        Raises ValueError for an unknown state name or an id that is not 16 bytes of hex, as
        Ray does."""
        running = _core()  # before the arguments are checked, as Ray's
        if actor_state_name is not None and actor_state_name not in _ACTOR_STATES:
            names = ", ".join(f'"{n}"' for n in _ACTOR_STATES[:-1])
            raise ValueError(f'"{actor_state_name}" is not a valid actor state name, it must be '
                             f'one of the following: {names}, or "{_ACTOR_STATES[-1]}"')
        if actor_id is not None and len(bytes.fromhex(actor_id)) != 16:  # ValueError, as Ray's
            raise ValueError("ID string needs to have length 16")
        with translated:
            records = [_actor_record(r) for r in running.state("actors")]
            driver_node = running.context().node_id.hex()
        table = {}
        for record in records:
            if actor_id is not None:
                if record["actor_id"] == actor_id:
                    return _actor_entry(record, driver_node)
                continue
            if job_id is not None and record["job_id"] != job_id.hex():
                continue
            if actor_state_name is not None and record["state"] != actor_state_name:
                continue
            table[record["actor_id"]] = _actor_entry(record, driver_node)
        return {} if actor_id is not None else table

    def job_table(self):
        """Ray's job table: one dict per job (JobID, DriverIPAddress, DriverPid, Timestamp,
        StartTime, EndTime: ms since the epoch, 0 while it runs; IsDead, Entrypoint), for
        each driver's job this runtime knows (``ray.util.state.list_jobs``)."""
        with translated:
            records = _core().state("jobs")
        out = []
        for job in records:
            info = job.get("driver_info") or {}
            if job.get("type") != "DRIVER" or not job.get("job_id"):
                continue  # a submitted job is in the table through the driver it started
            out.append({"JobID": job["job_id"], "DriverIPAddress": info.get("node_ip_address", ""),
                        "DriverPid": int(info.get("pid") or 0),
                        "Timestamp": job.get("end_time") or job.get("start_time") or 0,
                        "StartTime": job.get("start_time") or 0, "EndTime": job.get("end_time") or 0,
                        "IsDead": job.get("status") != "RUNNING",
                        "Entrypoint": job.get("entrypoint") or ""})
        return out

    def chrome_tracing_dump(self, filename=None):
        _core()  # Ray's global state: RaySystemError before ray.init() (ray.timeline's own differs)
        from ray_adapter.ray._private.profiling import timeline

        return timeline(filename)


_ACTOR_STATES = ("DEPENDENCIES_UNREADY", "PENDING_CREATION", "ALIVE", "RESTARTING", "DEAD")


def _actor_entry(record, driver_node):
    """An actor table entry (Ray's keys) from the core's actor record."""
    registered, alive, dead, changed = record.get("times_ms") or (0, None, None, 0)
    node = record.get("node_id") or ""
    ip = record.get("node_ip") or ""
    return {
        "ActorID": record["actor_id"], "ActorClassName": record["class_name"],
        "IsDetached": bool(record.get("is_detached")), "Name": record.get("name") or "",
        "JobID": record["job_id"],
        "Address": {"IPAddress": ip, "Port": 0, "NodeID": node},
        "OwnerAddress": {"IPAddress": ip, "Port": 0, "NodeID": driver_node},
        "State": record["state"], "NumRestarts": record.get("num_restarts") or 0,
        "Timestamp": float(changed or registered or 0), "StartTime": alive or 0, "EndTime": dead or 0,
        "DeathCause": record.get("death_cause"), "Pid": record.get("pid") or 0,
    }


state = GlobalState()


def available_resources_per_node():
    """Free resources of each live node: ``{node id hex: {resource: amount}}``."""
    return state.available_resources_per_node()


def total_resources_per_node():
    """Total resources of each live node: ``{node id hex: {resource: amount}}``."""
    return state.total_resources_per_node()


def cluster_resources():
    """Total resources of the cluster, ``{name: amount}`` (``ray.cluster_resources`` is
    this function, as in Ray); ``memory`` and ``object_store_memory`` are in bytes."""
    return state.cluster_resources()


def available_resources():
    """Resources free now (``ray.available_resources`` is this function, as in Ray); a
    resource with nothing free is omitted, as in Ray."""
    return state.available_resources()


def nodes():
    """One dict per node, with Ray's keys (``ray.nodes`` is this function: Ray's global
    state's node table)."""
    return state.node_table()


def node_ids():
    """The ``node:<ip>`` resource name of each live node (as Ray's: usable as a custom
    resource to place work on that node; not the head's ``node:__internal_head__``)."""
    return [name for per_node in total_resources_per_node().values() for name in per_node
            if name.startswith(NODE_ID_PREFIX) and name != HEAD_NODE_RESOURCE_NAME]


def actors(actor_id=None, job_id=None, actor_state_name=None):
    """Ray's actor table (``state.actor_table``): ``{actor id hex: entry}``, or one actor's
    entry when ``actor_id`` (hex) is given."""
    return state.actor_table(actor_id=actor_id, job_id=job_id, actor_state_name=actor_state_name)


def jobs():
    """Ray's job table (``state.job_table``): one dict per driver's job."""
    return state.job_table()


def current_node_id():
    """The ``node:<ip>`` resource name of the caller's node (before ``ray.init()``: this
    machine's address, as Ray's; starts nothing)."""
    ctx = context_if_started()
    if ctx is not None:
        return NODE_ID_PREFIX + ctx.node_ip_address
    from ray_adapter.ray._private.services import get_node_ip_address

    return NODE_ID_PREFIX + get_node_ip_address()


def timeline(filename=None):
    from ray_adapter.ray._private.profiling import timeline as _timeline

    return _timeline(filename)


def __getattr__(name):
    # Ray's other names here read its GCS directly: each a gap that says what to use instead.
    return _module_gap(name)


_module_gap = _gaps.module_getattr("ray._private.state")
