"""A compiled graph whose actor dies in a step (``os._exit``): that step's ``ray.get`` raises
the actor's death, the next ``execute`` RayChannelError, the graph's other actor lives on.
Skipped on yr-local, where actors are threads of the driver and ``os._exit`` would end it."""
import os

import ray
from ray.dag import InputNode

ray.init(num_cpus=4)


@ray.remote
class Stage:
    def forward(self, x):
        return x + 10

    def exit_on(self, x):
        if x == "exit":
            os._exit(1)
        return x


b = Stage.remote()
doomed = Stage.remote()
with InputNode() as inp:
    fragile = b.forward.bind(doomed.exit_on.bind(inp))
compiled = fragile.experimental_compile()
print("before death:", ray.get(compiled.execute(1)))
try:
    ray.get(compiled.execute("exit"), timeout=30)
except ray.exceptions.RayActorError as e:
    print("death:", type(e).__name__)
try:
    ray.get(compiled.execute(2), timeout=30)
except ray.exceptions.RayChannelError as e:
    print("after death:", type(e).__name__, str(e))
compiled.teardown()
print("the other actor lives:", ray.get(b.forward.remote(1)))
print("done")
ray.shutdown()
