"""Tasks pipelined to a busy worker (a follower sent behind the running task) keep Ray's
semantics: a task waiting for its follower does not deadlock, a follower does not wait behind a
long task while another CPU is free, and cancelling one, or losing its worker, behaves as for
any queued task. Each scenario first makes the follower exist: with every CPU busy and tasks
queued, a task that starts gets the next queued one sent behind it."""
import time

import pytest

pytestmark = pytest.mark.embedded_only(
    "yr local mode enforces no CPU limit (tasks never queue), so no task waits behind another")


def test_a_task_waiting_for_its_follower_does_not_deadlock(ray1):
    ray = ray1

    @ray.remote(num_cpus=0)
    class Signal:
        def __init__(self):
            import threading

            self.event = threading.Event()

        def send(self):
            self.event.set()

        def wait(self):
            return self.event.wait(60)

    sig = Signal.options(max_concurrency=2).remote()
    ray.get(sig.__ray_ready__.remote())

    @ray.remote
    def first():
        time.sleep(0.3)

    @ray.remote
    def waiter(s):
        return ray.get(s.wait.remote())  # blocks until the task queued behind it has run

    @ray.remote
    def sender(s):
        return ray.get(s.send.remote())

    # first runs; waiter and sender queue; when waiter starts, sender is sent behind it.
    refs = [first.remote(), waiter.remote(sig), sender.remote(sig)]
    assert ray.get(refs, timeout=60) == [None, True, None]


def test_a_follower_does_not_wait_behind_a_long_task_when_a_cpu_is_free(ray):
    @ray.remote
    def short(x):
        time.sleep(0.5)
        return x

    @ray.remote
    def long():
        time.sleep(4)
        return "long"

    @ray.remote
    def quick():
        return "quick"

    # Two CPUs: both shorts run; long and quick queue. When the first short ends, long starts
    # there with quick behind it; the second short's CPU then comes free with nothing queued.
    start = time.time()
    shorts = [short.remote(1), short.remote(2)]
    slow, fast = long.remote(), quick.remote()
    assert ray.get(fast, timeout=30) == "quick"
    assert time.time() - start < 3.0  # not after long's 4 s
    assert ray.get(shorts + [slow], timeout=30) == [1, 2, "long"]


def test_a_cancelled_follower_is_answered_at_once_and_its_predecessor_runs_on(ray1):
    ray = ray1

    @ray.remote
    def first():
        time.sleep(0.3)

    @ray.remote
    def long():
        time.sleep(2)
        return "long"

    @ray.remote
    def behind():
        return "ran"

    refs = [first.remote(), long.remote(), behind.remote()]
    ray.get(refs[0], timeout=30)
    time.sleep(0.2)  # long runs now, behind queued after it
    start = time.time()
    ray.cancel(refs[2], force=True)  # force: only the cancelled task's own worker would die
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(refs[2], timeout=30)
    assert time.time() - start < 1.5  # not when long ends
    assert ray.get(refs[1], timeout=30) == "long"  # long was not killed


def test_a_follower_of_a_crashed_worker_runs_without_spending_a_retry(ray1):
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
    def behind():
        return "ran"

    refs = [first.remote(), crash.remote(), behind.remote()]
    with pytest.raises(ray.exceptions.WorkerCrashedError):
        ray.get(refs[1], timeout=30)
    assert ray.get(refs[2], timeout=30) == "ran"
    assert _cpu_back(ray, 1.0)


def _cpu_back(ray, cpus, timeout=5):
    """The CPUs are all available again within ``timeout`` seconds (results are sealed just
    before a worker's lease is returned)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if ray.available_resources().get("CPU") == cpus:
            return True
        time.sleep(0.05)
    return False


def test_many_tasks_through_followers_keep_order_results_and_cpus(ray):
    @ray.remote
    def square(i):
        return i * i

    refs = [square.remote(i) for i in range(2000)]
    assert ray.get(refs, timeout=120) == [i * i for i in range(2000)]
    assert _cpu_back(ray, 2.0)


@pytest.mark.parametrize("freed_by", ["other_shape", "actor_killed", "worker_crash", "lent"])
def test_a_follower_runs_wherever_resources_come_free(ray_module, freed_by):
    """However a CPU comes free while nothing is queued (another shape of task ends, an actor
    dies, a worker crashes, a task blocks and lends its CPU), a follower waiting behind a long
    task is given back and runs there."""
    ray = ray_module
    ray.init(num_cpus=2, resources={"x": 1})

    @ray.remote
    def sleep(t):
        time.sleep(t)
        return t

    @ray.remote(max_retries=0)
    def crash(t):
        import os

        time.sleep(t)
        os._exit(1)

    @ray.remote
    def quick():
        return "quick"

    @ray.remote(num_cpus=1)
    class Holder:
        def ping(self):
            return 1

    @ray.remote
    def lender(box):
        return ray.get(box[0])  # blocks (lends its CPU) until quick has run

    start = time.time()
    if freed_by == "other_shape":
        other = sleep.options(resources={"x": 1}).remote(1.0)
    elif freed_by == "actor_killed":
        holder = Holder.remote()
        ray.get(holder.ping.remote())
    elif freed_by == "worker_crash":
        other = crash.remote(1.0)
    else:
        other = sleep.remote(1.0)
    first = sleep.remote(0.3)
    long = sleep.remote(8)  # starts when first ends, with quick sent behind it
    fast = quick.remote()
    time.sleep(0.6)
    if freed_by == "actor_killed":
        ray.kill(holder)
    elif freed_by == "lent":
        waiting = lender.remote([fast])  # queued until `other` ends, then blocks on quick
    assert ray.get(fast, timeout=30) == "quick"
    assert time.time() - start < 5.0, "quick waited behind the 8 s task"
    if freed_by == "lent":
        assert ray.get(waiting, timeout=30) == "quick"
    ray.cancel(long, force=True)
    ray.shutdown()


def test_a_follower_given_back_keeps_its_place_in_line(ray1):
    ray = ray1

    @ray.remote
    def child(i):
        time.sleep(0.5)
        return i

    @ray.remote
    def parent(n):
        return sum(ray.get([child.remote(i) for i in range(n)]))

    @ray.remote
    def sleep(t):
        time.sleep(t)

    @ray.remote
    def quick():
        return "quick"

    ray.get(sleep.remote(0))
    start = time.time()
    # parent starts with quick behind it; when parent blocks, quick comes back first in line
    # (before the children parent submitted), as it was queued before them.
    refs = [sleep.remote(0.3), parent.remote(4), quick.remote()]
    assert ray.get(refs[2], timeout=30) == "quick"
    assert time.time() - start < 1.5
    assert ray.get(refs[1], timeout=30) == 6


def test_a_force_cancel_arriving_as_its_task_ends_never_kills_the_next_one(ray1):
    ray = ray1

    @ray.remote(max_retries=0)
    def ending():
        time.sleep(0.1)
        return "a"

    @ray.remote(max_retries=0)
    def behind():
        return "b"

    @ray.remote
    def sleep(t):
        time.sleep(t)

    for lead in (0.02, 0.01, 0.0):
        ray.get(sleep.remote(0))
        a, b = ending.remote(), behind.remote()
        time.sleep(max(0.0, 0.1 - lead))
        ray.cancel(a, force=True)
        try:
            ray.get(a, timeout=30)
        except ray.exceptions.TaskCancelledError:
            pass
        assert ray.get(b, timeout=30) == "b"  # never WorkerCrashedError


def test_a_task_cancelled_while_blocked_leaves_its_worker_able_to_lend(ray1):
    ray = ray1

    @ray.remote(num_cpus=0, max_concurrency=4)
    class Gate:
        def __init__(self):
            import threading

            self.event = threading.Event()

        def wait(self, t):
            return self.event.wait(t)

    @ray.remote
    def waits(gate):
        return ray.get(gate.wait.remote(30))

    @ray.remote
    def leaf():
        return "leaf"

    @ray.remote
    def nested():
        return ray.get(leaf.remote())  # needs the CPU its caller lends while it waits

    gate = Gate.remote()
    blocked = waits.remote(gate)
    time.sleep(1.0)
    ray.cancel(blocked)
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(blocked, timeout=30)
    assert ray.get(nested.remote(), timeout=20) == "leaf"
