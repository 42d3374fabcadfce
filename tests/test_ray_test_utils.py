"""Ray's test helpers served by the adapter (``ray._common.test_utils``,
``ray._private.test_utils``): the actors coordinate real tasks, the driver runners start real
interpreters that get the adapter through RAY_BACKEND, the waits watch real processes and
the runtime's State API."""
import asyncio
import os
import subprocess
import sys
import time

import psutil
import pytest

from conftest import run_code


@pytest.fixture
def tu(ray):
    from ray_adapter.ray._common import test_utils

    return test_utils


@pytest.fixture
def ptu(ray):
    from ray_adapter.ray._private import test_utils

    return test_utils


def test_signal_actor_blocks_tasks_until_sent(ray, tu):
    signal = tu.SignalActor.remote()

    @ray.remote
    def waiter(s):
        ray.get(s.wait.remote())
        return "released"

    refs = [waiter.remote(signal) for _ in range(2)]
    tu.wait_for_condition(lambda: ray.get(signal.cur_num_waiters.remote()) == 2)
    ready, _ = ray.wait(refs, timeout=0.3)
    assert ready == []
    ray.get(signal.send.remote())
    assert ray.get(refs, timeout=30) == ["released", "released"]
    assert ray.get(signal.cur_num_waiters.remote()) == 0
    # send(clear=True) wakes the waiters of the moment and resets the event.
    ray.get(signal.send.remote(clear=True))
    late = signal.wait.remote()
    assert ray.wait([late], timeout=0.3)[0] == []
    assert ray.get(signal.wait.remote(should_wait=False)) is None
    ray.get(signal.send.remote())
    assert ray.get(late, timeout=30) is None


def test_semaphore_actor_counts_holders(ray, tu):
    sema = tu.Semaphore.remote(value=2)
    ray.get([sema.acquire.remote(), sema.acquire.remote()])
    assert ray.get(sema.locked.remote()) is True
    third = sema.acquire.remote()
    assert ray.wait([third], timeout=0.3)[0] == []
    ray.get(sema.release.remote())
    ray.get(third, timeout=30)
    assert ray.get(sema.locked.remote()) is True


def test_wait_for_condition_retries_and_names_the_last_error():
    from ray_adapter.ray._common.test_utils import wait_for_condition

    calls = []
    wait_for_condition(lambda n: calls.append(1) or len(calls) >= n, timeout=5,
                       retry_interval_ms=1, n=3)
    assert len(calls) == 3

    def boom():
        raise KeyError("nope")

    start = time.monotonic()
    with pytest.raises(RuntimeError) as info:
        wait_for_condition(boom, timeout=0.2, retry_interval_ms=10)
    assert time.monotonic() - start < 5
    assert str(info.value).startswith("The condition wasn't met before the timeout expired. "
                                      "Last exception: ")
    assert "KeyError: 'nope'" in str(info.value)
    with pytest.raises(RuntimeError, match="^The condition wasn't met before the timeout expired.$"):
        wait_for_condition(lambda: False, timeout=0.1, retry_interval_ms=10)
    with pytest.raises(KeyError):
        wait_for_condition(boom, timeout=1, raise_exceptions=True)


def test_async_wait_for_condition_awaits_coroutine_predicates():
    from ray_adapter.ray._common.test_utils import async_wait_for_condition

    state = {"n": 0}

    async def pred(goal):
        state["n"] += 1
        return state["n"] >= goal

    asyncio.run(async_wait_for_condition(pred, timeout=5, retry_interval_ms=1, goal=3))
    assert state["n"] == 3
    with pytest.raises(RuntimeError, match="Last exception: boom"):
        asyncio.run(async_wait_for_condition(lambda: 1 / 0 if False else _raise("boom"),
                                             timeout=0.1, retry_interval_ms=10))


def _raise(message):
    raise ValueError(message)


def test_run_string_as_driver_runs_a_driver_on_the_adapter():
    # The helper as a Ray test calls it: from a process that has the adapter as ``ray``.
    code = r'''
import os, subprocess, sys
from ray._common.test_utils import run_string_as_driver
from ray._private.test_utils import (run_string_as_driver_stdout_stderr,
                                     run_string_as_driver_nonblocking)
driver = """
import ray, sys
ray.init(num_cpus=1)
@ray.remote
def f():
    return 41 + 1
print("value", ray.get(f.remote()), "adapter" if "ray_adapter" in ray.__file__ else "real")
print("to stderr", file=sys.stderr)
ray.shutdown()
"""
out = run_string_as_driver(driver)
assert "value 42 adapter" in out and "to stderr" in out, out
out, err = run_string_as_driver_stdout_stderr(driver)
assert "value 42 adapter" in out and "to stderr" not in out and "to stderr" in err, (out, err)
try:
    run_string_as_driver("import sys; print('bad'); sys.exit(3)")
except subprocess.CalledProcessError as e:
    assert e.returncode == 3 and b"bad" in e.output, e
else:
    raise AssertionError("no error")
try:
    run_string_as_driver("import time; time.sleep(60)", timeout=0.5)
except subprocess.TimeoutExpired:
    pass
else:
    raise AssertionError("no timeout")
proc = run_string_as_driver_nonblocking("import sys; print(sys.stdin.closed); print('hi')")
assert proc.wait(30) == 0 and proc.stdout.read().split() == [b"True", b"hi"]
print("OK")
'''
    result = run_code(code, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("OK"), result.stdout


def test_process_waits(ray):
    from ray_adapter.ray._private.test_utils import (wait_for_children_of_pid,
                                                     wait_for_children_of_pid_to_exit,
                                                     wait_for_pid_to_exit)

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    wait_for_children_of_pid(os.getpid(), num_children=1, timeout=10)
    wait_for_pid_to_exit(child.pid, timeout=10)
    assert child.poll() is not None
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with pytest.raises(TimeoutError, match=f"process {sleeper.pid} to exit"):
            wait_for_pid_to_exit(sleeper.pid, timeout=0.2)
    finally:
        sleeper.kill()
        sleeper.wait()
    parent = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(2)']).wait(); "
        "time.sleep(30)")])
    try:
        wait_for_children_of_pid(parent.pid, num_children=1, timeout=20)
        wait_for_children_of_pid_to_exit(parent.pid, timeout=20)
        assert psutil.Process(parent.pid).children() == []
    finally:
        parent.kill()
        parent.wait()


def test_actor_state_waits(ray, ptu):
    @ray.remote
    class A:
        def ping(self):
            return 1

    actors = [A.remote() for _ in range(2)]
    ray.get([a.ping.remote() for a in actors])
    ptu.wait_for_num_actors(2, state=2, timeout=10)   # 2: ALIVE
    assert ptu.convert_actor_state(2) == "ALIVE" and ptu.convert_actor_state(4) == "DEAD"
    assert ptu.convert_actor_state(0) is None
    with pytest.raises(TimeoutError):
        ptu.wait_for_num_actors(3, timeout=0.3)
    ptu.kill_actor_and_wait_for_failure(actors[0])
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(actors[0].ping.remote())
    assert ptu.get_actor_node_id(actors[1]) == ray.get_runtime_context().get_node_id()


def test_placement_group_leak_check(ray, ptu):
    pg = ray.util.placement_group([{"CPU": 1}])
    ray.get(pg.ready())
    assert not ptu.is_placement_group_removed(pg)
    ptu.placement_group_assert_no_leak([pg])
    assert ptu.is_placement_group_removed(pg)
    assert ray.available_resources()["CPU"] == 2


def test_batch_queue(ray, ptu):
    q = ptu.BatchQueue()
    for i in range(5):
        q.put(i)
    assert q.get_batch(batch_size=3) == [0, 1, 2]
    assert q.get_batch() == [3, 4]
    with pytest.raises(ptu.Empty):
        q.get_batch(first_timeout=0.1)
    q.put(9)
    start = time.monotonic()
    assert q.get_batch(batch_size=2, total_timeout=0.3) == [9]
    assert time.monotonic() - start < 10


def test_retry_helpers_and_small_utilities(tmp_path):
    from ray_adapter.ray._private import test_utils as ptu

    attempts = []

    def flaky():
        attempts.append(1)
        if len(attempts) < 3:
            raise ConnectionError("not yet")

    assert ptu.wait_until_succeeded_without_exception(flaky, (ConnectionError,),
                                                      timeout_ms=5000, retry_interval_ms=1)
    assert not ptu.wait_until_succeeded_without_exception(
        lambda: _raise("x"), (ValueError,), timeout_ms=50, retry_interval_ms=10)
    with pytest.raises(Exception, match="(?s)Timed out while testing, .*ValueError: x"):
        ptu.wait_until_succeeded_without_exception(lambda: _raise("x"), (ValueError,),
                                                   timeout_ms=50, retry_interval_ms=10,
                                                   raise_last_ex=True)
    seen = []

    def eventually():
        seen.append(1)
        assert len(seen) > 2, "still failing"

    ptu.wait_for_assertion(eventually, timeout=5, retry_interval_ms=1)
    with pytest.raises(AssertionError, match="never"):
        ptu.wait_for_assertion(lambda: _assert_false("never"), timeout=0.1, retry_interval_ms=10)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.log").write_text("")
    (tmp_path / "y.log").write_text("")
    (tmp_path / "z.txt").write_text("")
    assert sorted(ptu.recursive_fnmatch(str(tmp_path), "*.log")) == sorted(
        [str(tmp_path / "a" / "x.log"), str(tmp_path / "y.log")])
    assert ptu.same_elements([{"a": 1}, 2], [2, {"a": 1}]) and not ptu.same_elements([1], [1, 2])
    assert ptu.generate_system_config_map(a=1) == {"_system_config": {"a": 1}}
    assert ptu.format_web_url("localhost:8265") == "http://127.0.0.1:8265"
    assert ptu.format_web_url("http://h:1") == "http://h:1"
    cwd = os.getcwd()
    with ptu.chdir(str(tmp_path)):
        assert os.getcwd() == str(tmp_path)
    assert os.getcwd() == cwd
    port = ptu.get_current_unused_port()
    assert not ptu.wait_until_server_available(f"127.0.0.1:{port}", timeout_ms=50)
    assert ptu.client_test_enabled() is False


def _assert_false(message):
    raise AssertionError(message)


def test_fake_timer_and_plain_helpers():
    import collections

    from ray_adapter.ray._common.test_utils import FakeTimer, MetricSamplePattern, is_named_tuple

    timer = FakeTimer(start_time=10)
    timer.advance(5)
    timer.realistic_sleep(1)
    assert abs(timer.time() - 16.001) < 1e-9
    assert is_named_tuple(collections.namedtuple("P", "x y")) and not is_named_tuple(tuple)
    Sample = collections.namedtuple("Sample", "name labels value")
    sample = Sample("m", {"a": "1", "b": "2"}, 3.0)
    assert MetricSamplePattern(name="m", partial_label_match={"a": "1"}).matches(sample)
    assert not MetricSamplePattern(value=2.0).matches(sample)


def test_gaps_say_why():
    from ray_adapter import gaps
    from ray_adapter.ray._private import test_utils as ptu

    with pytest.raises(gaps.RayAdapterGapError, match="pub-sub"):
        ptu.init_error_pubsub  # noqa: B018


def test_raylet_binds_rays_exception_classes():
    # Ray's ray._raylet binds these ray.exceptions classes (the same objects); Ray's own
    # test_streaming_generator.py imports ObjectRefStreamEndOfStreamError from there.
    from ray_adapter.ray import _raylet, exceptions

    for name in ("ObjectRefStreamEndOfStreamError", "RayTaskError", "GetTimeoutError",
                 "TaskCancelledError", "ActorDiedError", "AsyncioActorExit"):
        assert getattr(_raylet, name) is getattr(exceptions, name), name
    with pytest.raises(AttributeError):
        _raylet.NotARayName  # noqa: B018


def test_object_ref_on_completed_calls_back_with_the_value_or_the_error(ray, tu):
    # Ray's internal ObjectRef._on_completed (Ray Serve uses it; Ray's test_asyncio.py
    # test_async_callback checks it): the callback gets the value, or the exception object.
    import threading

    seen, done = [], threading.Event()

    def record(result):
        seen.append(result)
        if len(seen) == 3:
            done.set()

    ref = ray.put("ready")
    assert ref._on_completed(record) is ref
    signal = tu.SignalActor.remote()

    @ray.remote
    def later():
        ray.get(signal.wait.remote())
        return "later"

    @ray.remote
    def boom():
        raise KeyError("bad")

    later.remote()._on_completed(record)
    boom.remote()._on_completed(record)
    tu.wait_for_condition(lambda: len(seen) == 2)
    assert "later" not in seen
    ray.get(signal.send.remote())
    assert done.wait(30)
    assert seen[0] == "ready" or seen[1] == "ready"
    errors = [r for r in seen if isinstance(r, Exception)]
    assert len(errors) == 1 and isinstance(errors[0], ray.exceptions.RayTaskError)
    assert isinstance(errors[0], KeyError)
    assert "later" in seen


def test_cluster_not_supported_flag_is_rays():
    # Ray's test files import it (`from ray.cluster_utils import Cluster, cluster_not_supported`);
    # Ray sets it on Windows only, and the adapter's Cluster works on Linux.
    from ray_adapter.ray import cluster_utils

    assert cluster_utils.cluster_not_supported is (os.name == "nt")
