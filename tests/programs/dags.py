"""ray.dag: lazy graphs of functions, actor classes and methods, InputNode access, MultiOutputNode,
execute(), and experimental_compile() on an actor pipeline."""
import asyncio
import warnings

import ray
from ray.dag import ClassMethodNode, ClassNode, FunctionNode, InputAttributeNode, InputNode, MultiOutputNode

warnings.simplefilter("ignore", DeprecationWarning)  # DAGNode.execute() is deprecated in Ray
ray.init(num_cpus=2)


@ray.remote
def add(a, b):
    return a + b


@ray.remote
def mul(a, b):
    return a * b


@ray.remote
def total(values):
    return sum(ray.get(list(values)))


@ray.remote
class Stage:
    def __init__(self, offset):
        self.offset = offset
        self.calls = []

    def forward(self, x):
        self.calls.append(x)
        return x + self.offset

    def history(self):
        return list(self.calls)


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y


# Functions, the input and its parts.
with InputNode() as inp:
    dag = add.bind(mul.bind(inp, 2), 1)
print(type(dag).__name__, type(inp).__name__)
print("f(inp):", [ray.get(dag.execute(v)) for v in (1, 5, 10)])
with InputNode() as inp:
    a, b = inp[0], inp.y
    print("attribute nodes:", type(a).__name__, type(b).__name__, isinstance(a, InputAttributeNode))
    by_parts = add.bind(a, b)
print("args and kwargs:", ray.get(by_parts.execute(3, y=4)))
with InputNode() as inp:
    by_index = add.bind(inp[0], inp[1])
    by_key = mul.bind(inp["k"], inp["v"])
    by_attr = add.bind(inp.x, inp.y)
print("one list:", ray.get(by_index.execute([20, 22])))
print("one dict:", ray.get(by_key.execute({"k": 6, "v": 7})))
print("one object:", ray.get(by_attr.execute(Point(30, 12))))
print("no input:", ray.get(add.bind(40, 2).execute()))
print("options:", ray.get(add.options(num_cpus=1, name="adder").bind(1, 1).execute()))

# Nested nodes inside lists, shared nodes run once per execution.
with InputNode() as inp:
    shared = mul.bind(inp, 3)
    fan = total.bind([shared, add.bind(shared, 1), add.bind(shared, 2)])
print("nested list:", ray.get(fan.execute(2)))

# MultiOutputNode.
with InputNode() as inp:
    outs = MultiOutputNode([add.bind(inp, 1), mul.bind(inp, 10), inp])
got = outs.execute(4)
print("multi output:", type(got).__name__, ray.get(got[:2]), got[2])

# A ClassNode creates a fresh actor per execution; its methods run in bind order.
with InputNode() as inp:
    stage = Stage.bind(100)
    first = stage.forward.bind(inp)
    second = stage.forward.bind(first)
    pipeline = MultiOutputNode([first, second, stage.history.bind()])
print(type(stage).__name__, type(first).__name__, isinstance(first, ClassMethodNode), isinstance(stage, ClassNode))
print("class node run 1:", ray.get(pipeline.execute(1)))
print("class node run 2:", ray.get(pipeline.execute(2)))
handle = stage.execute()
print("class node alone:", type(handle).__name__, ray.get(handle.forward.remote(1)))

# Methods bound on an existing actor keep its state across executions.
s1, s2 = Stage.remote(10), Stage.remote(1000)
with InputNode() as inp:
    chain = s2.forward.bind(s1.forward.bind(inp))
print("handle chain:", [ray.get(chain.execute(i)) for i in range(3)], ray.get(s1.history.remote()))
print("method options:", ray.get(s1.forward.options(name="fwd").bind(5).execute()))
print("bound node is", isinstance(add.bind(1, 2), FunctionNode))
for misuse in (lambda: add.bind(1, 2).bind(3), lambda: add.bind(1, 2).remote()):
    try:
        misuse()
    except AttributeError as e:
        print("AttributeError:", str(e).split(" on ")[0])

# Compiled: the same actor graph, executed many times.
c1, c2 = Stage.remote(1), Stage.remote(2)
with InputNode() as inp:
    branches = MultiOutputNode([c1.forward.bind(inp), c2.forward.bind(inp)])
compiled = branches.experimental_compile()
print(type(compiled).__name__)
refs = compiled.execute(10)
print("compiled:", type(refs).__name__, [type(r).__name__ for r in refs], ray.get(refs))
again = compiled.execute(20)
print("compiled get():", again[0].get(), ray.get(again[1]))
try:
    ray.get(refs[0])
except ValueError as e:
    print("ValueError:", e)
print("compiled loop:", [ray.get(compiled.execute(i)) for i in range(3)])
compiled.teardown()
try:
    compiled.execute(1)
except ray.exceptions.RayChannelError as e:
    print("after teardown:", type(e).__name__)

with InputNode() as inp:
    chained = c2.forward.bind(c1.forward.bind(inp))
chained_compiled = chained.experimental_compile()
print("compiled chain:", ray.get(chained_compiled.execute(5)), ray.get(chained_compiled.execute(6)))
chained_compiled.teardown()

a1 = Stage.remote(7)


async def run_async():  # Ray's asyncio mode binds the graph to the loop it is compiled in
    with InputNode() as inp:
        async_dag = a1.forward.bind(inp).experimental_compile(enable_asyncio=True)
    fut = await async_dag.execute_async(3)
    out = (type(fut).__name__, await fut)
    async_dag.teardown()
    return out


print("compiled async:", asyncio.run(run_async()))

for build in (lambda i: add.bind(i, 1), lambda i: Stage.bind(0).forward.bind(i)):
    with InputNode() as inp:
        bad = build(inp)
    try:
        bad.experimental_compile()
    except (NotImplementedError, ValueError) as e:
        print(type(e).__name__ + ":", e)
print("done")
