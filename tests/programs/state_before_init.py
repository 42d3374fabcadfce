"""Ray's global state before ray.init() and after ray.shutdown(): the helpers raise
RaySystemError and start nothing; current_node_id needs no runtime;
ray.util.placement_group_table starts one, as Ray's other API calls do."""
import ray
import ray._private.state as state
from ray.util import placement_group_table

CALLS = [
    ("ray.cluster_resources", ray.cluster_resources),
    ("ray.available_resources", ray.available_resources),
    ("ray.nodes", ray.nodes),
    ("state.actors", state.actors),
    ("state.jobs", state.jobs),
    ("state.node_ids", state.node_ids),
    ("state.available_resources_per_node", state.available_resources_per_node),
    ("state.total_resources_per_node", state.total_resources_per_node),
    ("state.state.placement_group_table", lambda: state.state.placement_group_table()),
    ("state.state.get_placement_group_by_name", lambda: state.state.get_placement_group_by_name("x", "y")),
    ("state.state.node_table", lambda: state.state.node_table()),
    ("state.state.job_table", lambda: state.state.job_table()),
    ("state.state.actor_table", lambda: state.state.actor_table(None)),
]


def probe(when):
    for name, call in CALLS:
        try:
            result = call()
        except Exception as e:  # noqa: BLE001 - what each raises is the point
            print(f"{when} {name}: {type(e).__name__}: {e}")
        else:
            print(f"{when} {name}: returned {type(result).__name__}")
    node = state.current_node_id()
    print(f"{when} state.current_node_id: {node.startswith('node:')}")
    print(f"{when} initialized: {ray.is_initialized()}")


probe("before init")
ray.init(num_cpus=1)
print("cluster CPUs:", ray.cluster_resources()["CPU"])
ray.shutdown()
probe("after shutdown")
table = placement_group_table()
print("placement_group_table after shutdown:", table, "initialized:", ray.is_initialized())
ray.shutdown()
