"""Synchronous ``ray.get`` of one object, as a controller loop does it, on both backends: gets in
a row and then a burst, a timed-out get that returns in time while the reply is still handled
later, a worker or actor killed while the caller waits (raised at once, a retry answering), a
future's callback never run on the caller while it is inside ``get`` (it may hold the user's
locks), many threads and the main thread getting from one actor."""
import os
import signal
import threading
import time

import pytest


def test_synchronous_gets_in_a_row_and_then_a_burst(ray):
    @ray.remote
    def square(x):
        return x * x

    @ray.remote
    class Counter:
        def __init__(self):
            self.n = 0

        def inc(self):
            self.n += 1
            return self.n

    ray.get(square.remote(1))
    counter = Counter.remote()
    ray.get(counter.inc.remote())
    assert [ray.get(square.remote(i)) for i in range(50)] == [i * i for i in range(50)]
    assert [ray.get(counter.inc.remote()) for _ in range(50)] == list(range(2, 52))
    assert ray.get([square.remote(i) for i in range(200)]) == [i * i for i in range(200)]


def test_a_timed_out_get_returns_in_time_and_the_reply_is_still_handled(ray):
    @ray.remote
    def slow(x):
        time.sleep(1.0)
        return x

    ref = slow.remote(7)
    start = time.monotonic()
    with pytest.raises(ray.exceptions.GetTimeoutError):
        ray.get(ref, timeout=0.2)
    assert time.monotonic() - start < 0.9
    assert ray.get(ref, timeout=30) == 7  # handled by whichever thread read it


@pytest.mark.embedded_only("kills worker processes: on yr-local they are the driver itself")
def test_a_worker_killed_while_the_caller_waits_raises_at_once(ray):
    @ray.remote(max_retries=0)
    def pid_then_sleep():
        time.sleep(60)

    @ray.remote
    def pid():
        return os.getpid()

    @ray.remote(max_restarts=0)
    class Sleeper:
        def pid(self):
            return os.getpid()

        def nap(self):
            time.sleep(60)

    sleeper = Sleeper.remote()
    actor_pid = ray.get(sleeper.pid.remote())
    ref = sleeper.nap.remote()
    threading.Timer(0.5, os.kill, (actor_pid, signal.SIGKILL)).start()
    start = time.monotonic()
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(ref, timeout=30)
    assert time.monotonic() - start < 10

    @ray.remote(max_retries=1)
    def retried(marker):
        if not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)  # the first try dies; the retry answers
        return "retried"

    marker = f"/tmp/ray-adapter-test-retry-{os.getpid()}-{time.monotonic_ns()}"
    try:
        assert ray.get(retried.remote(marker), timeout=60) == "retried"
    finally:
        if os.path.exists(marker):
            os.unlink(marker)


def test_a_future_callback_never_runs_on_the_caller(ray):
    @ray.remote
    def value(x):
        return x

    me, in_get, ran_on = threading.current_thread().name, [False], []
    for i in range(20):
        ref = value.remote(i)
        ref.future().add_done_callback(
            lambda f: ran_on.append((threading.current_thread().name, in_get[0])))
        in_get[0] = True
        assert ray.get(ref, timeout=30) == i
        in_get[0] = False
    deadline = time.monotonic() + 30
    while len(ran_on) < 20 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(ran_on) == 20 and (me, True) not in ran_on  # (a done future runs it at once, as any)


def test_many_threads_getting_from_one_actor(ray):
    @ray.remote
    class Echo:
        def echo(self, x):
            return x

    echo = Echo.options(max_concurrency=4).remote()
    results, errors = {}, []

    def run(t):
        try:
            results[t] = [ray.get(echo.echo.remote((t, i)), timeout=60) for i in range(100)]
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    run("main")  # the main thread too (a get reads its worker's replies itself when it can)
    for thread in threads:
        thread.join(120)
    assert not errors
    assert results == {t: [(t, i) for i in range(100)] for t in list(range(8)) + ["main"]}
