"""Regression tests for what the one-class, one-lock embedded runtime got wrong under
concurrency (issue 6): each reproduces what a user or reviewer saw, with real workers."""
import json
import os
import signal
import sys
import textwrap
import threading
import time

import pytest

from conftest import when_restarted, process_alive, run_code

THREADS = "yr local mode runs tasks as threads of the driver process"


def test_actor_waiting_for_a_cpu_starts_when_the_task_holding_it_ends(ray_module):
    ray = ray_module
    ray.init(num_cpus=1)

    @ray.remote
    def hold():
        time.sleep(1.0)
        return "task done"

    @ray.remote
    class A:
        def ping(self):
            return "pong"

    running = hold.remote()
    time.sleep(0.2)
    actor = A.options(num_cpus=1).remote()
    assert ray.get(running, timeout=30) == "task done"
    assert ray.get(actor.ping.remote(), timeout=30) == "pong"


def test_threads_of_a_worker_submitting_the_same_new_function_lose_no_cpu(ray):
    @ray.remote
    def fan_out(rounds, width):
        import threading as th

        results = []
        for r in range(rounds):
            @ray.remote
            def fresh(i, r=r):  # a new function (new key) every round
                return i + r

            barrier = th.Barrier(width)
            out = [None] * width

            def submit(i):
                barrier.wait()
                out[i] = fresh.remote(i)

            threads = [th.Thread(target=submit, args=(i,)) for i in range(width)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            results.append(sum(ray.get(out)))
        return results

    expected = [sum(range(6)) + 6 * r for r in range(5)]
    assert ray.get(fan_out.remote(5, 6), timeout=60) == expected
    deadline = time.monotonic() + 10
    while ray.available_resources().get("CPU") != 2.0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ray.available_resources().get("CPU") == 2.0  # nothing reserved and never released


@pytest.mark.embedded_only("stops an actor's worker process with SIGSTOP")
def test_a_stalled_worker_does_not_stall_other_work(ray):
    @ray.remote
    class Sink:
        def pid(self):
            return os.getpid()

        def take(self, blob):
            return len(blob)

    @ray.remote
    def quick(i):
        return i

    sink = Sink.remote()
    pid = ray.get(sink.pid.remote())
    os.kill(pid, signal.SIGSTOP)  # its socket stops being read: sends to it would block
    try:
        blob = b"x" * (900 * 1024)  # below the shared-memory threshold: goes through the socket
        start = time.monotonic()
        refs = [sink.take.remote(blob) for _ in range(40)]  # ~36 MB queued for a stopped reader
        submit_s = time.monotonic() - start
        assert ray.get([quick.remote(i) for i in range(20)], timeout=30) == list(range(20))
        assert submit_s < 10  # .remote() returned: callers never wait for a slow peer
    finally:
        os.kill(pid, signal.SIGCONT)
    assert ray.get(refs, timeout=60) == [len(blob)] * 40


@pytest.mark.embedded_only(THREADS)
def test_subprocesses_of_tasks_die_when_the_driver_is_killed(tmp_path):
    pids = tmp_path / "pids"
    code = textwrap.dedent(f"""
        import os, subprocess, sys, time, ray
        ray.init(num_cpus=1)

        @ray.remote
        def start_children():
            plain = subprocess.Popen(["sleep", "300"])
            detached = subprocess.Popen(["sleep", "301"], start_new_session=True)
            return plain.pid, detached.pid

        plain, detached = ray.get(start_children.remote())
        with open({str(pids)!r}, "w") as fh:
            fh.write(f"{{plain}} {{detached}}")
        print("ready", flush=True)
        time.sleep(300)
    """)
    import subprocess

    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_ADAPTER_RUNTIME")}
    env["RAY_BACKEND"] = "yuanrong"
    driver = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              env=env, cwd="/")
    try:
        assert driver.stdout.readline().strip() == "ready"
        children = [int(p) for p in pids.read_text().split()]
        assert all(process_alive(p) for p in children)
        driver.send_signal(signal.SIGKILL)
        driver.wait(10)
        deadline = time.monotonic() + 10
        while any(process_alive(p) for p in children) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(process_alive(p) for p in children)
    finally:
        if driver.poll() is None:
            driver.kill()


def test_concurrent_creations_of_one_name_make_one_actor(ray):
    @ray.remote
    class Named:
        def ping(self):
            return "pong"

    barrier = threading.Barrier(8)
    outcomes = []

    def create():
        barrier.wait()
        try:
            outcomes.append(Named.options(name="only-one").remote())
        except ValueError as err:  # ActorAlreadyExistsError is a ValueError
            outcomes.append(err)

    threads = [threading.Thread(target=create) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    handles = [o for o in outcomes if not isinstance(o, Exception)]
    errors = [o for o in outcomes if isinstance(o, Exception)]
    assert len(handles) == 1
    assert len(errors) == 7 and all(isinstance(e, ray.exceptions.ActorAlreadyExistsError) for e in errors)
    assert ray.get(ray.get_actor("only-one").ping.remote()) == "pong"


def test_later_tasks_run_after_cancelling_a_running_one(ray):
    @ray.remote
    def slow():
        time.sleep(1.5)
        return "slow"

    @ray.remote
    def echo(x):
        return x

    running = slow.remote()
    time.sleep(0.3)
    ray.cancel(running)
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(running, timeout=30)
    assert ray.get(echo.remote(3), timeout=30) == 3
    assert ray.get([echo.remote(i) for i in range(4)], timeout=30) == [0, 1, 2, 3]


def test_polling_wait_leaves_no_callbacks_behind(ray):
    @ray.remote
    def slow():
        time.sleep(3)
        return 1

    ref = slow.remote()
    for _ in range(2000):
        ready, _ = ray.wait([ref], timeout=0)
        assert not ready
    from ray_adapter import core

    backend = core.current()
    if backend.backend_name == "yuanrong":
        future = backend.objects._objects[ref._id].future
        assert len(future._done_callbacks) <= 2  # settle + at most one live waiter
    else:
        assert backend.objects._objects[ref._id].waiters in (None, [])


def test_nested_gets_and_futures_start_no_thread_each(ray):
    @ray.remote
    def leaf(i):
        time.sleep(0.05)
        return i

    @ray.remote
    def parent(n):
        return sum(ray.get([leaf.remote(i) for i in range(n)]))

    from ray_adapter import core

    # yr's local mode runs tasks on its own (growing) thread pool: count only on embedded,
    # and there not the one reader thread each worker process has (blocked parents make the
    # pool start more workers, as Ray's does).
    counted = core.current().backend_name == "embedded"

    def threads():
        return [t.name for t in threading.enumerate()
                if not t.name.startswith(("ray-adapter-worker-", "ray-adapter-prestart"))]

    before = threads()
    refs = [leaf.remote(i) for i in range(300)]
    futures = [r.future() for r in refs]
    assert not counted or len(threads()) <= len(before) + 1
    assert [f.result(timeout=60) for f in futures] == list(range(300))
    assert ray.get([parent.remote(10) for _ in range(20)], timeout=60) == [45] * 20
    assert not counted or len(threads()) <= len(before) + 1, threads()


def _damaging(ray, tmp_path, damage):
    """Submit a task that, once the driver waits in its ``get``, writes ``damage`` on its
    worker's socket to the driver and then stalls: "garbage" (a frame that does not decode),
    "too_many_fds" (more descriptors than a frame may carry), "header" (3 of a frame header's
    8 bytes), "body" (a header announcing 200 MB, then 100 of them). Returns its ref once it
    runs on its worker: a ``get`` of it alone then reads that worker's socket itself."""
    started = tmp_path / "started"

    @ray.remote(max_retries=0)
    def damaged(damage):
        import array
        import socket as sk

        from ray_adapter import core

        started.touch()
        time.sleep(0.5)  # the driver is waiting in its get by now
        sock = core.current()._worker.channel.sock
        if damage == "garbage":
            sock.sendall(b"\x00\x00\x00\x05\x00\x00\x00\x00" + b"\xc1" * 5)
        elif damage == "too_many_fds":
            fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(60)]
            sock.sendmsg([b"\x00"], [(sk.SOL_SOCKET, sk.SCM_RIGHTS, array.array("i", fds))])
        elif damage == "header":
            sock.sendall(b"\x00\x00\x00")
        else:
            sock.sendall((200 << 20).to_bytes(4, "big") + b"\x00" * 4 + b"x" * 100)
        time.sleep(30)
        return "not reached"

    ref = damaged.remote(damage)
    deadline = time.monotonic() + 30
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return ref


@pytest.mark.embedded_only("writes garbage on a worker's socket to the driver")
@pytest.mark.parametrize("reader", ["caller", "reader_thread"])
@pytest.mark.parametrize("damage", ["garbage", "too_many_fds"])
def test_a_worker_that_breaks_the_protocol_fails_its_task_instead_of_hanging(ray, damage, reader, tmp_path):
    """Whichever thread of the driver reads the broken stream -- the caller of a ``get`` of
    the one task (it reads that worker's reply itself: ``driver_reading``) or the worker's
    reader thread (a ``get`` of two refs) -- the task fails with WorkerCrashedError, as a
    worker lost mid-task does. (A caller that read undecodable bytes raised msgspec's
    DecodeError from ``ray.get``.)"""
    @ray.remote
    def fine():
        return "fine"

    ref = _damaging(ray, tmp_path, damage)
    with pytest.raises(ray.exceptions.WorkerCrashedError):
        if reader == "caller":
            ray.get(ref, timeout=30)
        else:
            ray.get([ref, fine.remote()], timeout=30)
    assert ray.get(fine.remote(), timeout=30) == "fine"


@pytest.mark.embedded_only("writes part of a frame on a worker's socket to the driver")
@pytest.mark.parametrize("part", ["header", "body"])
def test_a_get_keeps_its_timeout_while_a_workers_frame_is_cut_short(ray, part, tmp_path):
    """A worker that stops in the middle of a frame (a process stopped or wedged mid-write):
    the ``get`` of its task, which reads that worker's socket itself, still times out on time
    and the driver goes on. (It waited in a blocking read for the rest of the frame, past its
    timeout and Ctrl-C.)"""
    @ray.remote
    def fine():
        return "fine"

    ref = _damaging(ray, tmp_path, part)
    start = time.monotonic()
    with pytest.raises(ray.exceptions.GetTimeoutError):
        ray.get(ref, timeout=2)
    assert time.monotonic() - start < 6
    assert ray.get(fine.remote(), timeout=30) == "fine"
    ray.cancel(ref, force=True)


@pytest.mark.embedded_only(THREADS)
def test_in_flight_call_to_a_restarting_actor_raises_actor_unavailable(ray):
    @ray.remote(max_restarts=1, max_concurrency=2)
    class Phoenix:
        def slow(self):
            time.sleep(5)
            return "slow"

        def die(self):
            os._exit(1)

        def ping(self):
            return "pong"

    p = Phoenix.remote()
    assert ray.get(p.ping.remote()) == "pong"
    in_flight = p.slow.remote()
    time.sleep(0.3)
    p.die.remote()
    with pytest.raises(ray.exceptions.ActorUnavailableError) as info:
        ray.get(in_flight, timeout=30)
    assert isinstance(info.value, ray.exceptions.RayActorError)
    assert "The task may or may not have been executed on the actor" in str(info.value)
    assert when_restarted(ray, p.ping.remote) == "pong"  # calls after the restart are served


@pytest.mark.embedded_only(THREADS)
def test_task_retries_are_logged_as_ray_logs_them(tmp_path):
    marker = tmp_path / "crashed"
    code = textwrap.dedent(f"""
        import os, ray
        ray.init(num_cpus=1)

        @ray.remote(max_retries=2)
        def flaky():
            if not os.path.exists({str(marker)!r}):
                open({str(marker)!r}, "w").close()
                os._exit(1)
            return "ok"

        @ray.remote(max_retries=1, retry_exceptions=True)
        def raises_once(path):
            if not os.path.exists(path):
                open(path, "w").close()
                raise ValueError("first try")
            return "ok too"

        print(ray.get(flaky.remote()), ray.get(raises_once.remote({str(marker) + '2'!r})))
    """)
    result = run_code(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok ok too"
    assert "Task flaky failed. There are 2 retries remaining, so the task will be retried." in result.stderr
    assert "Task raises_once failed. There are 1 retries remaining" in result.stderr
    assert "ValueError: first try" in result.stderr
    # As Ray words a user exception's retry: the failed call's header, then its frames.
    assert ("\x1b[33m(raylet)\x1b[0m Task raises_once failed. There are 1 retries remaining, so "
            "the task will be retried. Error: User exception:\n\x1b[36mray::raises_once()\x1b[39m (pid=") \
        in result.stderr, result.stderr


@pytest.mark.embedded_only("the worker template process is the embedded runtime's")
def test_the_template_ends_by_itself_at_shutdown(ray):
    """The template exits when the driver closes its control socket; a close() that left the
    socket open in the kernel (a reader thread blocked on it) made every shutdown wait 2 s and
    then kill it."""
    from ray_adapter import core

    template = core.current().pool._zygote._proc
    ray.shutdown()
    assert template.returncode == 0, f"the template was killed ({template.returncode})"


@pytest.mark.embedded_only("the worker template process is the embedded runtime's")
def test_workers_are_forked_from_the_template_and_start_without_it(ray):
    import psutil

    from ray_adapter import core

    @ray.remote
    class A:
        def where(self):
            return os.getpid(), os.getppid(), os.getsid(0)

    pid, parent, session = ray.get(A.remote().where.remote())
    template = core.current().pool._zygote
    assert parent == template._proc.pid  # forked from the pre-imported template
    assert session == pid  # in a session of its own: its process group dies with it
    template._proc.kill()  # without the template, workers are fresh interpreters again
    template._proc.wait()
    actors = [A.remote() for _ in range(4)]  # more than the pool has idle: new ones start
    pids = ray.get([a.where.remote() for a in actors], timeout=60)
    assert any(psutil.Process(p).ppid() == os.getpid() for p, _, _ in pids)


@pytest.mark.embedded_only("fate sharing and force-kill are the embedded runtime's")
def test_tasks_of_a_dead_owner_are_cancelled_and_give_their_cpus_back(ray, tmp_path):
    """As Ray: when the worker that submitted tasks dies, its unfinished tasks are cancelled
    (they kept running and holding CPUs before)."""
    marker = tmp_path / "owner.pid"

    @ray.remote(num_cpus=1)
    def child():
        time.sleep(3)

    @ray.remote(num_cpus=0, max_retries=0)
    def owner(path):
        refs = [child.remote() for _ in range(10)]
        with open(path, "w") as fh:
            fh.write(str(os.getpid()))
        ray.get(refs)

    ref = owner.remote(str(marker))
    deadline = time.monotonic() + 60
    while not marker.exists() or not marker.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(int(marker.read_text()), signal.SIGKILL)
    with pytest.raises(ray.exceptions.WorkerCrashedError):
        ray.get(ref, timeout=60)
    start = time.monotonic()
    assert ray.get(ray.remote(num_cpus=2)(lambda: 1).remote(), timeout=60) == 1
    # ten 3 s children on 2 CPUs would hold them ~15 s; cancelled, the CPUs are free at once
    assert time.monotonic() - start < 10


@pytest.mark.embedded_only("fate sharing and force-kill are the embedded runtime's")
def test_force_cancel_ends_a_task_that_holds_the_gil(ray):
    """A task looping in C code with the GIL held cannot end itself: force=True kills its
    worker, as in Ray (the cancel was never carried out before)."""
    @ray.remote(max_retries=0)
    def hog():
        return sum(range(10 ** 11))

    ref = hog.remote()
    time.sleep(1)
    ray.cancel(ref, force=True)
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(ref, timeout=30)
    assert ray.get(ray.remote(num_cpus=2)(lambda: 2).remote(), timeout=30) == 2


_PRELOAD_PROBE = """
import json, sys
import torch, ray
ray.init(num_cpus=2)

@ray.remote
def modules():
    return "torch" in sys.modules  # a task that never touches torch

@ray.remote(num_cpus=1)
class Threads:
    def count(self):
        import torch
        return torch.get_num_threads()

one = Threads.options(runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}}).remote()
print(json.dumps([ray.get(modules.remote()), ray.get(one.count.remote())]))
"""


@pytest.mark.parametrize("named, preloaded", [(None, True), ("", False)])
def test_workers_start_with_the_modules_the_driver_imported(named, preloaded):
    """The embedded runtime's worker template imports torch when the driver has (an RL
    worker group then starts without paying for it again), unless RAY_ADAPTER_PRELOAD_MODULES
    says otherwise; a worker given OMP_NUM_THREADS still gets that many torch threads, though
    torch read the variable when the template imported it."""
    pytest.importorskip("torch")
    env = {} if named is None else {"RAY_ADAPTER_PRELOAD_MODULES": named}
    out = run_code(_PRELOAD_PROBE, env=env, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [preloaded, 1]
