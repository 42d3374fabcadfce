"""A task that forks: the child never speaks for the worker (found by an adversarial run).

Before, a child that returned from the task function went back into the worker's loop: the
caller could get the child's result, the child read the worker's messages (the worker then said
"function ... was never registered") and a later get could hang. Now the child gives up the
worker's channel at the fork and exits when it comes back to report (0 after a return, 1 after
an exception); the caller gets the worker's own result and the worker goes on serving.
"""
import asyncio
import multiprocessing
import os
import time

import pytest

pytestmark = pytest.mark.embedded_only("yr local mode runs tasks as threads of the driver process")


def _wait_child(pid, timeout=20.0):
    """The exit code of child ``pid`` of this process, or 'running' if it does not end."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, 9)
    return "running"


def _fork_and_leave(how):
    """Fork; the child leaves the task as ``how`` says, the parent reports the child's status."""
    pid = os.fork()
    if pid == 0:
        if how == "return":
            return "child"
        if how == "raise":
            raise ValueError("from the child")
        if how == "exit":
            os._exit(3)
        if how == "ray":  # the child cannot call Ray: it says so instead of waiting forever
            import ray_adapter.ray as ray

            try:
                ray.put(1)
            except RuntimeError as exc:
                os._exit(7 if "forked" in str(exc) else 8)
            os._exit(9)
    time.sleep(0.3)  # the child returns first: it used to win the race for the result
    return "parent", os.getpid(), _wait_child(pid)


@pytest.mark.parametrize("how, status", [("return", 0), ("raise", 1), ("exit", 3), ("ray", 7)])
def test_a_forked_child_never_reports_for_the_worker(ray1, how, status):
    ray = ray1
    fork = ray.remote(max_retries=0)(_fork_and_leave)

    @ray.remote
    def pid():
        return os.getpid()

    for _ in range(2):
        answer, worker_pid, child_status = ray.get(fork.remote(how), timeout=60)
        assert (answer, child_status) == ("parent", status)
        # The only worker (1 CPU) still serves, itself (the child used to take its place).
        assert set(ray.get([pid.remote() for _ in range(4)], timeout=60)) == {worker_pid}


def test_forks_in_actors_of_every_kind(ray):
    @ray.remote
    class Plain:
        def fork(self):
            return _fork_and_leave("return")

    @ray.remote(max_concurrency=3)
    class Threaded:
        def fork(self):
            return _fork_and_leave("return")

    @ray.remote
    class Async:
        async def fork(self):
            pid = os.fork()
            if pid == 0:
                return "child"  # the child's event loop comes back to report, and exits
            await asyncio.sleep(0.3)
            return "parent", os.getpid(), _wait_child(pid)

    for cls in (Plain, Threaded, Async):
        actor = cls.remote()
        for _ in range(2):
            answer, _, child_status = ray.get(actor.fork.remote(), timeout=60)
            assert (answer, child_status) == ("parent", 0), cls


def test_a_forked_child_of_a_streaming_task_sends_no_items(ray):
    @ray.remote
    def stream():
        pid = os.fork()
        if pid == 0:
            yield "child"
            return
        time.sleep(0.3)
        yield "parent"
        yield _wait_child(pid)

    assert [ray.get(ref, timeout=60) for ref in stream.remote()] == ["parent", 0]


def _square(x):
    return x * x


def test_multiprocessing_with_fork_in_a_task_still_works(ray):
    @ray.remote
    def pool_map():
        with multiprocessing.get_context("fork").Pool(2) as pool:
            return pool.map(_square, range(6))

    @ray.remote
    def process():
        queue = multiprocessing.get_context("fork").SimpleQueue()
        child = multiprocessing.get_context("fork").Process(target=queue.put, args=("from child",))
        child.start()
        child.join(20)
        return queue.get(), child.exitcode

    assert ray.get(pool_map.remote(), timeout=60) == [0, 1, 4, 9, 16, 25]
    assert ray.get(process.remote(), timeout=60) == ("from child", 0)
    assert ray.get(pool_map.remote(), timeout=60) == [0, 1, 4, 9, 16, 25]
