"""Actor semantics against a real embedded runtime: one process per actor."""
import os
import textwrap
import threading
import time

import pytest

from conftest import process_alive, run_python, when_restarted


def test_stateful_actor_runs_calls_in_submission_order(ray):
    @ray.remote
    class Log:
        def __init__(self):
            self.items = []

        def add(self, x):
            time.sleep(0.001 * (x % 3))
            self.items.append(x)
            return len(self.items)

        def get(self):
            return self.items

    log = Log.remote()
    refs = [log.add.remote(i) for i in range(50)]
    assert ray.get(refs) == list(range(1, 51))
    assert ray.get(log.get.remote()) == list(range(50))


def test_calls_wait_for_ref_arguments_in_order(ray):
    @ray.remote
    def later(x):
        time.sleep(0.3)
        return x

    @ray.remote
    class Log:
        def __init__(self):
            self.items = []

        def add(self, x):
            self.items.append(x)
            return list(self.items)

    log = Log.remote()
    log.add.remote(later.remote("first"))
    assert ray.get(log.add.remote("second")) == ["first", "second"]


def test_actor_forms_and_repr(ray):
    class Plain:
        def __init__(self, start=0):
            self.v = start

        def value(self):
            return self.v

    A = ray.remote(Plain)
    B = ray.remote(num_cpus=1)(Plain)
    assert type(A).__name__ == "ActorClass(Plain)"
    a, b = A.remote(3), B.options(name="b-actor").remote(4)
    assert ray.get([a.value.remote(), b.value.remote()]) == [3, 4]
    assert repr(a) == f"Actor(Plain, {a._actor_id.hex()})" and len(a._actor_id.hex()) == 32
    with pytest.raises(TypeError, match="Actors cannot be instantiated directly"):
        A()
    with pytest.raises(TypeError, match="Actor methods cannot be called directly"):
        a.value()
    with pytest.raises(AttributeError, match="'ActorHandle' object has no attribute 'nope'"):
        a.nope
    # As in Ray: the metadata's class is Ray's modified subclass of the user's class.
    modified = A.__ray_metadata__.modified_class
    assert A.__ray_actor_class__ is Plain and modified is not Plain and issubclass(modified, Plain)
    assert modified.__ray_actor_class__ is Plain and isinstance(A, Plain)


def test_handles_pass_to_tasks_and_actors(ray):
    @ray.remote
    class Counter:
        def __init__(self):
            self.n = 0

        def inc(self):
            self.n += 1
            return self.n

    @ray.remote
    def bump(counter, times):
        return ray.get([counter.inc.remote() for _ in range(times)])[-1]

    @ray.remote
    class Driver:
        def __init__(self, counter):
            self.counter = counter

        def bump(self):
            return ray.get(self.counter.inc.remote())

    c = Counter.remote()
    ray.get([bump.remote(c, 5), bump.remote(c, 5)])
    d = Driver.remote(c)
    assert ray.get(d.bump.remote()) == 11


def test_method_num_returns(ray):
    @ray.remote
    class Pair:
        @ray.method(num_returns=2)
        def split(self):
            return "a", "b"

        def both(self):
            return "a", "b"

    p = Pair.remote()
    x, y = p.split.remote()
    assert ray.get([x, y]) == ["a", "b"]
    a, b = p.both.options(num_returns=2).remote()
    assert ray.get(b) == "b"


def test_method_exception_is_dual(ray):
    @ray.remote
    class Bad:
        def fail(self):
            raise KeyError("missing")

        def ok(self):
            return "still alive"

    bad = Bad.remote()
    with pytest.raises(KeyError) as info:
        ray.get(bad.fail.remote())
    assert isinstance(info.value, ray.exceptions.RayTaskError)
    assert type(info.value).__name__ == "RayTaskError(KeyError)"
    # Its traceback starts in the user's method: the runtime's frames that called it are left
    # out, as in Ray (yr-local once showed its actor shell's frame first).
    frames = [line for line in str(info.value).splitlines() if line.strip().startswith("File ")]
    assert frames and __file__ in frames[0] and not any("ray_adapter" in f for f in frames), str(info.value)
    # Tracebacks and logs name it as Ray does; it still pickles (through its __reduce__).
    assert f"{type(info.value).__module__}.{type(info.value).__qualname__}" == \
        "ray.exceptions.RayTaskError(KeyError)"
    import pickle

    again = pickle.loads(pickle.dumps(info.value))
    assert type(again) is type(info.value) and isinstance(again, KeyError)
    assert ray.get(bad.ok.remote()) == "still alive"


def test_constructor_failure_fails_every_call(ray):
    @ray.remote
    class Broken:
        def __init__(self):
            raise RuntimeError("cannot start")

        def ping(self):
            return 1

    b = Broken.remote()
    for _ in range(2):
        with pytest.raises(ray.exceptions.ActorDiedError) as info:
            ray.get(b.ping.remote(), timeout=30)
        assert isinstance(info.value, ray.exceptions.RayActorError)
        assert "cannot start" in str(info.value) and info.value.actor_init_failed
        assert str(info.value).startswith(
            "The actor died because of an error raised in its creation task, ")
        assert not hasattr(info.value, "cause")  # Ray's ActorDiedError has none (only its text)
        assert info.value.actor_id == b._actor_id.hex()


@pytest.mark.parametrize("runtime", ["embedded", "yr-local"])
def test_a_failed_constructor_is_logged_as_rays_worker_logs_it(runtime):
    # Ray's worker writes "Exception raised in creation task: <the ActorDiedError's text>" to
    # its log, which reaches the driver's stderr (prefixed "(Broken pid=N)") even if no call of
    # the actor is ever made; not with log_to_driver=False.
    if runtime == "yr-local":
        pytest.importorskip("yr")
    code = textwrap.dedent("""
        import sys, time
        import ray
        ray.init(num_cpus=1, log_to_driver=sys.argv[1] == "on")

        @ray.remote
        class Broken:
            def __init__(self):
                raise RuntimeError("cannot start")

        b = Broken.remote()
        time.sleep(3)  # no call made: the failure is only logged
        ray.shutdown()
    """)
    env = {"RAY_ADAPTER_RUNTIME": runtime}
    result = run_python(["-c", code, "on"], env=env)
    assert result.returncode == 0, result.stderr
    line = ("Exception raised in creation task: The actor died because of an error raised in "
            "its creation task, \x1b[36mray::Broken.__init__()\x1b[39m (pid=")
    assert line in result.stderr and "RuntimeError: cannot start" in result.stderr, result.stderr
    if runtime == "embedded":
        assert "(Broken pid=" in result.stderr.split(line)[0].splitlines()[-1], result.stderr
        quiet = run_python(["-c", code, "off"], env=env)
        assert quiet.returncode == 0 and "cannot start" not in quiet.stderr, quiet.stderr


def test_named_actors(ray):
    @ray.remote
    class Store:
        def __init__(self, v):
            self.v = v

        def get(self):
            return self.v

    s = Store.options(name="store").remote(1)
    assert ray.get(ray.get_actor("store").get.remote()) == 1
    with pytest.raises(ray.exceptions.ActorAlreadyExistsError) as info:
        Store.options(name="store").remote(2)
    assert isinstance(info.value, ValueError)
    same = Store.options(name="store", get_if_exists=True).remote(3)
    assert ray.get(same.get.remote()) == 1 and same == s
    other_ns = Store.options(name="store", namespace="other").remote(4)
    assert ray.get(ray.get_actor("store", namespace="other").get.remote()) == 4
    assert ray.util.list_named_actors() == ["store"]
    assert sorted(map(tuple, (d.values() for d in ray.util.list_named_actors(all_namespaces=True)))) == \
        sorted([("store", ray.get_runtime_context().namespace), ("store", "other")])
    with pytest.raises(ValueError, match="Failed to look up actor with name 'nope'"):
        ray.get_actor("nope")
    ray.kill(s)
    with pytest.raises(ValueError):
        ray.get_actor("store")  # the name is free at once
    fresh = Store.options(name="store").remote(5)
    assert ray.get(fresh.get.remote()) == 5
    del other_ns


def test_concurrent_get_if_exists_creations_yield_one_actor(ray):
    """Members of a group create a shared named actor with get_if_exists from several actors at
    once (ray.util.collective's rendezvous does): every caller must get the same actor. Each
    caller keeps its handle: an actor whose last handle went away ends (and frees its name),
    as in Ray, so callers that did not overlap in time would rightly make new ones."""
    @ray.remote(num_cpus=0)
    class Counter:
        def __init__(self):
            self.n = 0

        def bump(self):
            self.n += 1
            return self.n

    @ray.remote(num_cpus=0)
    class Caller:
        def bump_shared(self):
            self.shared = Counter.options(name="shared", get_if_exists=True).remote()
            return ray.get(self.shared.bump.remote())

    callers = [Caller.remote() for _ in range(4)]
    assert sorted(ray.get([c.bump_shared.remote() for c in callers])) == [1, 2, 3, 4]


def test_kill_makes_calls_fail_with_actor_died(ray):
    @ray.remote
    class A:
        def pid(self):
            return os.getpid()

    a = A.remote()
    ray.get(a.pid.remote())
    ray.kill(a)
    with pytest.raises(ray.exceptions.ActorDiedError) as info:
        ray.get(a.pid.remote(), timeout=10)
    assert isinstance(info.value, ray.exceptions.RayActorError)
    assert "ray.kill" in str(info.value)



def test_kill_without_no_restart_of_an_actor_with_no_restart_left_is_a_kill(ray, capfd):
    # Ray 2.60: ray.kill(a, no_restart=False) on an actor with no restart left kills it; its
    # death is the kill's (worded as its process's), not a crash, and no crash notice prints.
    @ray.remote
    class A:
        def ping(self):
            return 1

    a = A.remote()
    ray.get(a.ping.remote())
    ray.kill(a, no_restart=False)
    with pytest.raises(ray.exceptions.ActorDiedError) as info:
        ray.get(a.ping.remote(), timeout=30)
    assert ("Worker exit type: INTENDED_SYSTEM_EXIT Worker exit detail: Worker exits because the "
            "actor is killed. The actor is dead because it was killed by `ray.kill`.") in str(info.value)
    assert "died or was killed" not in capfd.readouterr().err

@pytest.mark.embedded_only("yr local mode runs actors as threads of the driver process")
def test_kill_ends_the_actor_process(ray):
    @ray.remote
    class A:
        def pid(self):
            return os.getpid()

    a = A.remote()
    pid = ray.get(a.pid.remote())
    ray.kill(a)
    deadline = time.monotonic() + 5
    while process_alive(pid):
        assert time.monotonic() < deadline
        time.sleep(0.02)


@pytest.mark.embedded_only('yr local mode runs tasks and actors as threads of the driver process: os._exit in a method would end the test process')
def test_crash_restarts_with_max_restarts(ray):
    @ray.remote(max_restarts=1)
    class Phoenix:
        def __init__(self):
            self.calls = 0

        def pid(self):
            self.calls += 1
            return os.getpid(), self.calls, ray.get_runtime_context().was_current_actor_reconstructed

        def crash(self):
            os._exit(1)

    p = Phoenix.remote()
    first_pid, _, restarted = ray.get(p.pid.remote())
    assert not restarted
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(p.crash.remote(), timeout=10)
    second_pid, calls, restarted = when_restarted(ray, p.pid.remote)
    assert second_pid != first_pid and calls == 1 and restarted  # state reset by the restart
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(p.crash.remote(), timeout=10)
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(p.pid.remote(), timeout=10)  # no restart left


@pytest.mark.embedded_only('yr local mode runs tasks and actors as threads of the driver process: os._exit in a method would end the test process')
def test_max_task_retries_resubmits_after_restart(ray, tmp_path):
    marker = str(tmp_path / "crashed")

    @ray.remote(max_restarts=1, max_task_retries=1)
    class Flaky:
        def work(self, path):
            if not os.path.exists(path):
                open(path, "w").close()
                os._exit(1)
            return "done"

    assert ray.get(Flaky.remote().work.remote(marker), timeout=20) == "done"


def test_threaded_actor_runs_calls_concurrently(ray):
    @ray.remote(max_concurrency=4)
    class Threaded:
        def __init__(self):
            self.barrier = threading.Barrier(4, timeout=10)

        def meet(self):
            self.barrier.wait()
            return threading.get_ident()

    t = Threaded.remote()
    assert len(set(ray.get([t.meet.remote() for _ in range(4)], timeout=20))) == 4


def test_async_actor_interleaves_calls(ray):
    import asyncio

    @ray.remote
    class Async:
        def __init__(self):
            self.event = asyncio.Event()

        async def wait(self):
            await self.event.wait()
            return "released"

        async def release(self):
            self.event.set()
            return "set"

        async def compute(self, x):
            await asyncio.sleep(0.01)
            return x * 2

    a = Async.remote()
    waiting = a.wait.remote()
    assert ray.get(a.release.remote(), timeout=10) == "set"
    assert ray.get(waiting, timeout=10) == "released"
    assert ray.get([a.compute.remote(i) for i in range(20)]) == [i * 2 for i in range(20)]


def test_async_actor_can_await_refs(ray):
    @ray.remote
    def square(x):
        return x * x

    @ray.remote
    class Gather:
        async def total(self, n):
            values = [await square.remote(i) for i in range(n)]
            return sum(values)

    assert ray.get(Gather.remote().total.remote(5), timeout=20) == 30


def test_exit_actor(ray):
    @ray.remote
    class Quitter:
        def quit(self):
            ray.actor.exit_actor()

        def ping(self):
            return "pong"

    q = Quitter.remote()
    assert ray.get(q.ping.remote()) == "pong"
    q.quit.remote()
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(q.ping.remote(), timeout=10)
    with pytest.raises(TypeError):
        ray.actor.exit_actor()  # not inside an actor


@pytest.mark.embedded_only('yr local mode runs tasks and actors as threads of the driver process: there is no actor process whose exit can be observed')
@pytest.mark.parametrize("kind", ["threaded", "async"])
def test_exit_actor_in_a_concurrent_actor_lets_its_running_calls_finish(ray, tmp_path, kind):
    """As Ray documents it: the calls running beside the exiting one finish and return their
    values; a call that had not begun fails with ActorDiedError; the atexit handlers run after
    the running calls ended, then the process exits (it used to end every call at once)."""
    import asyncio

    trail = str(tmp_path / "trail")

    def note(text):
        with open(trail, "a") as f:
            f.write(text + "\n")

    class Base:
        def __init__(self):
            import atexit

            atexit.register(note, "atexit")

        def pid(self):
            return os.getpid()

    if kind == "threaded":
        @ray.remote(max_concurrency=2)
        class Worker(Base):
            def slow(self):
                time.sleep(1.5)
                note("slow")
                return "slow done"

            def leave(self):
                time.sleep(0.3)
                ray.actor.exit_actor()

            def ping(self):
                return "pong"
    else:
        @ray.remote(max_concurrency=2)
        class Worker(Base):
            async def slow(self):
                await asyncio.sleep(1.5)
                note("slow")
                return "slow done"

            async def leave(self):
                await asyncio.sleep(0.3)
                ray.actor.exit_actor()

            async def ping(self):
                return "pong"

    w = Worker.remote()
    pid = ray.get(w.pid.remote(), timeout=30)
    slow, leave = w.slow.remote(), w.leave.remote()
    waiting = w.ping.remote()  # both places are taken: it has not begun when the actor exits
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(leave, timeout=30)
    assert ray.get(slow, timeout=30) == "slow done"
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(waiting, timeout=30)
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(w.ping.remote(), timeout=30)
    deadline = time.monotonic() + 30
    while process_alive(pid):
        assert time.monotonic() < deadline, "the actor's process did not exit after its calls"
        time.sleep(0.02)
    with open(trail) as f:
        assert f.read().split() == ["slow", "atexit"]



@pytest.mark.embedded_only("yr local mode frees the name at once: there is no actor process "
                           "whose exit ends the drain (matrix: ray.actor.exit_actor)")
def test_a_named_actor_keeps_its_name_until_its_running_calls_end(ray):
    # Ray 2.60: while a threaded actor that called exit_actor() finishes its running calls,
    # ray.get_actor still finds it (its calls fail) and its name cannot be taken; after its
    # process has exited, the name stays taken while handles to it remain (measured: still
    # found 3 s after, as for any actor that called exit_actor()), and is free once they go.
    import gc

    @ray.remote(max_concurrency=2)
    class Drainer:
        def slow(self):
            time.sleep(1.5)
            return "slow done"

        def leave(self):
            ray.actor.exit_actor()

        def pid(self):
            return os.getpid()

    d = Drainer.options(name="drainer").remote()
    pid = ray.get(d.pid.remote(), timeout=30)
    slow = d.slow.remote()
    time.sleep(0.3)
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(d.leave.remote(), timeout=30)
    found = ray.get_actor("drainer")
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(found.pid.remote(), timeout=30)
    with pytest.raises(ValueError, match="already taken"):
        Drainer.options(name="drainer").remote()
    assert ray.get(slow, timeout=30) == "slow done"
    deadline = time.monotonic() + 30
    while process_alive(pid):
        assert time.monotonic() < deadline, "the actor's process did not exit"
        time.sleep(0.02)
    time.sleep(0.5)  # (the runtime learns of the exit a moment after it, as Ray does)
    assert ray.get_actor("drainer") is not None  # the handles hold the dead actor's name
    with pytest.raises(ValueError, match="already taken"):
        Drainer.options(name="drainer").remote()
    del d, found
    gc.collect()
    deadline = time.monotonic() + 30
    while True:
        try:
            ray.get_actor("drainer")
        except ValueError:
            break
        assert time.monotonic() < deadline, "the name was not freed when its handles went"
        time.sleep(0.02)
    again = Drainer.options(name="drainer").remote()
    assert ray.get(again.pid.remote(), timeout=30) != pid


@pytest.mark.embedded_only("yr local mode: exit_actor raises SystemExit in asyncio actors too")
def test_exit_actor_in_an_asyncio_task_of_an_async_actor_ends_the_actor(ray):
    """Ray raises AsyncioActorExit (an Exception) in an async actor: raised in an asyncio task
    of the actor's (gather), a SystemExit stopped the actor's event loop and every later call
    waited for ever. Caught by the method, the actor still ends (Ray's exit flag)."""
    import asyncio

    @ray.remote
    class Service:
        async def stop(self):
            async def inner():
                ray.actor.exit_actor()

            await asyncio.gather(inner())

        async def stop_caught(self):
            try:
                ray.actor.exit_actor()
            except ray.exceptions.AsyncioActorExit as exc:
                assert not isinstance(exc, SystemExit) and isinstance(exc, Exception)
                return "caught"

        async def ping(self):
            return "pong"

    for method in ("stop", "stop_caught"):
        service = Service.remote()
        assert ray.get(service.ping.remote(), timeout=30) == "pong"
        with pytest.raises(ray.exceptions.ActorDiedError):
            ray.get(getattr(service, method).remote(), timeout=30)
        with pytest.raises(ray.exceptions.ActorDiedError):
            ray.get(service.ping.remote(), timeout=30)


@pytest.mark.embedded_only('yr local mode runs tasks and actors as threads of the driver process: there is no actor process whose exit can be observed')
def test_ray_kill_ends_an_actor_that_waits_for_its_running_calls_to_exit(ray):
    @ray.remote(max_concurrency=2)
    class Stuck:
        def pid(self):
            return os.getpid()

        def forever(self):
            while True:
                time.sleep(0.05)

        def leave(self):
            ray.actor.exit_actor()

    stuck = Stuck.remote()
    pid = ray.get(stuck.pid.remote(), timeout=30)
    running = stuck.forever.remote()
    time.sleep(0.3)
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(stuck.leave.remote(), timeout=30)
    assert process_alive(pid)  # its running call never ends
    ray.kill(stuck)  # used to do nothing: the actor was dead already
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(running, timeout=30)
    deadline = time.monotonic() + 30
    while process_alive(pid):
        assert time.monotonic() < deadline, "ray.kill left the exiting actor's process running"
        time.sleep(0.02)


@pytest.mark.embedded_only('yr local mode runs tasks and actors as threads of the driver process: there is no actor process whose exit can be observed')
def test_actor_ends_when_its_last_handle_goes(ray):
    import gc

    @ray.remote
    class Temp:
        def pid(self):
            return os.getpid()

    t = Temp.remote()
    pid = ray.get(t.pid.remote())
    del t
    gc.collect()
    deadline = time.monotonic() + 10
    while process_alive(pid):
        assert time.monotonic() < deadline, "actor process outlived its last handle"
        time.sleep(0.02)


def test_detached_and_escaped_actors_outlive_handles(ray):
    import gc

    @ray.remote
    class Keeper:
        def ping(self):
            return "alive"

    Keeper.options(name="keeper", lifetime="detached").remote()
    gc.collect()
    time.sleep(0.2)
    assert ray.get(ray.get_actor("keeper").ping.remote(), timeout=10) == "alive"


def test_actor_pool(ray):
    @ray.remote
    class Doubler:
        def double(self, v):
            return 2 * v

    pool = ray.util.ActorPool([Doubler.remote(), Doubler.remote()])
    assert list(pool.map(lambda a, v: a.double.remote(v), range(6))) == [0, 2, 4, 6, 8, 10]
    assert sorted(pool.map_unordered(lambda a, v: a.double.remote(v), range(4))) == [0, 2, 4, 6]
    assert not pool.has_next()
    with pytest.raises(StopIteration):
        pool.get_next()


def test_actor_pool_ordered_after_unordered(ray):
    @ray.remote
    class Doubler:
        def double(self, v):
            return 2 * v

    pool = ray.util.ActorPool([Doubler.remote(), Doubler.remote()])
    assert sorted(pool.map_unordered(lambda a, v: a.double.remote(v), range(4))) == [0, 2, 4, 6]
    pool.submit(lambda a, v: a.double.remote(v), 20)
    assert pool.get_next() == 40


def test_actor_pool_unordered_timeout_ignoring_drops_the_oldest_call(ray):
    # Ray 2.60 raises UnboundLocalError here (a bug); later Ray drops the oldest pending call
    # and frees its actor, which is what the adapter does.
    @ray.remote
    class Slow:
        def wait(self, s):
            time.sleep(s)
            return s

    pool = ray.util.ActorPool([Slow.remote()])
    pool.submit(lambda a, v: a.wait.remote(v), 5)
    with pytest.raises(TimeoutError, match=r"^Timed out waiting for result\. The task ObjectRef\(\w+\) "
                                           r"has been ignored\.$"):
        pool.get_next_unordered(timeout=0.1, ignore_if_timedout=True)
    assert not pool.has_next() and pool.has_free()
    pool.submit(lambda a, v: a.wait.remote(v), 0)
    assert pool.get_next_unordered(timeout=30) == 0


def test_unknown_actor_method_option_raises_type_error_at_remote(ray):
    @ray.remote
    class A:
        def f(self):
            return 1

    a = A.remote()
    wrapped = a.f.options(bogus=1)  # as in Ray: accepted here, rejected by .remote()
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        wrapped.remote()
    assert ray.get(a.f.options(name="named").remote()) == 1


@pytest.mark.embedded_only("yr-local runs actors as threads of the driver: no process exit")
@pytest.mark.parametrize("how", ["exit_actor", "__ray_terminate__", "out of scope", "ray.kill"])
def test_graceful_actor_exit_runs_shutdown_hook_then_atexit_handlers(ray, tmp_path, how):
    # Ray 2.60 (Ray's test_actor.py::test_atexit_handler, and its actor cleanup docs): an actor
    # that leaves through exit_actor() or __ray_terminate__, or whose handles all went out of
    # scope, calls its __ray_shutdown__ (which can still put and get), lets go of the instance
    # (its __del__) and then runs the process's atexit handlers (this order, which Ray 2.60
    # shows); ray.kill does none of them.
    marker = tmp_path / "ended.txt"

    @ray.remote
    class A:
        def __init__(self, path):
            import atexit

            self.path = path
            atexit.register(lambda: open(path, "a").write("atexit\n"))

        def ready(self):
            return True

        def leave(self):
            ray.actor.exit_actor()

        def __ray_shutdown__(self):
            open(self.path, "a").write(f"shutdown{ray.get(ray.put(1))}\n")

        def __del__(self):
            open(self.path, "a").write("del\n")

    a = A.remote(str(marker))
    assert ray.get(a.ready.remote())
    pid_ref = a.__ray_call__.remote(lambda self: __import__("os").getpid())
    pid = ray.get(pid_ref)
    if how == "exit_actor":
        ray.wait([a.leave.remote()])
    elif how == "__ray_terminate__":
        ray.wait([a.__ray_terminate__.remote()])
    elif how == "out of scope":
        del a
    else:
        ray.kill(a)
    from ray_adapter.ray._private.test_utils import wait_for_pid_to_exit

    wait_for_pid_to_exit(pid, timeout=30)
    if how == "ray.kill":
        assert not marker.exists()
    else:
        assert marker.read_text().split() == ["shutdown1", "del", "atexit"]


@pytest.mark.parametrize("how", ["exit_actor", "out of scope", "ray.kill"])
def test_an_actor_made_by_an_actor_dies_with_it(ray, tmp_path, how):
    # Ray 2.60: the actors a worker created (it owns them) die with its process, even while
    # the driver holds a handle: ActorDiedError names the owner's end, and their own
    # __ray_shutdown__ does not run (they were not ended gracefully).
    marker = tmp_path / "owned.txt"

    @ray.remote
    class Owned:
        def ping(self):
            return "pong"

        def __ray_shutdown__(self):
            marker.write_text("hook")

    @ray.remote
    class Owner:
        def __init__(self):
            self.owned = Owned.remote()

        def get_owned(self):
            return [self.owned]

        def leave(self):
            ray.actor.exit_actor()

    owner = Owner.remote()
    [owned] = ray.get(owner.get_owned.remote())
    assert ray.get(owned.ping.remote()) == "pong"
    if how == "exit_actor":
        ray.wait([owner.leave.remote()])
    elif how == "ray.kill":
        ray.kill(owner)
    else:
        del owner
    deadline = time.monotonic() + 30
    with pytest.raises(ray.exceptions.ActorDiedError) as info:
        while time.monotonic() < deadline:
            ray.get(owned.ping.remote(), timeout=30)
            time.sleep(0.05)
    exit_type = "INTENDED_USER_EXIT" if how == "exit_actor" else "INTENDED_SYSTEM_EXIT"
    assert "The actor is dead because its owner has died." in str(info.value)
    assert f"Owner worker exit type: {exit_type}" in str(info.value)
    time.sleep(0.3)
    assert not marker.exists()


def test_a_decorated_class_del_runs_only_when_the_class_object_goes(ray):
    # The class object is an instance of the user's class (Ray's ActorClass derives from it):
    # Ray calls its __del__ when that object is collected, never at decoration nor for a copy
    # that .options() makes.
    import gc

    calls = []

    class Plain:
        def __del__(self):
            calls.append(type(self).__name__)

        def ping(self):
            return 1

    decorated = ray.remote(Plain)
    decorated.options(num_cpus=0)
    gc.collect()
    assert calls == []
    actor = decorated.remote()  # kept: on yr-local its instance is an object of this process,
    assert ray.get(actor.ping.remote()) == 1  # whose __del__ would also land in `calls`
    del decorated
    gc.collect()
    assert calls == ["ActorClass(Plain)"]
    del actor


@pytest.mark.embedded_only("yr queues an actor's calls in arrival order across callers (matrix: "
                         "ray.actor.ActorMethod)")
def test_call_order_holds_per_caller_only(ray):
    # Ray orders an actor's calls per caller: a call whose argument is pending holds back its
    # own caller's later calls, not another caller's (Ray's test_actor_pass_by_ref_order_optimization).
    @ray.remote(max_concurrency=2)
    class Gate:
        def __init__(self):
            self.open = threading.Event()

        def release(self):
            self.open.set()

        def wait_open(self):
            self.open.wait(60)
            return "slow"

    @ray.remote
    class Log:
        def f(self, x):
            return x

    gate = Gate.remote()
    log = Log.remote()
    slow = gate.wait_open.remote()

    @ray.remote
    def caller(arg):
        return ray.get(log.f.remote(arg))

    held_back = log.f.remote(slow)    # the driver's first call: waits for `slow`
    behind = log.f.remote("mine")     # the driver's second: behind it (same caller)
    other = caller.remote("ready")    # another caller's call, its argument ready
    assert ray.get(other, timeout=30) == "ready"
    ready, _ = ray.wait([behind, held_back], timeout=0.5)
    assert ready == []
    ray.get(gate.release.remote())
    assert ray.get([held_back, behind], timeout=30) == ["slow", "mine"]


def test_an_actor_class_that_names_itself_keeps_its_methods_in_workers(ray):
    """A tree of actors: the class's own method creates another of it, and a task creates one.
    Sent to a worker by value, the class is rebuilt while cloudpickle still fills it in; its
    handles must still find the methods (Ray's do)."""
    @ray.remote(num_cpus=0)
    class Node:
        def ping(self):
            return "pong"

        def spawn_child(self):
            return Node.remote()

        def child_ping(self):
            return ray.get(Node.options(num_cpus=0).remote().ping.remote())

    @ray.remote
    def make_in_task():
        return ray.get(Node.remote().ping.remote())

    root = Node.remote()
    assert ray.get(make_in_task.remote(), timeout=60) == "pong"
    assert ray.get(root.child_ping.remote(), timeout=60) == "pong"
    child = ray.get(root.spawn_child.remote(), timeout=60)
    assert ray.get(child.ping.remote(), timeout=60) == "pong"


@pytest.mark.embedded_only("yr local mode runs tasks and actors as threads of the driver")
def test_an_actor_never_starts_in_a_process_that_ran_tasks(ray):
    """Ray never places an actor in a task's worker: what a task left in its process (an env
    var, module state, a torch process group) is never an actor's."""
    @ray.remote
    def leave_state():
        os.environ["RAY_ADAPTER_TEST_LEFT"] = "1"
        return os.getpid()

    @ray.remote
    class Fresh:
        def look(self):
            return os.getpid(), os.environ.get("RAY_ADAPTER_TEST_LEFT")

    task_pids = set(ray.get([leave_state.remote() for _ in range(4)]))
    actors = [Fresh.remote() for _ in range(2)]
    looks = ray.get([a.look.remote() for a in actors], timeout=60)
    assert all(pid not in task_pids and left is None for pid, left in looks), (task_pids, looks)


@pytest.mark.embedded_only("yr local mode runs actors as threads of the driver process: ray.kill kills no process")
def test_a_killed_actors_calls_fail_at_once_though_a_program_it_started_runs_on(ray):
    # A call in flight when ray.kill came fails once the actor's process is gone, not when a
    # program the method left running (holding the descriptors it inherited) ends: the
    # worker's connection is not inherited (it took 20 s here, the background sleep's life).
    import time

    @ray.remote
    class A:
        def slow(self):
            import os
            import time

            os.system("sleep 20 &")
            time.sleep(60)

    a = A.remote()
    ref = a.slow.remote()
    time.sleep(1)
    start = time.monotonic()
    ray.kill(a)
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(ref, timeout=30)
    assert time.monotonic() - start < 10
