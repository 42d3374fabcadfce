"""Bursts of small tasks on the embedded runtime: several tasks pipelined to each worker, calls
and results travelling several per write, lines of work taking turns, and little per-task
garbage for the driver's collector. Each test checks a behaviour a user could see (a deadlock,
a lost order or result, a result held back, a starved line, the driver's reads and memory),
not a timing of the machine."""
import contextlib
import gc
import time

import pytest

pytestmark = pytest.mark.embedded_only(
    "pipelining and result batching are the embedded runtime's (yr schedules calls itself)")


def test_a_task_waiting_for_a_follower_further_down_its_line_does_not_deadlock(ray1):
    ray = ray1

    @ray.remote(num_cpus=0, max_concurrency=2)
    class Signal:
        def __init__(self):
            import threading

            self.event = threading.Event()

        def send(self):
            self.event.set()

        def wait(self):
            return self.event.wait(60)

    sig = Signal.remote()
    ray.get(sig.__ray_ready__.remote())

    @ray.remote
    def first():
        time.sleep(0.3)

    @ray.remote
    def waiter(s):
        return ray.get(s.wait.remote())

    @ray.remote
    def quick(i):
        return i

    @ray.remote
    def sender(s):
        return ray.get(s.send.remote())

    # When waiter starts, half the line behind it (quick(0), then sender) is sent to its
    # worker; it blocks on sender, the second of them: every follower must come back.
    refs = [first.remote(), waiter.remote(sig), quick.remote(0), sender.remote(sig),
            quick.remote(1), quick.remote(2)]
    assert ray.get(refs, timeout=60) == [None, True, 0, None, 1, 2]


def test_followers_of_a_crashed_worker_run_in_order_without_spending_retries(ray1):
    ray = ray1

    @ray.remote
    def first():
        time.sleep(0.3)

    @ray.remote(max_retries=0)
    def crash():
        import os

        time.sleep(0.5)
        os._exit(1)

    @ray.remote(max_retries=0)
    def stamp(i):
        return i, time.monotonic()

    refs = [first.remote(), crash.remote()] + [stamp.remote(i) for i in range(6)]
    with pytest.raises(ray.exceptions.WorkerCrashedError):
        ray.get(refs[1], timeout=30)
    stamps = ray.get(refs[2:], timeout=30)
    assert [i for i, _ in stamps] == list(range(6))
    times = [t for _, t in stamps]
    assert times == sorted(times), "the followers given back lost their order"


def test_a_short_result_is_not_held_back_by_a_long_task_behind_it(ray1):
    ray = ray1

    @ray.remote
    def sleep(t):
        time.sleep(t)

    @ray.remote
    def tiny():
        return "tiny"

    @ray.remote
    def spin(seconds):
        end = time.monotonic() + seconds  # pure Python: holds the GIL of its worker
        n = 0
        while time.monotonic() < end:
            n += 1
        return n

    assert ray.get([tiny.remote(), spin.remote(0)]) == ["tiny", 0]  # warm: tiny is short
    blocker = sleep.remote(0.5)
    time.sleep(0.1)
    # When blocker ends, sleep(0.6) starts with half the line behind it on its worker: tiny
    # and spin; the rest is cancelled before tiny runs, so no message from the driver comes
    # to that worker while spin runs. tiny's result goes out before spin starts.
    refs = [sleep.remote(0.6), tiny.remote(), spin.remote(4.0)]
    rest = [tiny.remote(), tiny.remote()]
    time.sleep(0.7)
    for ref in rest:
        ray.cancel(ref)
    start = time.monotonic()
    assert ray.get(refs[1], timeout=30) == "tiny"
    assert time.monotonic() - start < 2.0, "tiny's result waited for the task behind it"
    assert ray.get(refs[2], timeout=30) > 0
    assert ray.get(blocker, timeout=30) is None


@contextlib.contextmanager
def _counted(method):
    """Count the driver's calls of ``Channel.<method>`` while the block runs (yields a
    one-item list holding the count)."""
    from ray_adapter.core.embedded import channel

    original = getattr(channel.Channel, method)
    calls = [0]

    def counting(self, *args):
        calls[0] += 1
        return original(self, *args)

    setattr(channel.Channel, method, counting)
    try:
        yield calls
    finally:
        setattr(channel.Channel, method, original)


def _read_sizes():
    """Record the size (bytes) of each socket read of the driver while the block runs
    (yields the list)."""
    from ray_adapter.core.embedded import channel

    original = channel.Channel._recv_into
    sizes = []

    def recording(self, view):
        n = original(self, view)
        sizes.append(n)
        return n

    channel.Channel._recv_into = recording
    try:
        yield sizes
    finally:
        channel.Channel._recv_into = original


_read_sizes = contextlib.contextmanager(_read_sizes)


def test_results_of_a_burst_reach_the_driver_in_batches(ray):
    @ray.remote
    def noop():
        return None

    ray.get([noop.remote() for _ in range(100)])
    with _read_sizes() as sizes:  # (the read under way as it starts is not recorded)
        for _ in range(3):
            assert ray.get(noop.remote(), timeout=30) is None
    one_result = max(sizes)  # lone round trips: each result comes in a read of its own
    # With one task in flight per worker, no read can carry more than a result or two (one
    # per worker). Workers that run ahead of the driver leave several results in the socket
    # for one read. How many per read on average depends on how the machine schedules the
    # driver against its workers (0.13 to 0.66 reads per result were seen on loaded 2-core
    # machines), so what is checked is that reads carrying many results happen at all.
    with _read_sizes() as sizes:
        assert ray.get([noop.remote() for _ in range(2000)], timeout=120) == [None] * 2000
    batched = [n for n in sizes if n >= 4 * one_result]
    assert batched, (f"no read of the 2000 results carried 4 or more ({one_result} bytes each; "
                     f"largest read {max(sizes)} bytes, {len(sizes)} reads)")


def test_a_queued_task_costs_the_garbage_collector_few_objects(ray_module):
    ray = ray_module
    ray.init(num_cpus=1, resources={"slot": 1})

    @ray.remote(resources={"slot": 1})
    def hold():
        time.sleep(60)

    @ray.remote(resources={"slot": 1})
    def noop():
        return None

    ray.get(noop.remote())
    blocker = hold.remote()
    time.sleep(0.3)
    gc.collect()
    before = len(gc.get_objects())
    refs = [noop.remote() for _ in range(1000)]
    gc.collect()
    per_task = (len(gc.get_objects()) - before) / 1000
    # The ref, its object entry, the task record, its demand, its arguments, its event row:
    # a few objects per task (21 with a closure per callback), so that 100,000 queued tasks
    # do not make every full collection of the driver crawl.
    assert per_task <= 10, f"{per_task:.1f} tracked objects per queued task"
    ray.cancel(blocker, force=True)
    del refs


def test_a_burst_of_actor_calls_goes_out_in_batches(ray, monkeypatch):
    from ray_adapter.core.embedded import posts

    # What counts as a burst is a matter of pace: calls posted less than BURST_WINDOW apart
    # are batched, and a deferred one waits at most FLUSH_DELAY. On a loaded machine a loop
    # of .remote() calls can run slower than both (1721 writes for 2000 calls in a CI run
    # beside two other suites), and writing each at once is then the design. Both windows
    # are widened here so that the loop below is a burst on any machine: what is checked is
    # that a burst is batched, not how fast this machine posts.
    monkeypatch.setattr(posts, "BURST_WINDOW", 1.0)
    monkeypatch.setattr(posts, "FLUSH_DELAY", 0.05)

    @ray.remote
    class Counter:
        def __init__(self):
            self.n = 0

        def inc(self):
            self.n += 1
            return self.n

    counter = Counter.remote()
    ray.get([counter.inc.remote() for _ in range(100)])
    with _counted("_drain") as writes:
        refs = [counter.inc.remote() for _ in range(2000)]
    assert ray.get(refs, timeout=120) == list(range(101, 2101))  # in order, every one
    # One write per call without batching (1.00 before: a sendmsg each); with it, a write
    # per MAX_DEFERRED_PIECES calls, per kick of the flush thread (every 50 ms here) and per
    # block of a reader thread that writes what was queued so far (0.02-0.1 here).
    assert writes[0] / 2000 <= 0.25, f"{writes[0]} writes for 2000 calls"


def test_a_call_goes_out_while_its_caller_computes_without_ever_blocking(ray):
    @ray.remote
    class Clock:
        def now(self):
            return time.time()

    clock = Clock.remote()
    ray.get(clock.now.remote())
    time.sleep(0.05)
    sent = time.time()
    ref = clock.now.remote()
    end = time.monotonic() + 1.0  # pure Python, never blocking: no flush before a block
    while time.monotonic() < end:
        pass
    assert ray.get(ref, timeout=30) - sent < 0.5, "the call waited for its caller to block"


def test_an_actor_queued_behind_a_backlog_of_tasks_starts_with_the_next_free_cpu(ray, capfd):
    @ray.remote
    def work():
        time.sleep(0.5)

    @ray.remote(num_cpus=1)
    class Actor:  # the same resources as the tasks, queued after all of them
        def ping(self):
            return "pong"

    ray.get([work.remote() for _ in range(2)])
    start = time.monotonic()
    backlog = [work.remote() for _ in range(12)]  # 3 s on 2 CPUs
    actor = Actor.remote()
    assert ray.get(actor.ping.remote(), timeout=30) == "pong"
    assert time.monotonic() - start < 2.0, "the actor waited for the whole backlog"
    assert ray.get(backlog, timeout=60) == [None] * 12
    assert "internal error" not in capfd.readouterr().err


def test_a_task_of_another_function_does_not_wait_behind_a_backlog(ray):
    @ray.remote
    def work():
        time.sleep(0.5)

    @ray.remote
    def other():
        return "other"

    ray.get([work.remote() for _ in range(2)] + [other.remote()])
    start = time.monotonic()
    backlog = [work.remote() for _ in range(12)]  # 3 s on 2 CPUs
    assert ray.get(other.remote(), timeout=30) == "other"
    assert time.monotonic() - start < 2.0, "other waited for work's whole backlog (Ray: 0.5 s)"
    assert ray.get(backlog, timeout=60) == [None] * 12


def test_a_line_of_brief_tasks_pipelined_beside_another_line_still_takes_turns(ray):
    @ray.remote
    def brief(i):
        time.sleep(0.0005)  # brief (under 2 ms), yet the burst outlasts its own submission
        return i

    @ray.remote
    def other():
        return "other"

    ray.get([brief.remote(0) for _ in range(200)] + [other.remote()])
    burst = [brief.remote(i) for i in range(4000)]
    assert ray.get(other.remote(), timeout=60) == "other"
    done, _ = ray.wait(burst, num_returns=len(burst), timeout=0)
    # Brief tasks keep being pipelined while other waits, but only for a quantum: other runs
    # long before the burst has drained.
    assert len(done) < len(burst) * 0.8, f"other ran after {len(done)} of {len(burst)} brief tasks"
    assert ray.get(burst, timeout=120) == list(range(4000))


def test_results_before_a_worker_exits_are_kept_and_nothing_runs_twice(ray1, tmp_path):
    ray = ray1
    log = tmp_path / "runs.log"

    @ray.remote(max_retries=0)
    def step(i, path):
        with open(path, "a") as out:
            out.write(f"{i}\n")
        if i == 5:
            import os

            os._exit(1)  # the worker ends: results of the calls before must not go with it
        return i

    refs = [step.remote(i, str(log)) for i in range(12)]
    results = []
    for ref in refs:
        try:
            results.append(ray.get(ref, timeout=60))
        except ray.exceptions.WorkerCrashedError:
            results.append("crashed")
    assert results == [0, 1, 2, 3, 4, "crashed", 6, 7, 8, 9, 10, 11]
    assert sorted(int(x) for x in log.read_text().split()) == list(range(12))  # each once


def test_actor_results_before_it_exits_are_kept(ray):
    @ray.remote(max_restarts=0)
    class Actor:
        def short(self, i):
            return i

        def die(self):
            import os

            os._exit(1)

    actor = Actor.remote()
    ray.get(actor.short.remote(-1))
    refs = [actor.short.remote(i) for i in range(5)] + [actor.die.remote()]
    assert ray.get(refs[:5], timeout=60) == [0, 1, 2, 3, 4]
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(refs[5], timeout=60)


def test_a_short_result_is_not_held_back_by_a_gil_holding_call_behind_it(ray1):
    ray = ray1

    @ray.remote
    def work(n):
        return sum(range(n))  # a C loop: holds its worker's GIL until it ends

    ray.get(work.remote(0))
    start = time.monotonic()
    refs = [work.remote(0), work.remote(1), work.remote(60_000_000), work.remote(60_000_000)]
    assert ray.get(refs[1], timeout=60) == 0
    waited = time.monotonic() - start
    long_done = ray.get(refs[2], timeout=60) and time.monotonic() - start
    assert waited < long_done / 2, f"the short result came after {waited:.2f} s, the long one {long_done:.2f} s"
    ray.get(refs, timeout=60)


def test_followers_come_back_to_a_free_cpu_even_while_another_line_waits(ray):
    @ray.remote
    def sleep(t):
        time.sleep(t)
        return time.monotonic()

    ray.get([sleep.remote(0) for _ in range(2)])
    start = time.monotonic()
    first, second = sleep.remote(0.3), sleep.remote(0.6)
    long = sleep.remote(6)  # starts when first ends, with the shorts sent behind it
    shorts = [sleep.remote(0) for _ in range(4)]
    time.sleep(0.4)
    waiting = sleep.options(num_gpus=1).remote(0)  # a line that never gets resources here
    ends = ray.get(shorts, timeout=60)
    assert max(ends) - start < 3.0, "shorts waited behind the 6 s task while a CPU was free"
    ray.cancel(waiting)
    ray.cancel(long, force=True)
    assert ray.get([first, second], timeout=30)
