"""ray.util.ActorPool: map and map_unordered submit at once and first discard the results of
earlier submit()s, the ordered and unordered getters, timeouts (with and without
ignore_if_timedout), a failing call, an actor that dies, methods returning several refs,
has_free / pop_idle / push. Prints only deterministic facts."""
import re
import time

import ray
from ray.util import ActorPool

ray.init(num_cpus=2)


def show(label, value):
    print(f"{label}: {value}")


def no_ids(text):
    return re.sub(r"ObjectRef\([0-9a-f]+\)", "ObjectRef(...)", str(text))


@ray.remote
class Worker:
    def __init__(self, tag):
        self.tag = tag
        self.seen = []

    def double(self, v):
        self.seen.append(v)
        return 2 * v

    def slow(self, v):
        self.seen.append(v)
        time.sleep(v)
        return v

    def fail(self, v):
        raise ValueError(f"bad value {v}")

    def pair(self, v):
        return v, -v

    def history(self):
        return self.seen


def history(actors):
    return sorted(v for a in actors for v in ray.get(a.history.remote()))


# --- map and map_unordered submit before the first result is asked for ---------------------------
actors = [Worker.remote(i) for i in range(2)]
pool = ActorPool(actors)
results = pool.map(lambda a, v: a.double.remote(v), [1, 2])
show("map returns", type(results).__name__)
time.sleep(1)
show("values the actors saw before iterating", history(actors))
show("map results", list(results))
unordered = pool.map_unordered(lambda a, v: a.double.remote(v), [3, 4])
time.sleep(1)
show("map_unordered: values seen before iterating", history(actors))
show("map_unordered results", sorted(unordered))

# --- map discards what earlier submit()s left --------------------------------------------------
pool = ActorPool([Worker.remote(i) for i in range(2)])
pool.submit(lambda a, v: a.double.remote(v), 100)
pool.submit(lambda a, v: a.double.remote(v), 200)
time.sleep(1)
show("map after two submits", list(pool.map(lambda a, v: a.double.remote(v), [1, 2, 3])))
pool.submit(lambda a, v: a.double.remote(v), 300)
show("map_unordered after a submit", sorted(pool.map_unordered(lambda a, v: a.double.remote(v), [5, 6])))
show("has_next after", pool.has_next())

# --- map waits past an earlier slow submit (it is ignored) -------------------------------------
actors = [Worker.remote(i) for i in range(1)]
pool = ActorPool(actors)
pool.submit(lambda a, v: a.slow.remote(v), 2)
show("map while the earlier call runs", list(pool.map(lambda a, v: a.double.remote(v), [7])))

# --- get_next / get_next_unordered ------------------------------------------------------------
pool = ActorPool([Worker.remote(i) for i in range(2)])
for v in [1, 2, 3, 4]:
    pool.submit(lambda a, v: a.double.remote(v), v)
show("has_free with queued submits", pool.has_free())
show("get_next in order", [pool.get_next() for _ in range(4)])
show("has_next when drained", pool.has_next())
try:
    pool.get_next()
except StopIteration as e:
    show("get_next on an empty pool", f"{type(e).__name__}: {e}")
try:
    pool.get_next_unordered()
except StopIteration as e:
    show("get_next_unordered on an empty pool", f"{type(e).__name__}: {e}")
pool.submit(lambda a, v: a.slow.remote(v), 1)
pool.submit(lambda a, v: a.double.remote(v), 6)
show("get_next_unordered takes the first done", pool.get_next_unordered())
try:
    pool.get_next()
except ValueError as e:
    show("get_next after get_next_unordered passed it", f"{type(e).__name__}: {e}")
show("the slow one, unordered", pool.get_next_unordered())
pool.submit(lambda a, v: a.double.remote(v), 7)
show("get_next again after a new submit", pool.get_next())

# --- timeouts -----------------------------------------------------------------------------------
pool = ActorPool([Worker.remote(0)])
pool.submit(lambda a, v: a.slow.remote(v), 3)
try:
    pool.get_next(timeout=0.1)
except TimeoutError as e:
    show("get_next(timeout)", f"{type(e).__name__}: {e}")
show("still pending after a timeout", pool.has_next())
try:
    pool.get_next_unordered(timeout=0.1)
except TimeoutError as e:
    show("get_next_unordered(timeout)", f"{type(e).__name__}: {e}")
show("get_next after waiting", pool.get_next())
pool.submit(lambda a, v: a.slow.remote(v), 3)
try:
    pool.get_next(timeout=0.1, ignore_if_timedout=True)
except TimeoutError as e:
    show("get_next(timeout, ignore_if_timedout)", f"{type(e).__name__}: {no_ids(e)}")
show("has_next after an ignored call", pool.has_next())
show("has_free after an ignored call", pool.has_free())
pool.submit(lambda a, v: a.double.remote(v), 8)
show("the next call (queued on the actor behind the ignored one)", pool.get_next())

# --- errors -------------------------------------------------------------------------------------
pool = ActorPool([Worker.remote(0)])
pool.submit(lambda a, v: a.fail.remote(v), 1)
pool.submit(lambda a, v: a.double.remote(v), 2)
try:
    pool.get_next()
except ray.exceptions.RayTaskError as e:
    show("a failing call", f"{type(e).__name__} {isinstance(e, ValueError)} {str(e).splitlines()[-1]}")
show("the actor serves the next call", pool.get_next())
pool.submit(lambda a, v: a.fail.remote(v), 3)
time.sleep(1)
try:
    pool.map(lambda a, v: a.double.remote(v), [4])
except ray.exceptions.RayTaskError as e:
    show("map() after a submit that failed raises its error", type(e).__name__)
show("has_next after that", pool.has_next())
pool.submit(lambda a, v: a.slow.remote(v), 1)
pool.submit(lambda a, v: a.fail.remote(v), 5)  # queued: submitted by map's drain, then ignored
show("map() while a submit runs and one waits", list(pool.map(lambda a, v: a.double.remote(v), [6])))

# --- an actor that dies leaves the pool ----------------------------------------------------------
doomed, survivor = Worker.remote(0), Worker.remote(1)
pool = ActorPool([doomed, survivor])
pool.submit(lambda a, v: a.double.remote(v), 1)  # the second actor (pop() takes the last)
pool.submit(lambda a, v: a.slow.remote(v), 5)    # the first (yr-local cannot interrupt it: it ends by itself)
show("first result", pool.get_next())
ray.kill(doomed)
try:
    pool.get_next()
except ray.exceptions.ActorDiedError as e:
    show("a dead actor's call", type(e).__name__)
show("idle actors left", [pool.pop_idle() is survivor, pool.pop_idle()])

# --- methods returning several refs ----------------------------------------------------------------
pool = ActorPool([Worker.remote(0)])
pool.submit(lambda a, v: a.pair.options(num_returns=2).remote(v), 4)
show("a list of refs", pool.get_next())
show("map over lists of refs", list(pool.map(lambda a, v: a.pair.options(num_returns=2).remote(v), [1, 2])))

# --- has_free, pop_idle, push --------------------------------------------------------------------
a, b = Worker.remote(0), Worker.remote(1)
pool = ActorPool([a])
show("has_free", pool.has_free())
pool.submit(lambda actor, v: actor.slow.remote(v), 1)
show("has_free while busy", pool.has_free())
show("pop_idle while busy", pool.pop_idle())
pool.submit(lambda actor, v: actor.double.remote(v), 5)
pool.push(b)  # takes the queued value at once
show("has_free after push", pool.has_free())
show("results", sorted([pool.get_next_unordered(), pool.get_next_unordered()]))
for actor in (a, b):
    try:
        pool.push(actor)
    except ValueError as e:
        show("push of a member", f"{type(e).__name__}: {e}")
show("pop_idle", pool.pop_idle() in (a, b))
show("pop_idle", pool.pop_idle() in (a, b))
show("pop_idle when none is left", pool.pop_idle())
show("has_free with no actors", pool.has_free())
pool.push(a)
show("pushed back", pool.has_free())
show("empty pool", ActorPool([]).has_free())

ray.shutdown()
