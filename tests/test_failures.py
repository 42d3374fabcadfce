"""Crashes, cancellation and process hygiene: Ray's exceptions, no hang, no orphan."""
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import process_alive, run_code, run_python


def _wait_gone(pids, timeout=10):
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if process_alive(p)]
        time.sleep(0.02)
    return alive


@pytest.mark.embedded_only('yr local mode runs tasks and actors as threads of the driver process: os._exit in a task would end the test process')
def test_worker_crash_without_retries_raises_worker_crashed(ray):
    @ray.remote(max_retries=0)
    def die():
        os._exit(1)

    with pytest.raises(ray.exceptions.WorkerCrashedError):
        ray.get(die.remote(), timeout=20)

    @ray.remote
    def fine():
        return "ok"

    assert ray.get(fine.remote()) == "ok"  # the pool recovered


@pytest.mark.embedded_only('yr local mode runs tasks and actors as threads of the driver process: os._exit in a task would end the test process')
def test_worker_crash_is_retried(ray, tmp_path):
    marker = str(tmp_path / "died-once")

    @ray.remote(max_retries=1)
    def die_once(path):
        if not os.path.exists(path):
            open(path, "w").close()
            os._exit(1)
        return "second try"

    assert ray.get(die_once.remote(marker), timeout=20) == "second try"


@pytest.mark.embedded_only('yr local mode runs tasks and actors as threads of the driver process: os._exit in a method would end the test process')
def test_actor_crash_raises_actor_died(ray):
    @ray.remote
    class Crasher:
        def crash(self):
            os._exit(3)

        def ping(self):
            return "pong"

    c = Crasher.remote()
    assert ray.get(c.ping.remote()) == "pong"
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(c.crash.remote(), timeout=20)
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(c.ping.remote(), timeout=20)


@pytest.mark.embedded_only('yr local mode cannot interrupt a running task (yr.cancel applies to queued stateless tasks only)')
def test_cancel_pending_running_and_force(ray, tmp_path):
    started = tmp_path / "started"

    @ray.remote(num_cpus=2)
    def spin(path):
        open(path, "w").close()
        while True:
            time.sleep(0.01)

    @ray.remote(num_cpus=2)
    def never():
        return "ran"

    running = spin.remote(str(started))
    deadline = time.monotonic() + 20
    while not started.exists():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    pending = never.remote()
    ray.cancel(pending)
    with pytest.raises(ray.exceptions.TaskCancelledError) as info:
        ray.get(pending, timeout=10)
    assert not isinstance(info.value, ray.exceptions.RayTaskError)
    assert (str(info.value), info.value.task_id) == ("", None)  # as Ray: no id, no text
    ray.cancel(running)
    with pytest.raises(ray.exceptions.TaskCancelledError) as info:
        ray.get(running, timeout=10)
    assert type(info.value).__name__ == "RayTaskError(TaskCancelledError)"
    text = str(info.value)  # as Ray's: the task's frames, then the cancellation, no runtime frames
    assert "in spin" in text and "ray_adapter" not in text, text
    assert text.rstrip().endswith(
        f"ray.exceptions.TaskCancelledError: Task: TaskID({running.hex()[:48]}) was cancelled."), text

    started.unlink()
    forced = spin.remote(str(started))
    while not started.exists():
        time.sleep(0.01)
    ray.cancel(forced, force=True)
    with pytest.raises(ray.exceptions.TaskCancelledError) as info:
        ray.get(forced, timeout=10)
    assert str(info.value) == ""
    ray.cancel(ray.put(1))  # finished objects: nothing to do
    assert ray.get(never.remote(), timeout=10) == "ran"



@pytest.mark.embedded_only('yr local mode cannot interrupt a running task (yr.cancel applies to queued stateless tasks only)')
def test_a_cancel_raises_keyboard_interrupt_in_the_running_task(ray, tmp_path):
    """Ray's ray.cancel: "When force=False, a KeyboardInterrupt is raised in Python": a task's
    ``except KeyboardInterrupt`` cleanup runs (it used to get a private BaseException)."""
    seen = tmp_path / "seen"

    @ray.remote
    def sleeper(path):
        try:
            open(path, "w").close()
            time.sleep(30)
        except KeyboardInterrupt:
            with open(path, "w") as f:
                f.write("interrupted")
            raise

    ref = sleeper.remote(str(seen))
    deadline = time.monotonic() + 30
    while not seen.exists():  # it runs
        assert time.monotonic() < deadline
        time.sleep(0.01)
    ray.cancel(ref)
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(ref, timeout=20)
    assert seen.read_text() == "interrupted"


@pytest.mark.embedded_only('yr local mode cannot interrupt a running task (yr.cancel applies to queued stateless tasks only)')
@pytest.mark.parametrize("recursive", [True, False])
def test_cancel_recursive_cancels_the_tasks_the_task_submitted(ray, tmp_path, recursive):
    # Ray's default (recursive=True): the children a cancelled task submitted are cancelled
    # too, running or queued, and their CPUs come back; recursive=False leaves them running.
    @ray.remote(max_retries=0)
    def child(path, i):
        open(f"{path}-{i}", "w").close()
        time.sleep(30)
        return i

    @ray.remote(max_retries=0, num_cpus=0)
    def parent(path):
        return ray.get([child.remote(path, i) for i in range(3)])  # 2 run, 1 waits for a CPU

    base = str(tmp_path / "child")
    p = parent.remote(base)
    deadline = time.monotonic() + 30
    while not (os.path.exists(base + "-0") and os.path.exists(base + "-1")):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    ray.cancel(p, recursive=recursive)
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(p, timeout=20)

    @ray.remote(num_cpus=2)
    def whole_node():
        return "ran"

    if recursive:
        assert ray.get(whole_node.remote(), timeout=15) == "ran"  # the children's CPUs are back
        time.sleep(0.5)
        assert not os.path.exists(base + "-2")  # the queued child never started
    else:
        ready, _ = ray.wait([whole_node.remote()], timeout=2)
        assert not ready  # the children still hold both CPUs



class _NotRebuilt(Exception):
    def __init__(self, code, message):  # its pickle (args=(message,)) cannot rebuild it
        super().__init__(message)
        self.code = code


class _NotPickled(Exception):
    def __reduce__(self):
        raise TypeError("this exception does not pickle")


@pytest.mark.embedded_only("yr local mode runs tasks as threads of the driver: the exception never leaves the process")
def test_an_exception_that_cannot_travel_is_reported_as_ray_reports_it(ray):
    @ray.remote(max_retries=0)
    def not_rebuilt():
        raise _NotRebuilt(1, "bad code")

    @ray.remote(max_retries=0)
    def not_pickled():
        raise _NotPickled("kept as text")

    # Pickles, but cannot be rebuilt: a plain UnserializableException quoting the task's error.
    with pytest.raises(ray.exceptions.UnserializableException) as info:
        ray.get(not_rebuilt.remote(), timeout=30)
    assert not isinstance(info.value, ray.exceptions.RayTaskError)
    text = str(info.value)
    assert text.startswith("Failed to deserialize exception. Refer to https://docs.ray.io/")
    assert "Original exception:\nray.exceptions.RayTaskError: \x1b[36mray::not_rebuilt()\x1b[39m" in text
    assert "_NotRebuilt: bad code" in text
    # Does not pickle at all: a plain RayTaskError with the task's text.
    with pytest.raises(ray.exceptions.RayTaskError) as info:
        ray.get(not_pickled.remote(), timeout=30)
    assert type(info.value) is ray.exceptions.RayTaskError
    assert "_NotPickled: kept as text" in str(info.value)


def test_cancel_argument_checks(ray):
    @ray.remote
    class A:
        pass

    with pytest.raises(TypeError, match="ray.cancel\\(\\) only supported for object refs"):
        ray.cancel(A.remote())
    with pytest.raises(ValueError, match="ray.kill\\(\\) only supported for actors"):
        ray.kill(ray.put(1))


DRIVER = textwrap.dedent("""
    import os, sys, time, ray
    ray.init(num_cpus=2)

    @ray.remote
    class A:
        def pid(self):
            return os.getpid()

    @ray.remote
    def pid():
        return os.getpid()

    actors = [A.remote() for _ in range(2)]
    pids = ray.get([a.pid.remote() for a in actors] + [pid.remote()])
    print(" ".join(map(str, pids)), flush=True)
    mode = sys.argv[1]
    if mode == "exception":
        raise RuntimeError("driver failed")
    if mode == "wait":
        time.sleep(60)
""")


@pytest.mark.parametrize("mode", ["normal", "exception"])
def test_driver_exit_leaves_no_worker(tmp_path, mode):
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    result = run_code(f"import runpy, sys; sys.argv = ['d', {mode!r}]; runpy.run_path({str(script)!r}, run_name='__main__')",
                      timeout=60)
    pids = [int(p) for p in result.stdout.split()]
    assert len(pids) == 3
    assert _wait_gone(pids) == []
    if mode == "exception":
        assert "driver failed" in result.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_driver_killed_leaves_no_worker(tmp_path, sig):
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    env = {k: v for k, v in os.environ.items()}
    env["RAY_BACKEND"] = "yuanrong"
    proc = subprocess.Popen([sys.executable, str(script), "wait"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    pids = [int(p) for p in line.split()]
    assert len(pids) == 3
    proc.send_signal(sig)
    proc.wait(timeout=30)
    assert _wait_gone(pids) == []
    proc.stdout.close()
    proc.stderr.close()


def test_worker_output_is_forwarded_with_prefix():
    code = textwrap.dedent("""
        import ray
        ray.init(num_cpus=1)
        @ray.remote
        def hello():
            print("hello from task")
        @ray.remote
        class Greeter:
            def hi(self):
                print("hi from actor")
        ray.get(hello.remote())
        g = Greeter.remote()
        ray.get(g.hi.remote())
        ray.shutdown()
    """)
    result = run_code(code)
    assert result.returncode == 0, result.stderr
    lines = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout).splitlines()  # Ray colours prefixes
    assert any(l.startswith("(hello pid=") and l.endswith(") hello from task") for l in lines), lines
    assert any(l.startswith("(Greeter pid=") and l.endswith(") hi from actor") for l in lines), lines
    quiet = run_code(code.replace("ray.init(num_cpus=1)", "ray.init(num_cpus=1, log_to_driver=False)"))
    assert quiet.stdout == ""


_RETRY_MAIN = '''
import ray
ray.init(num_cpus=1)


class UserError(Exception):
    pass


class Other(Exception):
    pass


@ray.remote
class Counter:
    def __init__(self):
        self.n = 0

    def hit(self):
        self.n += 1
        return self.n


@ray.remote(max_retries=2, retry_exceptions=[UserError])
def flaky(counter, fail_times, exc_name):
    n = ray.get(counter.hit.remote())
    if n <= fail_times:
        raise {"UserError": UserError, "Other": Other}[exc_name](f"attempt {n}")
    return f"ok after {n}"


for fail_times, exc in ((1, "UserError"), (5, "UserError"), (1, "Other")):
    c = Counter.remote()
    try:
        print(fail_times, exc, ray.get(flaky.remote(c, fail_times, exc)))
    except ray.exceptions.RayTaskError as e:
        print(fail_times, exc, type(e).__name__, isinstance(e, UserError), isinstance(e, Other),
              str(e).splitlines()[-1])
    print("attempts", ray.get(c.hit.remote()) - 1)


@ray.remote(max_task_retries=2)
class A:
    def __init__(self):
        self.n = 0

    @ray.method(retry_exceptions=[UserError])
    def m(self, fail_times):
        self.n += 1
        if self.n <= fail_times:
            raise UserError(f"call {self.n}")
        return f"ok after {self.n}"


for fail_times in (1, 5):
    a = A.remote()
    try:
        print("actor", fail_times, ray.get(a.m.remote(fail_times)))
    except ray.exceptions.RayTaskError as e:
        print("actor", fail_times, type(e).__name__, isinstance(e, UserError), str(e).splitlines()[-1])
'''

# Ray 2.60's stdout for _RETRY_MAIN (without its '(raylet) Task ... failed' retry notices).
_RETRY_MAIN_RAY = """\
1 UserError ok after 2
attempts 2
5 UserError RayTaskError(UserError) True False UserError: attempt 3
attempts 3
1 Other RayTaskError(Other) False True Other: attempt 1
attempts 1
actor 1 ok after 2
actor 5 RayTaskError(UserError) True UserError: call 3
"""


@pytest.mark.parametrize("runtime", ["embedded", "yr-local"])
def test_retry_exceptions_naming_a_class_of_the_main_script(tmp_path, runtime):
    # retry_exceptions=[UserError] (tasks, and @ray.method on an actor) with UserError defined
    # in the script run as __main__: retried while the exception matches, then
    # RayTaskError(UserError), as in Ray. The workers crashed (exit 1) unpickling the class.
    from conftest import _yr_available

    if runtime == "yr-local" and not _yr_available():
        pytest.skip("yr-local: the openYuanrong SDK is not installed")
    script = tmp_path / "retry_main.py"
    script.write_text(_RETRY_MAIN)
    result = run_python([str(script)], env={"RAY_ADAPTER_RUNTIME": runtime}, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == _RETRY_MAIN_RAY
    if runtime == "embedded":  # (the yuanrong backend prints no retry notices)
        assert "Task flaky failed. There are 2 retries remaining" in result.stderr


def test_a_constructor_or_call_given_a_failed_or_cancelled_argument_fails_as_in_ray(ray):
    """The actor's creation fails quoting its argument's error under Ray's
    "ray::A.__init__() ... At least one of the input arguments ..." header; a call given a
    cancelled task's result fails at once with RayTaskError(TaskCancelledError) (yr-local
    handed the dependent the value the cancelled task still produced)."""
    import time

    @ray.remote
    def bad():
        raise ValueError("ctor arg")

    @ray.remote
    class Holder:
        def __init__(self, value):
            self.value = value

        def get(self):
            return self.value

    holder = Holder.remote(bad.remote())
    with pytest.raises(ray.exceptions.ActorDiedError) as info:
        ray.get(holder.get.remote(), timeout=30)
    text = str(info.value)
    assert "error raised in its creation task, \x1b[36mray::Holder.__init__()\x1b[39m" in text
    assert "At least one of the input arguments for this task could not be computed:" in text
    assert "ValueError: ctor arg" in text

    @ray.remote
    def slow():
        time.sleep(5)
        return "done"

    @ray.remote
    def use(x):
        return x

    running = slow.remote()
    time.sleep(0.5)
    ray.cancel(running)
    start = time.monotonic()
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(use.remote(running), timeout=30)
    assert time.monotonic() - start < 4  # not after the cancelled task ran to its end
