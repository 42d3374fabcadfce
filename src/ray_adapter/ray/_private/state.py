"""``ray._private.state``: the cluster-state helpers workloads import at top level.

Ray serves these from its GCS; here the runtime core answers them (no separate process).
Provided: ``available_resources_per_node()``, ``total_resources_per_node()``,
``cluster_resources()``, ``available_resources()``, ``nodes()``, ``current_node_id()``,
``node_ids()``, ``timeline()``, and ``state`` (a :class:`GlobalState`) with
``placement_group_table(placement_group_id=None)``, ``get_placement_group_by_name``,
``node_table``, ``_live_node_ids`` and the per-node resource methods. Ray's other names here
(its GCS tables and client plumbing) raise the matrix's gap error
(``compat_matrix/ray._private.state.toml``).
"""
from ray_adapter import gaps as _gaps
from ray_adapter.ray._private import session as _session
from ray_adapter.ray._private.core_access import context, core, translated

NODE_ID_PREFIX = "node:"
HEAD_NODE_RESOURCE_NAME = "node:__internal_head__"


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
                records = core().placement_group_table(placement_group_id.binary())
                return _group_entry(records[0]) if records else {}
            return {r["placement_group_id"].hex(): _group_entry(r)
                    for r in core().placement_group_table(None)}

    def get_placement_group_by_name(self, placement_group_name, ray_namespace):
        with translated:
            for record in core().placement_group_table(None):
                if (record["name"] == placement_group_name and record["namespace"] == ray_namespace
                        and record["state"] != "REMOVED"):
                    return _group_entry(record)
        return None

    def node_table(self):
        """One dict per node, with Ray's keys (what ``ray.nodes()`` returns)."""
        core_ = core()
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
            return core().resources_per_node("available")

    _available_resources_per_node = available_resources_per_node

    def total_resources_per_node(self):
        """``{node id hex: {resource: amount}}`` of each live node's total resources."""
        with translated:
            return core().resources_per_node("total")

    def _live_node_ids(self):
        return set(self.total_resources_per_node())

    def cluster_resources(self):
        with translated:
            return core().cluster_resources()

    def available_resources(self):
        with translated:
            return core().available_resources()

    def chrome_tracing_dump(self, filename=None):
        from ray_adapter.ray._private.profiling import timeline

        return timeline(filename)


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
    """Hex ids of the live nodes."""
    return [n["NodeID"] for n in nodes() if n["Alive"]]


def current_node_id():
    """The ``node:<ip>`` resource name of the caller's node."""
    return NODE_ID_PREFIX + context().node_ip_address


def timeline(filename=None):
    from ray_adapter.ray._private.profiling import timeline as _timeline

    return _timeline(filename)


def __getattr__(name):
    # Ray's other names here read its GCS directly: each a gap that says what to use instead.
    return _module_gap(name)


_module_gap = _gaps.module_getattr("ray._private.state")
