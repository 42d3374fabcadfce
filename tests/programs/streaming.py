"""Streaming generators as Ray runs them: tasks and actor methods (sync and async) that yield,
errors at item k, ray.wait on a generator, backpressure, cancellation, dynamic generators and a
task consuming another task's stream. Prints only deterministic facts."""
import asyncio
import warnings

import ray

ray.init(num_cpus=2)


def show(label, value):
    print(f"{label}: {value}")


@ray.remote
class Gate:
    def __init__(self):
        self.event = asyncio.Event()

    async def open(self):
        self.event.set()

    async def wait(self):
        await self.event.wait()


# --- a generator task: the first item before the last -------------------------------------
@ray.remote
def produce(gate):
    yield "first"
    ray.get(gate.wait.remote())  # opened by the driver once it holds the first item
    yield "second"


gate = Gate.remote()
gen = produce.remote(gate)
show("generator task returns", type(gen).__name__)
show("first item", ray.get(next(gen)))
gate.open.remote()
show("second item", ray.get(next(gen)))
try:
    next(gen)
except StopIteration:
    show("then", "StopIteration")
show("is_finished", gen.is_finished())
show("completed", ray.get(gen.completed()))


# --- an exception at item k -------------------------------------------------------------------
class StepError(Exception):
    def __init__(self, step):
        super().__init__(f"failed at step {step}")
        self.step = step


@ray.remote
def steps(n):
    for i in range(n):
        yield i * i
    raise StepError(n)


outcomes = []
for ref in steps.remote(3):
    try:
        outcomes.append(ray.get(ref))
    except StepError as e:
        outcomes.append(f"{type(e).__name__} isinstance StepError={isinstance(e, StepError)} "
                        f"RayTaskError={isinstance(e, ray.exceptions.RayTaskError)} step={e.step}")
show("items then error", outcomes)


# --- actor generator methods, sync and async ----------------------------------------------------
@ray.remote
class Tokenizer:
    def tokens(self, text):
        for word in text.split():
            yield word.upper()

    async def atokens(self, text):
        for word in text.split():
            await asyncio.sleep(0)
            yield word[::-1]


tok = Tokenizer.remote()
show("sync method stream", [ray.get(r) for r in tok.tokens.remote("stream these words")])


async def consume():
    return [await ref async for ref in tok.atokens.remote("async for works")]


show("async method stream", asyncio.run(consume()))
show("explicit streaming", [ray.get(r) for r in tok.tokens.options(num_returns="streaming").remote("a b")])
show("integer num_returns", ray.get(tok.tokens.options(num_returns=2).remote("x y")))

# --- ray.wait on a generator ------------------------------------------------------------------
gate = Gate.remote()


@ray.remote
def later(gate):
    ray.get(gate.wait.remote())
    yield "ready now"


gen = later.remote(gate)
ready, pending = ray.wait([gen], timeout=0.5)
show("wait before the item", (len(ready), len(pending)))
gate.open.remote()
ready, pending = ray.wait([gen])
show("wait after the item", (len(ready), ready[0] is gen))
show("waited item", ray.get(next(gen)))


# --- backpressure -----------------------------------------------------------------------------
@ray.remote(max_concurrency=2)
class Producer:
    def __init__(self):
        self.made = 0

    @ray.method(_generator_backpressure_num_objects=2)
    def items(self, n):
        for i in range(n):
            self.made = i + 1
            yield i

    def made_(self):
        return self.made


producer = Producer.remote()
gen = producer.items.remote(6)
within_limit = True
taken = []
for _ in range(6):
    taken.append(ray.get(next(gen)))
    within_limit = within_limit and ray.get(producer.made_.remote()) <= len(taken) + 2
show("backpressure items", taken)
show("never more than 2 ahead", within_limit)


# --- cancelling a running stream ----------------------------------------------------------------
@ray.remote
def forever():
    import time

    i = 0
    while True:
        yield i
        i += 1
        time.sleep(0.02)


gen = forever.remote()
show("before cancel", ray.get(next(gen)))
ray.cancel(gen)
last = None
for ref in gen:
    try:
        ray.get(ref)
    except ray.exceptions.TaskCancelledError as e:
        last = e
show("cancelled stream ends with", type(last).__name__)
show("is a TaskCancelledError", isinstance(last, ray.exceptions.TaskCancelledError))

# --- dynamic generators -----------------------------------------------------------------------
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)

    @ray.remote(num_returns="dynamic")
    def dynamic(n):
        for i in range(n):
            yield f"part {i}"

dyn = ray.get(dynamic.remote(3))
show("dynamic returns", type(dyn).__name__)
show("dynamic length", len(dyn))
show("dynamic items", [ray.get(r) for r in dyn])


# --- a task consuming another task's stream ---------------------------------------------------
@ray.remote
def numbers(n):
    for i in range(n):
        yield i


@ray.remote
def total(n):
    return sum(ray.get(ref) for ref in numbers.remote(n))


show("nested stream total", ray.get(total.remote(10)))

# --- misuse -----------------------------------------------------------------------------------
try:
    @ray.remote(num_returns="streaming")
    def plain():
        return 1
except ValueError as e:
    show("streaming on a plain function", f"ValueError: {e}")

ray.shutdown()
