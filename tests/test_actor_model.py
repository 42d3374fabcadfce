"""Ray's actor model beyond calls: the actor class as a subclass of the user's class, builtin
methods, concurrency groups, async __init__, per-method options, pending-call limits, exits and
restarts, cancellation seen from inside; on real workers of both backends."""
import asyncio
import concurrent.futures
import os
import threading
import time

import pytest

from conftest import run_code, when_restarted


def _tag(label):
    def mark(fn):
        fn._framework_tag = label  # what a framework's decorator leaves on a method
        return fn

    return mark


class WorkerBase:
    """Base of the worker classes a framework builds at run time."""

    KIND = "base"

    def common(self):
        return "common"


def test_the_actor_class_is_a_subclass_of_the_users_class(ray):
    class Worker(WorkerBase):
        KIND = "worker"

        @_tag("generate")
        def generate(self, x):
            return x * 2

        @staticmethod
        def static():
            return "static"

    Actor = ray.remote(Worker)
    assert isinstance(Actor, Worker) and isinstance(Actor, WorkerBase)
    assert isinstance(Actor, ray.actor.ActorClass) and type(Actor).__name__ == "ActorClass(Worker)"
    assert Actor.KIND == "worker" and Actor.static() == "static"
    names = dir(Actor)
    assert {"generate", "common", "static", "KIND", "remote", "options"} <= set(names)
    # A framework walks dir() for its decorated methods, as verl does with ray.remote(Cls).
    tagged = [n for n in names if getattr(getattr(Actor, n, None), "_framework_tag", None)]
    assert tagged == ["generate"]
    assert Actor.__ray_actor_class__ is Worker
    modified = Actor.__ray_metadata__.modified_class
    assert issubclass(modified, Worker) and modified is not Worker
    assert Actor.__ray_metadata__.class_name == Worker.__qualname__  # Ray 2.60: the qualname
    with pytest.raises(TypeError, match="Actors cannot be instantiated directly"):
        Actor()
    h = Actor.options(name=None).remote()
    assert isinstance(h, ray.actor.ActorHandle)
    assert ray.get(h.generate.remote(21)) == 42 and ray.get(h.common.remote()) == "common"


def test_builtin_methods_and_ids(ray):
    @ray.remote
    class Counter:
        def __init__(self):
            self.n = 5

        def inc(self):
            self.n += 1
            return self.n

    c = Counter.remote()
    assert ray.get(c.__ray_ready__.remote()) is True
    assert ray.get(c.__ray_call__.remote(lambda self, k: (type(self).__name__, self.n + k), 10)) == ("Counter", 15)
    assert len(c._actor_id.hex()) == 32 and c._actor_id.hex() in repr(c)
    assert sorted(dir(c)) == ["__init__", "__ray_call__", "__ray_ready__", "__ray_terminate__", "inc"]

    @ray.remote
    def via_task(handle):
        return ray.get(handle.__ray_call__.remote(lambda self: self.n))

    assert ray.get(via_task.remote(c)) == 5


def test_an_object_ref_returned_by_a_method_stays_a_ref(ray):
    @ray.remote
    class Maker:
        def make(self):
            return ray.put("inner")

        async def amake(self):
            return ray.put("async inner")

    m = Maker.remote()
    ref = ray.get(m.make.remote())
    assert isinstance(ref, ray.ObjectRef) and ray.get(ref) == "inner"
    ref = ray.get(m.amake.remote())
    assert isinstance(ref, ray.ObjectRef) and ray.get(ref) == "async inner"


def test_concurrency_groups_on_a_threaded_actor(ray):
    @ray.remote(concurrency_groups={"io": 2, "compute": 1})
    class Mixed:
        def __init__(self):
            self.lock = threading.Lock()
            self.active, self.peak = {}, {}

        def _work(self, group):
            with self.lock:
                self.active[group] = self.active.get(group, 0) + 1
                self.peak[group] = max(self.peak.get(group, 0), self.active[group])
            time.sleep(0.15)
            with self.lock:
                self.active[group] -= 1

        @ray.method(concurrency_group="io")
        def io(self):
            self._work("io")

        @ray.method(concurrency_group="compute")
        def compute(self):
            self._work("compute")

        def default(self):
            self._work("default")

        def peaks(self):
            return dict(self.peak)

        def hold(self):
            self.released = threading.Event()
            return self.released.wait(30)

        def ping(self):
            return "pong"

        @ray.method(concurrency_group="compute")
        def release(self):
            while not hasattr(self, "released"):
                time.sleep(0.01)
            self.released.set()

    m = Mixed.remote()
    ray.get([m.io.remote() for _ in range(5)] + [m.compute.remote() for _ in range(3)]
            + [m.default.remote() for _ in range(3)])
    peaks = ray.get(m.peaks.remote())
    assert peaks == {"io": 2, "compute": 1, "default": 1}  # limits exact, groups side by side
    # .options(concurrency_group=...) moves a call to another group: it runs while the
    # default group's only thread is busy.
    held = m.hold.remote()
    assert ray.get(m.ping.options(concurrency_group="io").remote(), timeout=30) == "pong"
    m.release.remote()
    assert ray.get(held, timeout=30) is True
    with pytest.raises(ValueError, match="concurrency group 'nope' is not defined"):
        m.io.options(concurrency_group="nope").remote()
    with pytest.raises(ValueError, match="not supported in '.options\\(\\)'"):
        Mixed.options(concurrency_groups={"x": 1})


def test_concurrency_groups_on_an_async_actor(ray):
    @ray.remote(concurrency_groups={"io": 2})
    class Async:
        def __init__(self):
            self.active = self.peak_io = self.peak_default = 0

        @ray.method(concurrency_group="io")
        async def io(self):
            self.active += 1
            self.peak_io = max(self.peak_io, self.active)
            await asyncio.sleep(0.1)
            self.active -= 1

        async def default(self):
            self.active += 1
            self.peak_default = max(self.peak_default, self.active)
            await asyncio.sleep(0.1)
            self.active -= 1

        async def peaks(self):
            return self.peak_io, self.peak_default

    a = Async.remote()
    ray.get([a.io.remote() for _ in range(6)])
    ray.get([a.default.remote() for _ in range(8)])
    assert ray.get(a.peaks.remote()) == (2, 8)  # the default group: up to 1000 at once


def test_undeclared_groups_and_bad_sizes_are_refused(ray):
    with pytest.raises(AssertionError, match="concurrency group 'io'"):
        @ray.remote
        class Undeclared:
            @ray.method(concurrency_group="io")
            def f(self):
                pass

    for bad, exc in (({"io": 0}, ValueError), ({"io": "2"}, TypeError), (["io"], TypeError)):
        with pytest.raises(exc):
            ray.remote(concurrency_groups=bad)(type("C", (), {"f": lambda self: 1}))


def test_async_init_is_awaited_before_the_first_call(ray):
    @ray.remote
    class Loaded:
        async def __init__(self, value):
            await asyncio.sleep(0.05)
            self.value = value

        async def get(self):
            return self.value

        def sync_get(self):
            return self.value

    a = Loaded.remote(7)
    assert ray.get([a.get.remote(), a.sync_get.remote()]) == [7, 7]

    @ray.remote
    class Broken:
        async def __init__(self):
            raise ValueError("init failed")

        def f(self):
            return 1

    with pytest.raises(ray.exceptions.ActorDiedError, match="init failed"):
        ray.get(Broken.remote().f.remote(), timeout=30)


def test_method_options_retry_exceptions_and_num_returns(ray):
    @ray.remote
    class Flaky:
        def __init__(self):
            self.calls = 0

        @ray.method(max_task_retries=2, retry_exceptions=[ConnectionError])
        def flaky(self):
            self.calls += 1
            if self.calls < 3:
                raise ConnectionError("not yet")
            return self.calls

        @ray.method(max_task_retries=1, retry_exceptions=True)
        def always(self):
            raise KeyError("always")

        @ray.method(num_returns=2)
        def two(self):
            return "a", "b"

    f = Flaky.remote()
    assert ray.get(f.flaky.remote(), timeout=30) == 3
    with pytest.raises(KeyError):
        ray.get(f.always.remote(), timeout=30)
    assert ray.get(f.two.remote()) == ["a", "b"]
    options = Flaky.flaky.__ray_method_options__
    assert options == {"max_task_retries": 2, "retry_exceptions": [ConnectionError]}
    assert Flaky.flaky.__ray_max_task_retries__ == 2


def test_max_pending_calls(ray):
    @ray.remote(max_pending_calls=2)
    class Busy:
        def work(self):
            time.sleep(0.5)
            return "done"

    b = Busy.remote()
    ray.get(b.__ray_ready__.remote())
    first, second = b.work.remote(), b.work.remote()
    with pytest.raises(ray.exceptions.PendingCallsLimitExceeded,
                       match="The task work could not be submitted to Actor\\(Busy, .*more than 2 tasks"):
        b.work.remote()
    assert ray.get([first, second], timeout=30) == ["done", "done"]
    assert ray.get(b.work.remote(), timeout=30) == "done"  # room again once they finished


@pytest.mark.embedded_only("yr local mode runs every caller in the driver's process: one limit for all")
def test_max_pending_calls_is_per_caller(ray):
    @ray.remote(max_pending_calls=1, max_concurrency=2)
    class Busy:
        def work(self):
            time.sleep(0.5)
            return "done"

    @ray.remote
    def call(handle):
        return ray.get(handle.work.remote())

    b = Busy.remote()
    mine = b.work.remote()
    assert ray.get(call.remote(b), timeout=30) == "done"  # another process has its own limit
    assert ray.get(mine, timeout=30) == "done"


def test_sys_exit_is_a_crash_unless_its_code_is_zero(ray):
    @ray.remote(max_restarts=1)
    class Env:
        def __init__(self):
            self.steps = 0

        def step(self):
            self.steps += 1
            return self.steps

        def fail(self, code):
            import sys

            sys.exit(code)

    env = Env.remote()
    assert ray.get(env.step.remote()) == 1
    with pytest.raises(ray.exceptions.ActorUnavailableError):
        ray.get(env.fail.remote(1), timeout=30)
    assert when_restarted(ray, env.step.remote) == 1  # restarted: fresh state, as in Ray
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(env.fail.remote(0), timeout=30)  # sys.exit(0): intended, never restarted
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(env.step.remote(), timeout=30)


class _Restarting:
    def __init__(self, path, restart_s):
        import os

        if os.path.exists(path):
            time.sleep(restart_s)  # the restart takes a while, as loading a model does
        open(path, "w").close()
        self.pings = 0

    def ping(self):
        self.pings += 1
        return "pong"

    def count(self):
        return self.pings

    def die(self):
        import os

        os._exit(1)


@pytest.mark.embedded_only("yr local mode restarts an actor in the call that crashed it: there is no RESTARTING window")
def test_calls_made_while_the_actor_restarts_raise_actor_unavailable(ray, tmp_path):
    # As in Ray 2.60: a call made during a long restart fails with ActorUnavailableError once
    # the caller gives up on the actor (about 2 s there)...
    s = ray.remote(max_restarts=1)(_Restarting).remote(str(tmp_path / "slow"), 6)
    assert ray.get(s.ping.remote()) == "pong"
    with pytest.raises(ray.exceptions.ActorUnavailableError):
        ray.get(s.die.remote(), timeout=30)
    start = time.monotonic()
    with pytest.raises(ray.exceptions.ActorUnavailableError, match="The actor is restarting"):
        ray.get(s.ping.remote(), timeout=30)
    assert time.monotonic() - start >= 1.0  # it waited for the restart first
    assert when_restarted(ray, s.ping.remote) == "pong"
    assert ray.get(s.count.remote()) == 1  # the calls that failed never ran on the new actor

    # ...while after a quick one, the next call is served (Ray's caller learns of the crash
    # only after the restart is over).
    q = ray.remote(max_restarts=1)(_Restarting).remote(str(tmp_path / "quick"), 0.2)
    assert ray.get(q.ping.remote()) == "pong"
    with pytest.raises(ray.exceptions.ActorUnavailableError):
        ray.get(q.die.remote(), timeout=30)
    assert ray.get(q.ping.remote(), timeout=30) == "pong"

    p = ray.remote(max_restarts=1, max_task_retries=-1)(_Restarting).remote(str(tmp_path / "patient"), 1.5)
    assert ray.get(p.ping.remote()) == "pong"
    p.die.options(max_task_retries=0).remote()  # not retried: it would crash it again
    assert ray.get(p.ping.remote(), timeout=30) == "pong"  # with retries a call waits for it


@pytest.mark.embedded_only("yr local mode restarts an actor in the call that crashed it: there is no RESTARTING window")
def test_an_actor_out_of_scope_ends_when_the_call_held_for_its_restart_fails(ray):
    # The last handle is dropped while a call waits for the restart; once that call gives up
    # (ActorUnavailableError), nothing keeps the actor: it ends and its CPU comes back.
    import tempfile

    s = ray.remote(max_restarts=1, num_cpus=2)(_Restarting).remote(tempfile.mktemp(), 6)
    assert ray.get(s.ping.remote()) == "pong"
    with pytest.raises(ray.exceptions.ActorUnavailableError):
        ray.get(s.die.remote(), timeout=30)
    held = s.ping.remote()
    del s
    with pytest.raises(ray.exceptions.ActorUnavailableError):
        ray.get(held, timeout=30)

    @ray.remote(num_cpus=2)
    def whole_node():
        return "ran"

    assert ray.get(whole_node.remote(), timeout=10) == "ran"


@pytest.mark.embedded_only("yr local mode runs actors in the driver's process: a constructor's os._exit ends the driver")
def test_calls_made_before_the_first_constructor_crashed_wait_for_the_restart(ray, tmp_path):
    marker = tmp_path / "inits"

    class Flaky:
        def __init__(self, path, crashes):
            import os

            with open(path, "a") as f:
                f.write("x")
            if len(open(path).read()) <= crashes:
                os._exit(1)

        def inits(self, path):
            return len(open(path).read())

    # Sent before any constructor finished, the call never started: as in Ray it waits
    # through the restarts (with max_task_retries=0) instead of failing as in flight.
    a = ray.remote(max_restarts=3)(Flaky).remote(str(marker), 2)
    assert ray.get(a.inits.remote(str(marker)), timeout=60) == 3
    # Restarts run out before a constructor succeeds: the call fails with the death.
    b = ray.remote(max_restarts=1)(Flaky).remote(str(tmp_path / "b"), 5)
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(b.inits.remote(str(tmp_path / "b")), timeout=60)


def test_a_cancelled_call_sees_is_canceled(ray):
    @ray.remote(max_concurrency=2)
    class Loop:
        def __init__(self):
            self.event = threading.Event()
            self.seen = None

        def run(self):
            for _ in range(400):
                if ray.get_runtime_context().is_canceled():
                    self.seen = "cancelled"
                    self.event.set()
                    return "stopped"
                time.sleep(0.02)
            self.seen = "never"
            self.event.set()
            return "finished"

        def seen_(self):
            self.event.wait(30)
            return self.seen

    loop = Loop.remote()
    ref = loop.run.remote()
    ray.get(loop.__ray_ready__.remote())
    time.sleep(0.2)
    ray.cancel(ref)
    with pytest.raises(ray.exceptions.TaskCancelledError) as info:
        ray.get(ref, timeout=30)
    assert not isinstance(info.value, ray.exceptions.RayTaskError)  # an actor call: plain, as Ray
    assert ray.get(loop.seen_.remote(), timeout=30) == "cancelled"

    @ray.remote
    class AsyncActor:
        async def check(self):
            return ray.get_runtime_context().is_canceled()

    with pytest.raises(RuntimeError, match="not supported in an async actor"):
        ray.get(AsyncActor.remote().check.remote())
    with pytest.raises(RuntimeError, match="only available when the process is a worker"):
        ray.get_runtime_context().is_canceled()

    @ray.remote
    def task_check():
        return ray.get_runtime_context().is_canceled()

    assert ray.get(task_check.remote()) is False


def test_a_cancelled_running_task_raises_ray_task_error(ray):
    @ray.remote
    class Gate:
        def __init__(self):
            self.event = asyncio.Event()

        async def open(self):
            self.event.set()

        async def wait(self):
            await self.event.wait()

    started = Gate.remote()

    @ray.remote
    def long(gate):
        gate.open.remote()
        for _ in range(200):
            time.sleep(0.02)
        return "done"

    ref = long.remote(started)
    ray.get(started.wait.remote(), timeout=30)
    ray.cancel(ref)
    with pytest.raises(ray.exceptions.TaskCancelledError) as info:
        ray.get(ref, timeout=30)
    assert isinstance(info.value, ray.exceptions.RayTaskError)  # RayTaskError(TaskCancelledError)


def test_a_freed_object_rebuilt_from_its_id_is_never_ready_as_in_ray(ray):
    """Ray 2.60: a ref rebuilt from the id of a freed object (or of a made-up id) is never
    ready: ray.wait leaves it in not_ready, ray.get with a timeout raises GetTimeoutError,
    future() never settles (tests/programs/unknown_refs.py has the whole comparison)."""
    x = ray.put(1)
    y = ray.ObjectRef(x.binary())  # a ref that does not keep the object alive
    del x
    import gc

    gc.collect()
    from ray_adapter import core

    core.current().flush_releases()
    ready, pending = ray.wait([y], timeout=0.2)
    assert ready == [] and pending == [y]
    ready, pending = ray.wait([y], timeout=0, fetch_local=False)
    assert ready == [] and pending == [y]
    with pytest.raises(ray.exceptions.GetTimeoutError):
        ray.get(y, timeout=0.2)
    made_up = ray.ObjectRef(bytes(range(28)))
    live = ray.put(2)
    assert ray.wait([made_up, live], num_returns=1) == ([live], [made_up])
    assert ray.wait([made_up, live], num_returns=2, timeout=0.2) == ([live], [made_up])
    with pytest.raises(concurrent.futures.TimeoutError):  # not the builtin before Python 3.11
        y.future().result(timeout=0.2)


def test_a_get_waiting_for_an_unknown_object_ends_at_shutdown(ray):
    """Without a timeout such a get waits as Ray's does, for ever; ray.shutdown() ends it."""
    import threading

    y = ray.ObjectRef(bytes(range(28)))
    outcome = []

    def get():
        try:
            ray.get(y)
        except BaseException as exc:  # noqa: BLE001 - what ended it is the result
            outcome.append(exc)

    thread = threading.Thread(target=get, daemon=True)
    thread.start()
    thread.join(0.3)
    assert thread.is_alive()
    ray.shutdown()
    thread.join(30)
    assert not thread.is_alive() and outcome


@pytest.mark.embedded_only("the window is the embedded driver's: yr keeps calls in its own queues")
def test_a_burst_of_calls_to_a_busy_actor_waits_in_the_driver_not_in_its_socket(ray, tmp_path):
    """What is sent ahead to one actor's worker is bounded (a window); the rest of a burst waits
    in the driver's own queue, ``.remote()`` never blocking, and every call still runs, in
    order, once the actor is free."""
    from ray_adapter import core
    from ray_adapter.core.embedded.actor_records import CALL_WINDOW

    gate = tmp_path / "open"

    @ray.remote(num_cpus=0)
    class Busy:
        def work(self, i, gate):
            while not os.path.exists(gate):
                time.sleep(0.005)
            return i

    actor = Busy.remote()
    ray.get(actor.__ray_ready__.remote(), timeout=60)
    n = 3 * CALL_WINDOW
    start = time.monotonic()
    refs = [actor.work.remote(i, str(gate)) for i in range(n)]
    assert time.monotonic() - start < 30  # never waited for the worker
    record = core.current().actors._actors[actor._actor_id.binary()]
    assert len(record.inflight) == record.window == CALL_WINDOW
    assert len(record.pending) == n - CALL_WINDOW  # the rest are the driver's
    assert len(record.worker.channel._out) < 64  # nothing piles up unsent either
    gate.write_text("")
    assert ray.get(refs, timeout=120) == list(range(n))
    assert len(record.inflight) == 0 and len(record.pending) == 0


@pytest.mark.embedded_only("the window is the embedded driver's: yr keeps calls in its own queues")
def test_a_call_of_another_concurrency_group_is_not_held_behind_a_full_window(ray):
    """Ray runs each concurrency group on its own executor: a call of one group goes ahead of
    another group's blocked calls, however many there are."""
    from ray_adapter.core.embedded.actor_records import CALL_WINDOW

    @ray.remote(num_cpus=0, concurrency_groups={"control": 1})
    class Gated:
        def __init__(self):
            self.gate = threading.Event()

        @ray.method(concurrency_group="control")
        def open(self):
            self.gate.set()

        def work(self, i):
            self.gate.wait(60)
            return i

    actor = Gated.remote()
    refs = [actor.work.remote(i) for i in range(3 * CALL_WINDOW)]
    ray.get(actor.open.remote(), timeout=30)
    assert ray.get(refs, timeout=120) == list(range(3 * CALL_WINDOW))


@pytest.mark.embedded_only("the window is the embedded driver's: yr keeps calls in its own queues")
def test_calls_held_by_the_window_fail_with_the_crash_as_in_ray(ray):
    """Ray sends every ready call to the actor at once: when the actor crashes, every call
    submitted before (max_task_retries=0) fails with ActorUnavailableError, even those the
    window still held in the driver; none runs on the restarted actor. (Calls submitted after
    the crash is known go to the restart, in Ray too: the crash waits until all are submitted.)"""
    from ray_adapter.core.embedded.actor_records import CALL_WINDOW
    from ray_adapter.ray._common.test_utils import SignalActor

    @ray.remote(max_restarts=1)
    class Crashes:
        def __init__(self, submitted):
            self.n = 0
            self.submitted = submitted

        def inc(self, i):
            self.n += 1
            if i == 10 and self.n == 11:
                ray.get(self.submitted.wait.remote())
                os._exit(1)
            return i

    submitted = SignalActor.remote()
    actor = Crashes.remote(submitted)
    refs = [actor.inc.remote(i) for i in range(3 * CALL_WINDOW)]
    ray.get(submitted.send.remote())
    outcomes = []
    for ref in refs:
        try:
            outcomes.append(ray.get(ref, timeout=60))
        except ray.exceptions.ActorUnavailableError:
            outcomes.append("unavailable")
    assert outcomes[:10] == list(range(10))
    assert outcomes[10:] == ["unavailable"] * (3 * CALL_WINDOW - 10)
    assert when_restarted(ray, lambda: actor.inc.remote(-1)) == -1  # the restart serves new calls


def test_exit_actor_outside_an_actor_raises_rays_type_error(ray):
    from ray_adapter.ray.actor import exit_actor

    @ray.remote
    def in_a_task():
        try:
            exit_actor()
        except TypeError as e:
            return str(e)

    words = ". Call this API inside an actor methodsif you'd like to exit the actor gracefully."
    with pytest.raises(TypeError) as raised:
        exit_actor()
    assert str(raised.value) == "exit_actor API is called on a non-actor worker, 0" + words
    assert ray.get(in_a_task.remote()) == "exit_actor API is called on a non-actor worker, 1" + words


_BLOCKING_GET_PROGRAM = """
import ray
ray.init(num_cpus=2)

@ray.remote
def one():
    return 1

@ray.remote
class Async:
    async def blocking(self):
        return ray.get(one.remote()) + ray.get(one.remote())

@ray.remote
class Sync:
    def blocking(self):
        return ray.get(one.remote())

a, s = Async.remote(), Sync.remote()
print(ray.get([a.blocking.remote(), a.blocking.remote(), s.blocking.remote()]))
ray.shutdown()
"""


def test_a_blocking_get_in_an_async_actor_warns_once_as_ray_does():
    """Ray logs it once per process, from the async actor's worker (its output reaches the
    driver's stderr); a sync actor's get, or the driver's, says nothing."""
    done = run_code(_BLOCKING_GET_PROGRAM, env={"RAY_ADAPTER_RUNTIME": "embedded"})
    assert done.returncode == 0 and done.stdout.strip() == "[2, 2, 1]", done.stderr
    warning = "Using blocking ray.get inside async actor. This blocks the event loop."
    assert done.stderr.count(warning) == 1, done.stderr


def test_killing_a_handle_of_an_earlier_session_raises_as_in_ray(ray_module):
    ray = ray_module
    ray.init(num_cpus=1)

    @ray.remote
    class A:
        def m(self):
            return 1

    old = A.remote()
    assert ray.get(old.m.remote(), timeout=30) == 1
    ray.shutdown()
    ray.init(num_cpus=1)
    with pytest.raises(ray.exceptions.ActorHandleNotFoundError,
                       match="ActorHandle objects are not valid across Ray sessions"):
        ray.kill(old)
    fresh = A.remote()
    ray.kill(fresh)  # a handle of this session: killed, no error
    ray.shutdown()
