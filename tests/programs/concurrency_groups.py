"""Concurrency groups (threaded and async actors), async __init__, the actor class as a
subclass of the user's class (the run-time class building of frameworks), __ray_call__,
__ray_ready__, max_pending_calls and cancellation seen from inside an actor. Prints only
deterministic facts."""
import asyncio
import threading
import time

import ray

ray.init(num_cpus=2)


def show(label, value):
    print(f"{label}: {value}")


# --- concurrency groups on a threaded actor -----------------------------------------------------
@ray.remote(concurrency_groups={"io": 2, "compute": 1})
class Bucket:
    def __init__(self):
        self.lock = threading.Lock()
        self.active, self.peak = {}, {}

    def _work(self, group):
        with self.lock:
            self.active[group] = self.active.get(group, 0) + 1
            self.peak[group] = max(self.peak.get(group, 0), self.active[group])
        time.sleep(0.1)
        with self.lock:
            self.active[group] -= 1

    @ray.method(concurrency_group="io")
    def fill(self):
        self._work("io")

    @ray.method(concurrency_group="compute")
    def crunch(self):
        self._work("compute")

    def other(self):
        self._work("default")

    def peaks(self):
        return dict(sorted(self.peak.items()))


bucket = Bucket.remote()
ray.get([bucket.fill.remote() for _ in range(6)] + [bucket.crunch.remote() for _ in range(3)]
        + [bucket.other.remote() for _ in range(3)])
show("threaded peaks per group", ray.get(bucket.peaks.remote()))


# --- concurrency groups on an async actor -------------------------------------------------------
@ray.remote(concurrency_groups={"io": 1, "compute": 3})
class AsyncBucket:
    def __init__(self):
        self.active, self.peak = {}, {}

    async def _work(self, group):
        self.active[group] = self.active.get(group, 0) + 1
        self.peak[group] = max(self.peak.get(group, 0), self.active[group])
        await asyncio.sleep(0.05)
        self.active[group] -= 1

    @ray.method(concurrency_group="io")
    async def fill(self):
        await self._work("io")

    @ray.method(concurrency_group="compute")
    async def crunch(self):
        await self._work("compute")

    async def other(self):
        await self._work("default")

    async def peaks(self):
        return dict(sorted(self.peak.items()))


abucket = AsyncBucket.remote()
ray.get([abucket.fill.remote() for _ in range(4)] + [abucket.crunch.remote() for _ in range(6)]
        + [abucket.other.remote() for _ in range(5)])
show("async peaks per group", ray.get(abucket.peaks.remote()))
show("options(concurrency_group) runs", ray.get(abucket.other.options(concurrency_group="io").remote()))


# --- async __init__ ---------------------------------------------------------------------------
@ray.remote
class Server:
    async def __init__(self, model):
        await asyncio.sleep(0.05)
        self.model = model

    async def generate(self, prompt):
        return f"{self.model}: {prompt}"


show("async __init__ then call", ray.get(Server.remote("tiny").generate.remote("hi")))


# --- the actor class as a subclass: frameworks bind methods found by dir() ----------------------
def register(fn):
    fn.dispatch_mode = "all"
    return fn


class WorkerBase:
    role = "worker"

    @register
    def init_model(self):
        return "model ready"

    @register
    def generate(self, x):
        return x + 1

    def helper(self):
        return "not registered"


RemoteWorker = ray.remote(WorkerBase)
registered = sorted(n for n in dir(RemoteWorker)
                    if getattr(getattr(RemoteWorker, n, None), "dispatch_mode", None) == "all")
show("methods a framework finds", registered)
show("isinstance of the user's class", isinstance(RemoteWorker, WorkerBase))
show("class attribute", RemoteWorker.role)
show("__ray_actor_class__ is the class", RemoteWorker.__ray_actor_class__ is WorkerBase)
show("modified_class subclasses it", issubclass(RemoteWorker.__ray_metadata__.modified_class, WorkerBase))
worker = RemoteWorker.remote()
show("bound calls", ray.get([getattr(worker, n).remote(*([1] if n == "generate" else [])) for n in registered]))
show("__ray_ready__", ray.get(worker.__ray_ready__.remote()))
show("__ray_call__", ray.get(worker.__ray_call__.remote(lambda self, k: f"{self.role} {k}", 7)))
show("actor id hex length", len(worker._actor_id.hex()))


# --- max_pending_calls --------------------------------------------------------------------------
@ray.remote(max_pending_calls=2)
class Busy:
    def work(self):
        time.sleep(0.3)
        return "done"


busy = Busy.remote()
ray.get(busy.__ray_ready__.remote())
time.sleep(0.5)  # Ray counts a call as pending until its reply is processed, a moment after get
queued = [busy.work.remote(), busy.work.remote()]
try:
    busy.work.remote()
except ray.exceptions.PendingCallsLimitExceeded as e:
    show("third call", type(e).__name__)
    show("message ends", str(e).split("because ")[1])
show("queued calls", ray.get(queued))


# --- cancelling a running call of a threaded actor ----------------------------------------------
@ray.remote(max_concurrency=2)
class Loop:
    def __init__(self):
        self.stopped = threading.Event()

    def run(self):
        for _ in range(500):
            if ray.get_runtime_context().is_canceled():
                self.stopped.set()
                return "stopped early"
            time.sleep(0.01)
        return "ran to the end"

    def saw_cancel(self):
        return self.stopped.wait(30)


loop = Loop.remote()
ref = loop.run.remote()
ray.get(loop.__ray_ready__.remote())
time.sleep(0.2)
ray.cancel(ref)
try:
    ray.get(ref)
except ray.exceptions.TaskCancelledError as e:
    show("cancelled call raises", type(e).__name__)
show("the method saw is_canceled()", ray.get(loop.saw_cancel.remote()))


# --- each concurrency group of an async actor has its own event loop and thread ----------------
@ray.remote(concurrency_groups={"io": 2, "compute": 1})
class Loops:
    def __init__(self):
        try:
            asyncio.get_running_loop()
            self.init_saw = "a running loop"
        except RuntimeError:
            self.init_saw = "no running loop"

    def init_info(self):
        return self.init_saw

    @ray.method(concurrency_group="io")
    async def block_io(self, seconds):
        time.sleep(seconds)  # blocks the io group's loop
        return "io unblocked"

    async def block_default(self, seconds):
        time.sleep(seconds)  # blocks the default group's loop
        return "default unblocked"

    @ray.method(concurrency_group="compute")
    async def where_compute(self):
        return threading.current_thread().name, id(asyncio.get_running_loop())

    @ray.method(concurrency_group="io")
    async def where_io(self):
        return threading.current_thread().name, id(asyncio.get_running_loop())

    async def where_default(self):
        return threading.current_thread().name, id(asyncio.get_running_loop())

    def where_sync(self):
        return threading.current_thread().name


loops = Loops.remote()
places = ray.get([loops.where_compute.remote(), loops.where_io.remote(), loops.where_default.remote(),
                  loops.where_default.options(concurrency_group="compute").remote()])
show("async group threads", [name for name, _ in places])
show("distinct loops", len({loop for _, loop in places}))
show("sync __init__ of an async actor sees", ray.get(loops.init_info.remote()))
show("sync method of an async actor runs on", ray.get(loops.where_sync.remote()))
blocked = loops.block_io.remote(4)
ready, _ = ray.wait([loops.where_compute.remote(), loops.where_default.remote()], num_returns=2, timeout=3)
show("compute and default answer while io is blocked", len(ready) == 2)
show("the blocked call", ray.get(blocked))
blocked = loops.block_default.remote(4)
ready, _ = ray.wait([loops.where_io.remote(), loops.where_compute.remote()], num_returns=2, timeout=3)
show("io and compute answer while default is blocked", len(ready) == 2)
show("the blocked call", ray.get(blocked))

ray.shutdown()
