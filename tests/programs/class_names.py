"""The names Ray's public classes go by: ``cls.__module__`` + ``__qualname__`` (what tracebacks,
logs, ``repr(type(x))`` and error reporters print), the last line of an uncaught Ray error's
traceback, and pickling those classes by reference (a class sent to a task and back is the
same class; its pickle is a reference, not the class's code)."""
import pickle
import traceback

import ray
import ray.util.queue
import ray.util.metrics
from ray import cloudpickle
from ray.util import ActorPool
from ray.util.placement_group import PlacementGroup
from ray.util.scheduling_strategies import (NodeAffinitySchedulingStrategy,
                                            PlacementGroupSchedulingStrategy)


def name(cls):
    return f"{cls.__module__}.{cls.__qualname__}"


ray.init(num_cpus=2)

for cls in (ray.exceptions.RayError, ray.exceptions.RayTaskError, ray.exceptions.GetTimeoutError,
            ray.exceptions.ActorDiedError, ray.exceptions.RayActorError,
            ray.exceptions.TaskCancelledError, ray.exceptions.ObjectLostError,
            ray.exceptions.WorkerCrashedError, ray.exceptions.OutOfMemoryError,
            ray.exceptions.RaySystemError, ray.exceptions.ActorUnavailableError,
            ray.actor.ActorClass, ray.actor.ActorHandle, ray.actor.ActorMethod,
            ray.remote_function.RemoteFunction, ray.runtime_context.RuntimeContext,
            PlacementGroup, PlacementGroupSchedulingStrategy, NodeAffinitySchedulingStrategy,
            ray.util.queue.Queue, ray.util.queue.Empty, ray.util.queue.Full, ActorPool,
            ray.util.metrics.Counter, ray.util.metrics.Gauge, ray.util.metrics.Histogram,
            ray.ObjectRef, ray.ObjectRefGenerator, ray.ActorID, ray.JobID, ray.NodeID,
            ray.TaskID, ray.PlacementGroupID):
    print(name(cls))


@ray.remote
def slow():
    import time
    time.sleep(3)


@ray.remote
def echo(value):
    return value


@ray.remote
class Actor:
    def ping(self):
        return "pong"


actor = Actor.remote()
print("handle type:", name(type(actor)), ray.get(actor.ping.remote()))
print("ref type:", name(type(ray.put(1))))
print("remote function type:", name(type(echo)))

try:
    ray.get(slow.remote(), timeout=0.05)
except ray.exceptions.GetTimeoutError as err:
    print("uncaught, it would end:", traceback.format_exception_only(type(err), err)[-1].strip())

ray.kill(actor)
try:
    ray.get(actor.ping.remote())
except ray.exceptions.RayActorError as err:
    print("a killed actor's call raises:", name(type(err)))

for cls in (ray.exceptions.GetTimeoutError, ray.exceptions.RayActorError, PlacementGroup,
            ray.util.queue.Empty):
    back = ray.get(echo.remote(cls))
    print(name(cls), "through a task is the same class:", back is cls,
          "| pickled by reference:", len(cloudpickle.dumps(cls)) < 200,
          "| pickle round trip:", pickle.loads(pickle.dumps(cls)) is cls)

ray.shutdown()
