"""Generators with an integer num_returns (Ray's static generators), tasks and actor methods:
a generator that raises after k items gives its k values and fails the other returns; fewer
items than num_returns fail the missing ones, more are dropped; an async generator with an
integer num_returns fails every return; such failures are not retried; the refs passed on.
Prints only deterministic facts."""
import ray

ray.init(num_cpus=2)


def show(label, value):
    print(f"{label}: {value}")


def outcome(ref):
    try:
        return ray.get(ref, timeout=60)
    except ray.exceptions.RayTaskError as e:
        return f"{type(e).__name__}: {str(e).splitlines()[-1]}"


@ray.remote(num_returns=3)
def raise_after(k):
    for i in range(k):
        yield i
    raise ValueError(f"failed after {k}")


@ray.remote(num_returns=3)
def yields(n):
    for i in range(n):
        yield i


@ray.remote
class Gen:
    @ray.method(num_returns=3)
    def raise_after(self, k):
        for i in range(k):
            yield i
        raise ValueError(f"failed after {k}")

    @ray.method(num_returns=3)
    def yields(self, n):
        for i in range(n):
            yield i


@ray.remote
class AsyncGen:
    @ray.method(num_returns=2)
    async def agen(self):
        yield 1
        yield 2

    @ray.method(num_returns=2)
    def sync_gen(self, k):
        for i in range(k):
            yield i
        raise KeyError("sync generator in an async actor")


for k in (0, 1, 2, 3):
    show(f"task raising after {k}", [outcome(r) for r in raise_after.remote(k)])
for n in (0, 2, 3, 4):
    show(f"task yielding {n}", [outcome(r) for r in yields.remote(n)])
gen = Gen.remote()
for k in (0, 1, 2, 3):
    show(f"actor method raising after {k}", [outcome(r) for r in gen.raise_after.remote(k)])
for n in (0, 2, 4):
    show(f"actor method yielding {n}", [outcome(r) for r in gen.yields.remote(n)])
agen = AsyncGen.remote()
show("async generator, num_returns=2", [outcome(r) for r in agen.agen.remote()])
show("sync generator on an async actor", [outcome(r) for r in agen.sync_gen.remote(1)])

# The error names the user's frame, as a task's own exception does.
refs = raise_after.remote(1)
try:
    ray.get(refs[2])
except ray.exceptions.RayTaskError as e:
    show("traceback shows the generator's frame", "in raise_after" in str(e))
    show("is a ValueError", isinstance(e, ValueError))


# Not retried, even with retry_exceptions (the error comes while the returns are stored).
@ray.remote
class Counter:
    def __init__(self):
        self.n = 0

    def hit(self):
        self.n += 1

    def count(self):
        return self.n


@ray.remote(num_returns=2, max_retries=2, retry_exceptions=True)
def flaky(counter, k):
    ray.get(counter.hit.remote())
    for i in range(k):
        yield i
    raise ValueError("flaky")


for k in (0, 1):
    counter = Counter.remote()
    show(f"retry_exceptions, raising after {k}", [outcome(r) for r in flaky.remote(counter, k)])
    show(f"attempts, raising after {k}", ray.get(counter.count.remote()))


# The refs passed on: the values, and the failed returns.
@ray.remote
def plus_one(x):
    return x + 1


first, second, third = raise_after.remote(1)
show("a given value passed on", outcome(plus_one.remote(first)))
show("a failed return passed on", outcome(plus_one.remote(third)))
ready, _ = ray.wait([first, second, third], num_returns=3, timeout=30)
show("all three ready", len(ready))

ray.shutdown()
