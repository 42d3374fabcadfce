"""What Ray prints and raises for common mistakes and events, with the same exception classes:
unserializable arguments, bad decorator use and option types, num_returns mismatches, the
(raylet) notice of a dead worker, the actor's log prefix, output of a task fired at exit."""
import re
import textwrap
import threading

import pytest

from conftest import run_code


def test_an_unserializable_argument_is_a_type_error_naming_it(ray):
    lock = threading.Lock()

    @ray.remote
    def f(x):
        return 1

    @ray.remote
    class A:
        def __init__(self, x=None):
            pass

        def m(self, x=None):
            return 1

    with pytest.raises(TypeError, match="Could not serialize the argument <unlocked _thread.lock object at 0x[0-9a-f]+> "
                                        "for a task or actor test_messages.*f:"):
        f.remote(lock)
    a = A.remote()
    with pytest.raises(TypeError, match="Could not serialize the argument .*lock.* for a task or actor .*A.m"):
        a.m.remote(x=lock)
    with pytest.raises(TypeError, match="Could not serialize the argument .*lock.* for a task or actor .*A"):
        A.remote(lock)
    with pytest.raises(TypeError, match="Could not serialize the put value .*lock"):
        ray.put(lock)
    assert ray.get(a.m.remote(1)) == 1  # the actor is fine

    @ray.remote
    def returns_a_lock():
        return threading.Lock()

    with pytest.raises(TypeError, match="cannot pickle") as info:
        ray.get(returns_a_lock.remote())
    assert isinstance(info.value, ray.exceptions.RayTaskError)


def test_decorator_misuse_and_option_types_raise_rays_classes(ray):
    with pytest.raises(AssertionError, match="The @ray.remote decorator must be applied either with no arguments"):
        ray.remote(2)
    with pytest.raises(AssertionError, match="must be applied"):
        ray.remote()

    def f():
        return 1

    with pytest.raises(TypeError, match="The type of keyword 'num_cpus' must be \\(<class 'float'>, <class 'int'>"):
        ray.remote(num_cpus="two")(f)
    with pytest.raises(TypeError, match="keyword 'num_cpus'"):
        ray.remote(f).options(num_cpus="two")
    with pytest.raises(ValueError, match="The keyword 'num_returns' only accepts None, a non-negative integer"):
        ray.remote(num_returns=-2)(f)
    with pytest.raises(AssertionError, match="Unexpected keyword argument to @ray.method: 'bogus'"):
        ray.method(bogus=1)


def test_num_returns_mismatches(ray):
    @ray.remote(num_returns=2)
    def one():
        return 1

    @ray.remote(num_returns=2)
    def three():
        return 1, 2, 3

    with pytest.raises(TypeError, match="object of type 'int' has no len\\(\\)") as info:
        ray.get(one.remote()[0])
    assert isinstance(info.value, ray.exceptions.RayTaskError) and "one" in str(info.value)
    with pytest.raises(ValueError, match="Task returned 3 objects, but num_returns=2."):
        ray.get(three.remote()[1])


def _embedded(code):
    return run_code(textwrap.dedent(code), env={"RAY_ADAPTER_RUNTIME": "embedded"}, timeout=120)


def test_lines_of_concurrent_workers_never_interleave_even_unbuffered():
    result = run_code(textwrap.dedent("""
        import ray, sys
        ray.init(num_cpus=2)
        @ray.remote
        class Talker:
            def talk(self, tag):
                for i in range(300):
                    print(tag * 40, i)
                print("last", tag, end="")  # no newline: shown as a line of its own
        a, b = Talker.remote(), Talker.remote()
        ray.get([a.talk.remote("a"), b.talk.remote("b")])
        ray.shutdown()
    """), env={"RAY_ADAPTER_RUNTIME": "embedded", "PYTHONUNBUFFERED": "1"}, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout).splitlines()  # Ray colours prefixes
    assert len(lines) == 602
    for line in lines:  # each whole: "(Talker pid=N) aaaa... i" or "(Talker pid=N) last a"
        prefix, _, text = line.partition(") ")
        assert prefix.startswith("(Talker pid=") and prefix[12:].isdigit(), line
        assert text in ("last a", "last b") or (
            text[:40] in ("a" * 40, "b" * 40) and text[41:].isdigit()), line


def test_a_dead_worker_gets_rays_raylet_notice():
    result = _embedded("""
        import os, ray
        ray.init(num_cpus=1)
        @ray.remote(max_retries=0)
        def crash():
            os._exit(3)
        try:
            ray.get(crash.remote())
        except ray.exceptions.WorkerCrashedError:
            print("crashed")
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "crashed\n"  # the notice goes to stderr, never into the program's output
    # Tagged as Ray tags it: "(raylet)" in yellow (colorama's codes, on a terminal or not).
    assert ("\x1b[33m(raylet)\x1b[0m A worker died or was killed while executing a task by an "
            "unexpected system error.") in result.stderr
    assert "exit code 3" in result.stderr


def test_the_actor_log_prefix_uses_its_repr():
    result = _embedded("""
        import ray
        ray.init(num_cpus=1)
        @ray.remote
        class Named:
            def __init__(self, k):
                self.k = k
            def __repr__(self):
                return f"Named(k={self.k})"
            def hello(self):
                print("hello")
        @ray.remote
        class Plain:
            def hello(self):
                print("hi")
        ray.get([Named.remote(7).hello.remote(), Plain.remote().hello.remote()])
        ray.shutdown()
    """)
    assert result.returncode == 0, result.stderr
    lines = sorted(re.sub(r"\x1b\[[0-9;]*m", "", result.stdout).splitlines())  # Ray colours prefixes
    assert lines[0].startswith("(Named(k=7) pid=") and lines[0].endswith(") hello")
    assert lines[1].startswith("(Plain pid=") and lines[1].endswith(") hi")


@pytest.mark.parametrize("runtime", ["embedded", "yr-local"])
def test_output_of_a_task_fired_at_exit_reaches_the_terminal(runtime):
    if runtime == "yr-local":
        pytest.importorskip("yr")
    result = run_code(textwrap.dedent("""
        import time, ray
        ray.init(num_cpus=2)
        @ray.remote
        def late():
            print("late start", flush=True)
            time.sleep(0.3)
            print("late end", flush=True)
        ray.get(late.remote())
        late.remote()
        print("driver done")
    """), env={"RAY_ADAPTER_RUNTIME": runtime}, timeout=120)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.count("late start") == 2 and out.count("late end") == 2 and "driver done" in out
