"""Aliases: module aliases, from-imports with `as`, submodule imports, Ray internals."""
import ray as r
import ray.util.queue
import ray.serve as srv
from ray import exceptions as exc
from ray.util import ActorPool as Pool
from ray.util import placement_group as pg
from ray._private import services

r.init()
pool = Pool([])
pg([{"CPU": 1}])
q = ray.util.queue.Queue()
r.util.get_node_ip_address()
r.util.placement_group.PlacementGroup
err = exc.RayTaskError
get = r.get
get(None)
services.get_node_ip_address()
srv.run(None)


def shadow(ray_like):
    r = ray_like  # rebinding the alias: r is no longer Ray below
    return r.anything
