"""A worker's main thread reads its own socket while it is idle; while it runs work, its
helper thread reads what arrives meanwhile (embedded runtime, see ``worker_reading``). Each
test checks what a user would see if such a message were left unread: a cancel or a release
never acted on, a background thread's ``get`` that hangs, a worker left running after its
driver was killed; and that plain tasks run one at a time are read by the main thread alone
(the point of the design: no thread hand-off on the plain round trip)."""
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

pytestmark = pytest.mark.embedded_only("the read role is the embedded worker's")


def _helper_reads():
    """Inside a task: how many messages this worker's helper thread has read."""
    from ray_adapter.core import current

    return current()._worker.role.helper_reads


def test_plain_tasks_are_read_by_the_main_thread_and_a_nested_get_reply_by_the_helper(ray1):
    ray = ray1

    @ray.remote
    def plain():
        return os.getpid(), _helper_reads()

    @ray.remote
    def nested():
        before = _helper_reads()
        ray.get(ray.put(1))  # the reply comes while the task runs: the helper reads it
        return os.getpid(), before, _helper_reads()

    ray.get(plain.remote())  # warm: the worker exists, its first messages are read
    results = [ray.get(plain.remote()) for _ in range(10)]  # one at a time: nothing read
    by_pid = {}                                              # while a task runs
    for pid, reads in results:
        by_pid.setdefault(pid, set()).add(reads)
    assert all(len(counts) == 1 for counts in by_pid.values()), by_pid
    pid, before, after = ray.get(nested.remote())
    assert after > before


def test_a_busy_task_is_cancelled_although_nobody_was_reading(ray1, tmp_path):
    ray = ray1
    started = tmp_path / "started"

    @ray.remote
    def spin(path):
        open(path, "w").close()
        end = time.monotonic() + 60
        while time.monotonic() < end:  # pure Python: never blocks, never asks the driver
            pass
        return "ran"

    for force in (False, True):
        if started.exists():
            started.unlink()
        ref = spin.remote(str(started))
        while not started.exists():
            time.sleep(0.01)
        begin = time.monotonic()
        ray.cancel(ref, force=force)
        with pytest.raises((ray.exceptions.TaskCancelledError, ray.exceptions.WorkerCrashedError)):
            ray.get(ref, timeout=20)
        assert time.monotonic() - begin < 10


def test_a_sync_actor_call_cancelled_while_another_runs_is_skipped(ray):
    @ray.remote
    class A:
        def busy(self, seconds):
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                pass
            return "busy"

        def quick(self):
            return "quick"

    a = A.remote()
    ray.get(a.__ray_ready__.remote())
    first = a.busy.remote(1.0)
    second = a.quick.remote()
    time.sleep(0.3)
    ray.cancel(second)
    assert ray.get(first, timeout=30) == "busy"
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(second, timeout=30)


def test_a_background_thread_get_is_answered_while_the_main_thread_waits_on_it(ray):
    @ray.remote
    class A:
        def start(self, ref_list):
            self.box = []
            self.thread = threading.Thread(target=lambda: self.box.append(ray.get(ref_list[0])))
            self.thread.start()

        def join(self):
            self.thread.join(30)  # user code waiting: only the thread's request can lend
            return self.box

    a = A.remote()
    ref = ray.put("value")
    ray.get(a.start.remote([ref]))
    assert ray.get(a.join.remote(), timeout=60) == ["value"]


def test_followers_of_a_busy_task_come_back_to_a_free_cpu(ray):
    ray.shutdown()
    ray.init(num_cpus=2)

    @ray.remote
    def spin(seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass

    @ray.remote
    def quick(i):
        return i

    long_ref = spin.remote(4.0)  # its worker never reads unless nudged
    short = spin.remote(0.3)
    time.sleep(0.1)
    begin = time.monotonic()
    refs = [quick.remote(i) for i in range(6)]  # followers behind the busy tasks
    assert ray.get(refs, timeout=30) == list(range(6))
    assert time.monotonic() - begin < 3.0  # not behind the 4 s task
    ray.get([long_ref, short], timeout=30)


DRIVER = textwrap.dedent("""
    import os, subprocess, sys, time, ray
    ray.init(num_cpus=1)

    @ray.remote
    def busy(mode):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        print(os.getpid(), child.pid, flush=True)
        end = time.monotonic() + 120
        while time.monotonic() < end:
            if mode == "sleep":
                time.sleep(1)

    ref = busy.remote(sys.argv[1])
    time.sleep(120)
""")


@pytest.mark.parametrize("mode", ["spin", "sleep"])
def test_a_killed_driver_ends_a_worker_running_a_long_task(tmp_path, mode):
    import psutil

    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    env = dict(os.environ, RAY_BACKEND="yuanrong")
    proc = subprocess.Popen([sys.executable, str(script), mode], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()  # the worker's output, forwarded: "(busy pid=N) W C"
        pids = [int(p) for p in line.split()[-2:]]
        assert len(pids) == 2, line
        proc.kill()
        proc.wait(timeout=30)
        deadline = time.monotonic() + 20
        alive = pids
        while alive and time.monotonic() < deadline:
            alive = [p for p in pids if psutil.pid_exists(p)
                     and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
            time.sleep(0.1)
        assert alive == []
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
        proc.stderr.close()


def test_a_cancelled_follower_is_answered_while_its_worker_stays_busy(ray1):
    ray = ray1

    @ray.remote
    def spin(seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass
        return "spun"

    busy = spin.remote(6.0)
    behind = [spin.remote(0) for _ in range(4)]  # pipelined to the busy worker
    time.sleep(0.5)
    begin = time.monotonic()
    ray.cancel(behind[-1])
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(behind[-1], timeout=30)
    assert time.monotonic() - begin < 3.0  # answered at once, not after the 6 s task
    assert ray.get(busy, timeout=30) == "spun"


def test_a_result_is_not_held_back_by_a_callback_the_helper_runs(ray, tmp_path):
    # A task leaves a done-callback on a ref's future; the reply comes while the task runs, so
    # the worker's helper reads it and runs the callback, which here waits until the driver
    # has the task's result. The result must go out without waiting for the callback.
    flag = tmp_path / "driver-has-the-result"

    @ray.remote
    def value():
        time.sleep(0.3)
        return 1

    @ray.remote
    def task(refs, flag):
        def callback(_future):
            deadline = time.monotonic() + 30
            while not os.path.exists(flag) and time.monotonic() < deadline:
                time.sleep(0.05)

        refs[0].future().add_done_callback(callback)
        time.sleep(0.8)  # the reply arrives meanwhile
        return "done"

    ref = task.remote([value.remote()], str(flag))
    try:
        assert ray.get(ref, timeout=20) == "done"
    finally:
        flag.touch()


OUTPUT_DRIVER = textwrap.dedent("""
    import sys, ray
    ray.init(num_cpus=1)

    @ray.remote
    def f():
        sys.stdout.write("x" * 200_000)  # no newline: the rest is written once the task ended
        return 1

    assert ray.get(f.remote(), timeout=60) == 1
    open(sys.argv[1], "w").close()
""")


def test_a_result_is_not_held_back_by_output_nobody_reads_yet(tmp_path):
    # The driver's stdout is a pipe its reader leaves full for now: the task's result must not
    # wait behind the worker's write of its last partial line.
    script, done = tmp_path / "driver.py", tmp_path / "got-the-result"
    script.write_text(OUTPUT_DRIVER)
    proc = subprocess.Popen([sys.executable, str(script), str(done)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, RAY_BACKEND="yuanrong"))
    try:
        deadline = time.monotonic() + 30
        while not done.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        got = done.exists()
    finally:
        out, err = proc.communicate(timeout=60)  # read now: the worker's write can finish
    assert got, err[-3000:]
    assert "x" * 1000 in out
