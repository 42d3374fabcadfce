"""yr-local as a preview: what it cannot run faithfully says so (a process exit in a task or
actor ends the driver), and what it can it does as the embedded runtime does (resources)."""
import re
import textwrap

import pytest

from conftest import _yr_available, run_code

pytestmark = pytest.mark.skipif(not _yr_available(), reason="the openYuanrong SDK is not installed")

YR_LOCAL = {"RAY_ADAPTER_RUNTIME": "yr-local"}


@pytest.fixture
def yr_local(monkeypatch):
    """The proxy ``ray`` on yr-local in this process, no session started (the test starts
    its own); shut down afterwards."""
    import ray_adapter.ray as ray

    monkeypatch.setenv("RAY_ADAPTER_RUNTIME", "yr-local")
    if ray.is_initialized():
        ray.shutdown()
    yield ray
    ray.shutdown()


def _program(body):
    return textwrap.dedent("""
        import os, sys, time
        import ray
        ray.init(num_cpus=2)
    """) + textwrap.dedent(body)


def test_os_exit_in_a_task_says_it_ends_the_driver():
    proc = run_code(_program("""
        @ray.remote
        def quit_now():
            os._exit(3)

        ray.get(quit_now.remote())
        print("not reached")
    """), env=YR_LOCAL, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert "not reached" not in proc.stdout
    err = proc.stderr
    assert "os._exit(3) was called in the task quit_now" in err
    assert "threads of the driver process" in err and "embedded runtime" in err
    assert "WorkerCrashedError" in err


def test_os_exit_in_an_actor_method_says_it_ends_the_driver():
    proc = run_code(_program("""
        @ray.remote
        class Quitter:
            def quit(self):
                os._exit(4)

        q = Quitter.remote()
        ray.get(q.quit.remote())
    """), env=YR_LOCAL, timeout=120)
    assert proc.returncode == 4, proc.stderr
    assert "os._exit(4) was called in the actor" in proc.stderr
    assert "ActorDiedError" in proc.stderr and "threads of the driver process" in proc.stderr


def test_os_exit_of_the_driver_itself_is_untouched():
    proc = run_code(_program("""
        @ray.remote
        def one():
            return 1

        assert ray.get(one.remote()) == 1
        print("driver exits", flush=True)
        os._exit(5)
    """), env=YR_LOCAL, timeout=120)
    assert proc.returncode == 5, proc.stderr
    assert proc.stdout == "driver exits\n"
    assert "ray-adapter" not in proc.stderr


def test_os_exit_and_environ_are_restored_after_shutdown():
    proc = run_code(_program("""
        assert os._exit.__module__ != "posix" and type(os.environ) is not os._Environ
        ray.shutdown()
        print(os._exit.__module__, type(os.environ) is os._Environ)
    """), env=YR_LOCAL, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "posix True"


def test_a_gpu_held_by_an_actor_makes_a_gpu_task_wait(ray_module):
    # Both backends: the task waits (queued) while the actor holds the only GPU, gets the
    # GPU's id once the actor is gone, and available_resources() follows.
    ray = ray_module
    ray.init(num_cpus=2, num_gpus=1)

    @ray.remote(num_gpus=1)
    class Holder:
        def ids(self):
            ctx = ray.get_runtime_context()
            return ray.get_gpu_ids(), ctx.get_accelerator_ids()["GPU"]

    @ray.remote(num_gpus=1)
    def needs_the_gpu():
        return ray.get_gpu_ids()

    holder = Holder.remote()
    assert ray.get(holder.ids.remote(), timeout=30) == ([0], ["0"])
    assert "GPU" not in ray.available_resources()
    waiting = needs_the_gpu.remote()
    with pytest.raises(ray.exceptions.GetTimeoutError):
        ray.get(waiting, timeout=1)
    ray.kill(holder)
    assert ray.get(waiting, timeout=30) == [0]
    assert ray.get_gpu_ids() == []  # the driver's


def test_a_queued_actor_does_not_block_its_creator(ray_module):
    ray = ray_module
    ray.init(num_cpus=2)

    @ray.remote(num_cpus=2)
    class Big:
        def ping(self):
            return "pong"

    first = Big.remote()
    assert ray.get(first.ping.remote(), timeout=30) == "pong"
    second = Big.remote()  # no CPU left: created once `first` is gone
    call = second.ping.remote()
    with pytest.raises(ray.exceptions.GetTimeoutError):
        ray.get(call, timeout=1)
    assert ray.available_resources().get("CPU", 0) == 0
    ray.kill(first)
    assert ray.get(call, timeout=30) == "pong"


def test_each_gpu_task_sees_its_own_visible_devices_and_the_driver_its_own(ray_module, monkeypatch):
    # yr-local: one process environment; each call reads its own CUDA_VISIBLE_DEVICES in Python
    # (see core/yuanrong/thread_env.py), the driver keeps its own.
    import os
    import time

    ray = ray_module
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    ray.init(num_cpus=2, num_gpus=2)

    @ray.remote(num_gpus=1)
    def dev():
        first = os.environ.get("CUDA_VISIBLE_DEVICES")
        time.sleep(0.5)
        return first, os.getenv("CUDA_VISIBLE_DEVICES"), ray.get_gpu_ids()

    refs = [dev.remote() for _ in range(2)]
    time.sleep(0.2)
    assert "CUDA_VISIBLE_DEVICES" not in os.environ  # the driver's, while the tasks run
    results = ray.get(refs, timeout=30)
    assert sorted(first for first, _, _ in results) == ["0", "1"]
    for first, later, ids in results:
        assert first == later == str(ids[0])


def test_hard_affinity_to_an_unknown_node_is_unschedulable(ray_module):
    ray = ray_module
    ray.init(num_cpus=2)
    from ray_adapter.ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nowhere = NodeAffinitySchedulingStrategy("ab" * 28, soft=False)
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)

    @ray.remote
    def one():
        return 1

    @ray.remote(num_cpus=1)
    class Pinned:
        def one(self):
            return 1

    with pytest.raises(ray.exceptions.TaskUnschedulableError, match="soft=False was specified"):
        ray.get(one.options(scheduling_strategy=nowhere).remote(), timeout=30)
    with pytest.raises(ray.exceptions.ActorUnschedulableError, match="soft=False was specified"):
        ray.get(Pinned.options(scheduling_strategy=nowhere).remote().one.remote(), timeout=30)
    assert ray.get(one.options(scheduling_strategy=here).remote(), timeout=30) == 1
    assert ray.get(Pinned.options(scheduling_strategy=here).remote().one.remote(), timeout=30) == 1


def test_an_infeasible_task_stays_pending_with_a_warning(ray_module, capfd):
    ray = ray_module
    ray.init(num_cpus=2)

    @ray.remote(num_gpus=1)
    def needs_a_gpu():
        return 1

    with pytest.raises(ray.exceptions.GetTimeoutError):
        ray.get(needs_a_gpu.remote(), timeout=1)
    err = capfd.readouterr().err
    assert "requests {'CPU': 1, 'GPU': 1}" in err or "requests {'GPU': 1, 'CPU': 1}" in err, err
    assert "which no node can satisfy" in err and "stays pending" in err


def test_exit_after_cancelling_a_waiting_task_prints_no_yr_error():
    # A call cancelled before it started is still run (skipped) by yr; scheduled after the
    # interpreter's thread pools shut down it printed "cannot schedule new futures" (about one
    # exit in two before the exit grace waited for yr's own end of each call).
    program = _program("""
        @ray.remote(num_cpus=2)
        class Holder:
            def ping(self):
                return 1

        @ray.remote(num_cpus=2)
        def needs_both():
            return 1

        holder = Holder.remote()
        ray.get(holder.ping.remote())
        waiting = needs_both.remote()
        try:
            ray.get(waiting, timeout=0.5)
        except ray.exceptions.GetTimeoutError:
            pass
        ray.kill(holder)
        first, second = needs_both.remote(), needs_both.remote()
        ray.cancel(second)
        print("done", flush=True)
    """)
    # A grace long enough for a loaded machine: yr reaches the cancelled call only once the
    # call ahead of it has run (the default 1 s ran out in one full-suite run of five).
    for _ in range(2):  # each exit raced (about one in two) before the fix
        proc = run_code(program, env={**YR_LOCAL, "RAY_ADAPTER_EXIT_GRACE_S": "20"}, timeout=240)
        assert proc.returncode == 0 and proc.stdout == "done\n", proc.stderr
        assert "cannot schedule new futures" not in proc.stderr, proc.stderr


def test_a_task_waiting_for_its_child_lends_its_cpu(ray_module):
    # One CPU: the parent holds it while it waits in ray.wait / ray.get; as in Ray, a blocked
    # task lends its CPUs back so the child can run (no deadlock).
    ray = ray_module
    ray.init(num_cpus=1)

    @ray.remote
    def child(x):
        return x * 2

    @ray.remote
    def parent():
        ready, _ = ray.wait([child.remote(1)], timeout=30)
        return len(ready), ray.get(child.remote(2), timeout=30)

    assert ray.get(parent.remote(), timeout=60) == (1, 4)
    assert ray.available_resources().get("CPU") == 1.0


def test_starting_says_nothing_a_ray_program_would_not():
    # yr's native init printed "failed to detect `yr` command in PATH, check if you have install
    # yuanrong core packages." in local mode, where no yr command is needed; and its notices
    # must never reach the program's stdout.
    proc = run_code(_program("""
        @ray.remote
        def one():
            return 1

        print(ray.get(one.remote()))
        print("warning on stderr", file=sys.stderr)
    """), env=YR_LOCAL, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == "1\n"
    lines = proc.stderr.strip().splitlines()  # Ray's ray.init logs its one INFO line too
    assert len(lines) == 2, proc.stderr
    assert re.fullmatch(r".*\tINFO worker\.py:\d+ -- Started a local Ray instance\.", lines[0]), proc.stderr
    assert lines[1] == "warning on stderr", proc.stderr


def test_env_vars_of_calls_and_actors_leave_the_driver_environment_as_they_found_it():
    # yr-local runs calls and actors as threads of the driver: their env_vars are set in its one
    # os.environ. Overlapping calls once restored each other's values (one stayed set) and an
    # actor's stayed after shutdown, __RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR among them: a real
    # Ray started later by the same process passed it to its workers, which died of it.
    proc = run_code(textwrap.dedent("""
        import os, threading, time
        import ray

        before = dict(os.environ)
        ray.init(num_cpus=4, runtime_env={"env_vars": {"JOB_VAR": "job"},
                                          "worker_process_setup_hook": "os.getpid"})

        @ray.remote
        def slow(delay):
            time.sleep(delay)
            return os.environ.get("JOB_VAR"), os.environ.get("TASK_VAR")

        @ray.remote
        class Holder:
            def get(self):
                return os.environ.get("ACTOR_VAR")

        overlapping = [slow.options(runtime_env={"env_vars": {"TASK_VAR": str(i)}}).remote(0.3 - 0.1 * i)
                       for i in range(3)]
        print(sorted(ray.get(overlapping)))
        holder = Holder.options(runtime_env={"env_vars": {"ACTOR_VAR": "actor"}}).remote()
        print(ray.get(holder.get.remote()))
        print("while running:", sorted(k for k in ("JOB_VAR", "TASK_VAR") if k in os.environ))

        # A task overlapping an actor that holds the same variable, and an actor that exits:
        # the process environment, not a call's own view, goes back to what it was.
        os.environ["SHARED"] = "orig"

        @ray.remote
        def holds(delay):
            time.sleep(delay)
            return os.environ["SHARED"]

        @ray.remote
        class Quits:
            def value(self):
                return os.environ["SHARED"]

            def quit(self):
                ray.actor.exit_actor()

        running = holds.options(runtime_env={"env_vars": {"SHARED": "task"}}).remote(0.5)
        quits = Quits.options(runtime_env={"env_vars": {"SHARED": "actor"}}).remote()
        print(ray.get(quits.value.remote()), ray.get(running))
        try:
            ray.get(quits.quit.remote())
        except ray.exceptions.RayActorError:
            pass
        deadline = time.monotonic() + 5  # the caller hears of the exit before the shell ends
        while os.environ["SHARED"] != "orig" and time.monotonic() < deadline:
            time.sleep(0.01)
        print("after the actor exited:", os.environ["SHARED"])
        killed = Quits.options(runtime_env={"env_vars": {"SHARED": "killed"}}).remote()
        print(ray.get(killed.value.remote()), os.environ["SHARED"])
        ray.kill(killed)  # its env_vars go with it, not at shutdown
        print("after the actor was killed:", os.environ["SHARED"])
        del os.environ["SHARED"]
        ray.shutdown()
        print("changed:", sorted(k for k in set(os.environ) | set(before) if os.environ.get(k) != before.get(k)))
    """), env=YR_LOCAL, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == [
        "[('job', '0'), ('job', '1'), ('job', '2')]", "actor", "while running: ['JOB_VAR']",
        "actor task", "after the actor exited: orig", "killed killed",
        "after the actor was killed: orig", "changed: []"]


def test_threads_asking_for_an_object_at_once_share_its_one_future(monkeypatch):
    """get, wait, object_future and cancel ask the backend for an object's future from any
    thread; two made at once (a check-then-set race) left one caller waiting on a future that
    a cancel or kill never fails. Many threads released together must all get the same one."""
    import sys
    import threading

    import ray_adapter.ray as ray
    from ray_adapter import core

    monkeypatch.setenv("RAY_ADAPTER_RUNTIME", "yr-local")
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=1)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: the race shows at once
    def one_round(backend):
        ref = ray.put(0)
        obj = backend.objects._objects[ref._id]
        start = threading.Barrier(8)
        seen = []

        def ask():
            start.wait()
            seen.append(backend.objects.future_for(obj))

        threads = [threading.Thread(target=ask) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return len({id(f) for f in seen}) == 1 and seen[0] is obj.future

    try:
        backend = core.current()
        assert all(one_round(backend) for _ in range(100))
        del backend  # nothing of yr's outlives the runtime (its refs' finalizers need it)
    finally:
        sys.setswitchinterval(interval)
        ray.shutdown()


def test_actors_going_out_of_scope_with_calls_in_flight_start_no_thread_each(monkeypatch):
    """An actor whose handles are all gone ends after the calls it already has (as Ray); the
    backend waited for those calls on a new thread per actor. Now callbacks count them: the
    number of threads does not grow with the number of such actors, and each still ends once
    its call is done (its result is kept)."""
    import threading
    import time

    import ray_adapter.ray as ray
    from ray_adapter.ray.util import state

    monkeypatch.setenv("RAY_ADAPTER_RUNTIME", "yr-local")
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=40)
    try:
        @ray.remote(num_cpus=1)
        class Sleeper:
            def nap(self, seconds):
                time.sleep(seconds)
                return "rested"

        actors = [Sleeper.remote() for _ in range(30)]
        ray.get([a.__ray_ready__.remote() for a in actors], timeout=60)
        naps = [a.nap.remote(1.5) for a in actors]
        before = threading.active_count()
        del actors  # every handle gone while its call runs
        time.sleep(0.5)
        assert threading.active_count() < before + 5
        assert ray.get(naps, timeout=60) == ["rested"] * 30  # the calls finished
        deadline = time.monotonic() + 30
        while any(a.state != "DEAD" for a in state.list_actors(limit=None) if a.class_name == "Sleeper"):
            assert time.monotonic() < deadline, "actors out of scope were not ended"
            time.sleep(0.1)
    finally:
        ray.shutdown()


def test_a_task_runs_when_its_instance_is_created_before_yr_registers_it(yr_local, monkeypatch):
    """yr's local mode started an instance's creation before registering the future it
    settles; when the creation won that race (the scaling thread descheduled: a loaded CI
    machine), the instance never became active and a trivial task never ran (``get`` timed
    out). The race is forced here by holding the scaling thread between the two steps."""
    import time

    from yr.local_mode import instance_manager

    ray = yr_local

    add = instance_manager.InstanceManager._InstanceManager__add_instance

    def held_add(self, resource, instance):
        time.sleep(0.3)  # the creation finishes on its worker meanwhile
        return add(self, resource, instance)

    monkeypatch.setattr(instance_manager.InstanceManager, "_InstanceManager__add_instance", held_add)
    ray.init(num_cpus=2)

    @ray.remote
    def one():
        return 1

    assert ray.get([one.remote() for _ in range(3)], timeout=20) == [1, 1, 1]


def test_a_shut_down_session_leaves_none_of_its_threads(yr_local):
    """Each stateless call of yr's local mode runs on an instance of two threads, and its
    finalize left every instance of the session running: a process starting sessions one
    after another (a test suite) kept them all. After shutdown the instances are gone."""
    import threading
    import time

    ray = yr_local
    before = threading.active_count()
    for _ in range(2):
        ray.init(num_cpus=4)

        @ray.remote
        def nap(i):
            time.sleep(0.05)
            return i

        assert ray.get([nap.remote(i) for i in range(40)], timeout=60) == list(range(40))
        assert threading.active_count() > before + 20  # the instances ran (the test can fail)
        ray.shutdown()
    deadline = time.monotonic() + 10
    while threading.active_count() > before + 4:  # yr's scheduling thread: one per session
        assert time.monotonic() < deadline, [t.name for t in threading.enumerate()]
        time.sleep(0.05)


def test_a_sessions_finished_calls_leave_their_arguments_behind(yr_local):
    """yr's local mode kept a record of every stateless call, its arguments included, for
    the rest of the session: 40 calls with an 8 MB argument each grew the driver by 320 MB.
    Once a call has ended nothing holds its arguments."""
    import gc

    import psutil

    ray = yr_local
    ray.init(num_cpus=2)

    @ray.remote
    def size(blob):
        return len(blob)

    process = psutil.Process()
    assert ray.get(size.remote(b"w" * 1024)) == 1024  # the first call's set-up counted out
    gc.collect()
    before = process.memory_info().rss
    for i in range(40):
        assert ray.get(size.remote(bytes([i]) * (8 << 20)), timeout=60) == 8 << 20
    gc.collect()
    grown = process.memory_info().rss - before
    assert grown < 120 << 20, f"the driver grew by {grown >> 20} MB over 40 calls of 8 MB"
