"""The shapes in which RL frameworks and inference engines (verl, OpenRLHF, vLLM, NeMo-RL) reach
Ray, written for this test: implementation modules imported at module top level, Ray internals
behind try/except, runtime-env constants, options in a dict literal passed as **name to an actor
class defined elsewhere. `ray-adapter scan` must resolve every line: nothing `unknown`."""
import os

import ray
from ray._private.runtime_env.constants import RAY_JOB_CONFIG_JSON_ENV_VAR
from ray._private.services import get_node_ip_address
from ray.actor import ActorHandle
from ray.exceptions import GetTimeoutError, RayActorError
from ray.util import placement_group_table
from ray.util.collective import collective
from ray.util.placement_group import PlacementGroup, placement_group
from ray.util.scheduling_strategies import (NodeAffinitySchedulingStrategy,
                                            PlacementGroupSchedulingStrategy)
from ray.util.state import api

try:  # guarded engine internals: ImportError is expected where they are absent
    from ray._private.accelerators import TPUAcceleratorManager
except ImportError:
    TPUAcceleratorManager = None

try:
    from ray._private.runtime_env import nsight
except ImportError:
    nsight = None

JOB_CONFIG = os.environ.get(RAY_JOB_CONFIG_JSON_ENV_VAR)


def start(workers: "list[ActorHandle]", trainer_cls, pg: PlacementGroup):
    ray.init(namespace="rl", runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "true"}})
    opts = {
        "max_restarts": 0,
        "max_task_retries": 0,
        "runtime_env": {"env_vars": dict(os.environ)},
    }
    trainer = trainer_cls.options(**opts).remote()
    strategy = PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=0)
    node = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)
    collective.create_collective_group(workers, len(workers), list(range(len(workers))),
                                       backend="gloo", group_name="weights")
    table = placement_group_table(pg)["bundles_to_node_id"]
    nodes = [n.node_id for n in api.list_nodes()]
    group = placement_group([{"CPU": 1}], strategy="PACK")
    try:
        ray.get(group.ready(), timeout=10)
    except (GetTimeoutError, RayActorError):
        pass
    return trainer, strategy, node, table, nodes, get_node_ip_address()
