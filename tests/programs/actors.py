"""Differential test: actor API.

Prints only from the driver; output must be deterministic.
"""
import asyncio
import threading
import time

import ray


def show(label, value):
    print(f"{label}: {value!r}")


ray.init(num_cpus=2)


@ray.remote
class Counter:
    def __init__(self, start=0):
        self.value = start

    def incr(self, n=1):
        self.value += n
        return self.value

    def get(self):
        return self.value

    def fail(self):
        raise KeyError("bad key")


# --- stateful, ordered calls ------------------------------------------------
c = Counter.remote()
refs = [c.incr.remote() for _ in range(10)]
show("ordered calls", ray.get(refs))
show("kwargs", ray.get(c.incr.remote(n=5)))
show("handle type", type(c).__name__)
show("method call returns ObjectRef", type(c.get.remote()).__name__)
c2 = Counter.remote(100)
show("constructor arg", ray.get(c2.get.remote()))
show("independent state", ray.get([c.get.remote(), c2.get.remote()]))


# --- handle passed to a task and to another actor ---------------------------
@ray.remote
def bump(counter, times):
    return ray.get([counter.incr.remote() for _ in range(times)])[-1]


show("handle passed to task", ray.get(bump.remote(c2, 3)))


@ray.remote
class Driver:
    def __init__(self, counter):
        self.counter = counter

    def run(self, times):
        for _ in range(times):
            ray.get(self.counter.incr.remote())
        return ray.get(self.counter.get.remote())

    def run_with(self, other, times):
        return ray.get([other.incr.remote() for _ in range(times)])


d = Driver.remote(c2)
show("handle passed to actor ctor", ray.get(d.run.remote(2)))
show("handle passed to actor method", ray.get(d.run_with.remote(c, 2)))
show("driver sees final state", ray.get([c.get.remote(), c2.get.remote()]))


# --- ray.remote(Cls) as a function, ray.remote(num_cpus=1)(Cls) -------------
class Plain:
    def __init__(self, x):
        self.x = x

    def double(self):
        return self.x * 2

    def scale(self, v):
        return self.x * 10 + v


RemotePlain = ray.remote(Plain)
show("ray.remote(Cls) type", type(RemotePlain).__name__)
show("ray.remote(Cls)", ray.get(RemotePlain.remote(4).double.remote()))
RemotePlain1 = ray.remote(num_cpus=1)(Plain)
show("ray.remote(num_cpus=1)(Cls)", ray.get(RemotePlain1.remote(5).double.remote()))
show("options(num_cpus=0)", ray.get(RemotePlain.options(num_cpus=0).remote(6).double.remote()))

# --- actor method raising ---------------------------------------------------
try:
    ray.get(c.fail.remote())
except Exception as e:
    show("method error type", type(e).__name__)
    show("method error isinstance KeyError", isinstance(e, KeyError))
    show("method error isinstance RayTaskError", isinstance(e, ray.exceptions.RayTaskError))
    show("method error mentions message", "bad key" in str(e))
show("actor alive after method error", ray.get(c.incr.remote()))


# --- ray.kill ---------------------------------------------------------------
victim = Counter.remote()
show("victim before kill", ray.get(victim.incr.remote()))
ray.kill(victim)
# ray.kill is asynchronous: a call racing with it may still succeed, so keep
# calling (up to 10 s) until the first failure and report that.
error = None
deadline = time.time() + 10
while error is None and time.time() < deadline:
    try:
        ray.get(victim.incr.remote())
        time.sleep(0.05)
    except Exception as e:
        error = e
if error is None:
    show("call after kill", "no error")
else:
    show("call after kill type", type(error).__name__)
    show("isinstance RayActorError", isinstance(error, ray.exceptions.RayActorError))
    show("isinstance ActorDiedError", isinstance(error, ray.exceptions.ActorDiedError))
    show("isinstance RayError", isinstance(error, ray.exceptions.RayError))
try:
    ray.get(victim.incr.remote())
    show("second call after kill", "no error")
except Exception as e:
    show("second call after kill type", type(e).__name__)


# --- threaded actor with max_concurrency ------------------------------------
@ray.remote(max_concurrency=4)
class Threaded:
    def __init__(self):
        self.lock = threading.Lock()
        self.active = 0
        self.peak = 0

    def work(self, t):
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
        time.sleep(t)
        with self.lock:
            self.active -= 1
        return t

    def peak_concurrency(self):
        return self.peak


t = Threaded.remote()
ray.get(t.work.remote(0))  # make sure the actor is up before timing matters
show("threaded results", ray.get([t.work.remote(0.5) for _ in range(4)]))
show("threaded ran concurrently", ray.get(t.peak_concurrency.remote()) > 1)


# --- async actor ------------------------------------------------------------
@ray.remote
class AsyncActor:
    def __init__(self):
        self.running = 0
        self.peak = 0

    async def work(self, i):
        self.running += 1
        self.peak = max(self.peak, self.running)
        await asyncio.sleep(0.3)
        self.running -= 1
        return i * i

    async def peak_concurrency(self):
        return self.peak

    def sync_method(self):
        return "sync in async actor"


a = AsyncActor.remote()
show("async results", ray.get([a.work.remote(i) for i in range(5)]))
show("async ran concurrently", ray.get(a.peak_concurrency.remote()) > 1)
show("sync method on async actor", ray.get(a.sync_method.remote()))

# --- named actors -----------------------------------------------------------
named = Counter.options(name="global_counter").remote(7)
ray.get(named.incr.remote())
found = ray.get_actor("global_counter")
show("get_actor type", type(found).__name__)
show("get_actor sees state", ray.get(found.incr.remote()))
try:
    Counter.options(name="global_counter").remote()
    show("duplicate name", "no error")
except Exception as e:
    show("duplicate name error", type(e).__name__)
same = Counter.options(name="global_counter", get_if_exists=True).remote(999)
show("get_if_exists returns existing", ray.get(same.get.remote()))
fresh = Counter.options(name="fresh_counter", get_if_exists=True).remote(50)
show("get_if_exists creates new", ray.get(fresh.get.remote()))
try:
    ray.get_actor("no_such_actor")
except Exception as e:
    show("get_actor missing", type(e).__name__)
ray.kill(named)
# ray.kill is asynchronous: poll until the name is released (up to 5 s).
outcome = "still registered"
deadline = time.time() + 5
while time.time() < deadline:
    try:
        ray.get_actor("global_counter")
    except Exception as e:
        outcome = type(e).__name__
        break
    time.sleep(0.1)
show("get_actor after kill", outcome)

# --- ActorPool --------------------------------------------------------------
from ray.util import ActorPool

pool = ActorPool([RemotePlain.remote(i) for i in range(1, 3)])
show("ActorPool.map", list(pool.map(lambda actor, v: actor.scale.remote(v), [0, 1, 2, 3])))
pool2 = ActorPool([RemotePlain.remote(i) for i in range(1, 3)])
# which actor handles which value is timing-dependent here; print only the values.
show("ActorPool.map_unordered sorted",
     sorted(r % 10 for r in pool2.map_unordered(lambda actor, v: actor.scale.remote(v), [0, 1, 2, 3])))


# --- ending an actor from inside: exit_actor() and __ray_terminate__ --------------------
@ray.remote
class Ending:
    def __init__(self):
        self.n = 0

    def slow(self):
        time.sleep(0.3)
        self.n += 1
        return self.n

    def quit(self):
        ray.actor.exit_actor()


def outcome(ref):
    try:
        return ray.get(ref, timeout=30)
    except Exception as e:
        return type(e).__name__


e = Ending.remote()
first, quit_ref = e.slow.remote(), e.quit.remote()
show("call queued before exit_actor", outcome(first))
show("the exit_actor call", outcome(quit_ref))
show("a call after exit_actor", outcome(e.slow.remote()))
show("__ray_terminate__ on the class", "__ray_terminate__" in dir(Ending))
t = Ending.remote()
first, term = t.slow.remote(), t.__ray_terminate__.remote()
show("call queued before __ray_terminate__", outcome(first))
show("__ray_terminate__ call", outcome(term))
show("a call after __ray_terminate__", outcome(t.slow.remote()))

ray.shutdown()
