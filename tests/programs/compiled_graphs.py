"""Compiled graphs (``experimental_compile``) as an RL or pipeline loop runs them: steps over
the channels, a failing step and the next one, results got out of order, the in-flight limit,
other calls on the actors meanwhile, several outputs, a graph going back to an actor it came
from, arrays, the input's parts, teardown with kill_actors (an actor
that dies in a step: compiled_graph_faults.py)."""
import asyncio
import time

import numpy as np
import ray
from ray.dag import InputNode, MultiOutputNode

ray.init(num_cpus=4)


@ray.remote
class Stage:
    def __init__(self, offset):
        self.offset = offset
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if x == "boom":
            raise ValueError(f"boom at {self.offset}")
        return x if isinstance(x, str) else x + self.offset

    def pair(self, x, y):
        return (x, y)

    def ones(self, n):
        return np.ones(n, dtype=np.float32)

    def total(self, array):
        return float(array.sum()), array.flags.writeable

    def count(self):
        return self.calls



a, b = Stage.remote(1), Stage.remote(10)
with InputNode() as inp:
    chain = b.forward.bind(a.forward.bind(inp))
compiled = chain.experimental_compile()
print("steps:", [ray.get(compiled.execute(i)) for i in range(5)])

failing = compiled.execute("boom")
try:
    ray.get(failing)
except ray.exceptions.RayTaskError as e:
    print("failed step:", type(e).__name__, isinstance(e, ValueError), str(e).splitlines()[-1])
print("next step:", ray.get(compiled.execute(100)))

first, second = compiled.execute(1), compiled.execute(2)
print("out of order:", ray.get(second), ray.get(first))
print("other calls meanwhile:", ray.get(a.count.remote()) > 0, ray.get(b.count.remote()) > 0)

pending = []
try:
    for i in range(20):
        pending.append(compiled.execute(i))
except ray.exceptions.RayCgraphCapacityExceeded as e:
    print("capacity:", len(pending), type(e).__name__, "in-flight executions" in str(e))
print("drained:", [ray.get(r) for r in pending][:3], len(pending))
compiled.teardown()
try:
    compiled.execute(1)
except ray.exceptions.RayChannelError as e:
    print("after teardown:", type(e).__name__, str(e))
print("actors still serve:", ray.get(a.forward.remote(0)), ray.get(b.forward.remote(0)))

with InputNode() as inp:
    x = a.forward.bind(inp)
    y = b.forward.bind(x)
    multi = MultiOutputNode([x, y, a.forward.bind(y)])
compiled = multi.experimental_compile(_max_inflight_executions=3)
refs = compiled.execute(5)
print("several outputs:", ray.get(refs))
print("twice more:", [ray.get(compiled.execute(i)) for i in (6, 7)])
compiled.teardown()

with InputNode() as inp:
    parts = a.pair.bind(inp[0], inp.scale)
compiled = parts.experimental_compile()
print("input parts:", ray.get(compiled.execute(3, scale=4)), ray.get(compiled.execute("x", scale=None)))
compiled.teardown()

with InputNode() as inp:
    arrays = b.total.bind(a.ones.bind(inp))
compiled = arrays.experimental_compile()
print("arrays:", ray.get(compiled.execute(1000)), ray.get(compiled.execute(3)))
out = compiled.execute(4)
compiled.teardown()
with InputNode() as inp:
    direct = a.ones.bind(inp)
compiled = direct.experimental_compile()
array = ray.get(compiled.execute(4))
print("array back:", array.tolist(), array.flags.writeable)
del array  # under Ray it views the channel's memory, gone at teardown
compiled.teardown()


async def run_async():
    with InputNode() as inp:
        dag = b.forward.bind(a.forward.bind(inp)).experimental_compile(enable_asyncio=True)
    futures = [await dag.execute_async(i) for i in range(3)]
    values = [await f for f in futures]
    dag.teardown()
    return values


print("async:", asyncio.run(run_async()))

c = Stage.remote(3)
with InputNode() as inp:
    compiled = c.forward.bind(inp).experimental_compile()
print("last:", ray.get(compiled.execute(1)))
compiled.teardown(kill_actors=True)
for _ in range(300):  # the kill is asynchronous in Ray: a call right after it may still run
    try:
        ray.get(c.forward.remote(1), timeout=30)
    except ray.exceptions.RayActorError as e:
        print("killed with teardown:", type(e).__name__)
        break
    time.sleep(0.1)
print("done")
ray.shutdown()
