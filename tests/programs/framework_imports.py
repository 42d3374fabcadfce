"""The module shapes RL frameworks import from Ray's internals and implementation modules
(`from ray.util.collective import collective`, `ray._private.services.get_node_ip_address`, the
runtime-env constants), used as they use them. (`from ray.util.state import api` is checked in
tests/test_framework_imports.py: Ray answers the State API through its dashboard, whose port
several Ray instances on one machine contend for.)"""
import ray
from ray._private.runtime_env.constants import RAY_JOB_CONFIG_JSON_ENV_VAR
from ray._private.services import get_node_ip_address
from ray.util.collective import collective

print("job config variable:", RAY_JOB_CONFIG_JSON_ENV_VAR)
print("ip before init is a str:", isinstance(get_node_ip_address(), str))
ray.init(num_cpus=2)


@ray.remote
class Rank:
    def ready(self):
        return collective.is_group_initialized("weights")

    def ip(self):
        return get_node_ip_address() == ray.util.get_node_ip_address()


a = Rank.remote()
print("group initialized in a fresh actor:", ray.get(a.ready.remote()))
print("services ip equals ray.util's in a worker:", ray.get(a.ip.remote()))
print("collective.broadcast is ray.util.collective.broadcast:",
      collective.broadcast is ray.util.collective.broadcast)
ray.shutdown()
