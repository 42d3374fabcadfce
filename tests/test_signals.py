"""Signals reach the program's main thread: the runtime's own threads block the ones programs
handle (Ctrl-C, SIGTERM handlers, a worker's cancel), so a driver sleeping in ``time.sleep``
is interrupted at once, never when the sleep ends (embedded runtime's threads)."""
import signal
import threading

import pytest

pytestmark = pytest.mark.embedded_only("the embedded runtime's threads")

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGCHLD)
#: The names of the embedded runtime's own threads (in the driver and in a worker).
RUNTIME_THREADS = ("ray-adapter-worker-", "ray-adapter-flush", "ray-adapter-zygote",
                   "ray-adapter-timers", "ray-adapter-refs", "ray-adapter-channel-writer",
                   "ray-adapter-prestart", "ray-adapter-reader")


def _blocked(native_id):
    """The signals thread ``native_id`` of this process blocks (from /proc)."""
    with open(f"/proc/self/task/{native_id}/status") as status:
        mask = next(int(line.split()[1], 16) for line in status if line.startswith("SigBlk:"))
    return {sig for sig in signal.Signals if mask & (1 << (sig - 1))}


def test_the_drivers_runtime_threads_leave_signals_to_the_main_thread(ray):
    @ray.remote
    def f():
        return 1

    @ray.remote
    class A:
        def m(self):
            return 2

    a = A.remote()
    assert ray.get([f.remote() for _ in range(50)] + [a.m.remote()]) == [1] * 50 + [2]
    threads = [t for t in threading.enumerate() if t.name.startswith(RUNTIME_THREADS)]
    assert any(t.name.startswith("ray-adapter-worker-") for t in threads), threads
    for thread in threads:
        try:
            blocked = _blocked(thread.native_id)
        except FileNotFoundError:  # a short-lived thread (a prestart, a writer) ended meanwhile
            assert not thread.is_alive(), thread.name
            continue
        assert set(HANDLED) <= blocked, thread.name
    assert signal.SIGINT not in _blocked(threading.main_thread().native_id)


def test_a_workers_runtime_threads_leave_signals_to_its_main_thread(ray):
    @ray.remote
    def blocked_in_runtime_threads(names):
        import signal as sig
        import threading as th

        def blocked(native_id):
            with open(f"/proc/self/task/{native_id}/status") as status:
                mask = next(int(line.split()[1], 16) for line in status if line.startswith("SigBlk:"))
            return sorted(int(s) for s in sig.Signals if mask & (1 << (s - 1)))

        return ({t.name: blocked(t.native_id) for t in th.enumerate() if t.name.startswith(names)},
                blocked(th.get_native_id()))  # a task runs in the worker's main thread

    threads, main = ray.get(blocked_in_runtime_threads.remote(RUNTIME_THREADS))
    assert "ray-adapter-reader" in threads and "ray-adapter-refs" in threads, threads
    for name, blocked in threads.items():
        assert {int(s) for s in HANDLED} <= set(blocked), name
    assert int(signal.SIGUSR1) not in main  # a cancel interrupts the task's thread


def test_a_worker_started_from_a_runtime_thread_takes_signals(ray1):
    # A process inherits the signal mask of the thread that starts it: a worker the driver's
    # reader thread starts (granted when the task before it ends) must not keep SIGUSR1
    # (cancel), SIGTERM... blocked, nor must the workers its template forks.
    ray = ray1

    @ray.remote
    def hold(seconds):
        import time

        time.sleep(seconds)

    @ray.remote
    def main_thread_blocks():
        import signal as sig
        import threading as th

        with open(f"/proc/self/task/{th.get_native_id()}/status") as status:
            mask = next(int(line.split()[1], 16) for line in status if line.startswith("SigBlk:"))
        return sorted(int(s) for s in sig.Signals if mask & (1 << (s - 1)))

    first = hold.remote(0.5)
    # Another runtime env: a worker of its own, started once ``first`` frees the one CPU.
    in_env = main_thread_blocks.options(runtime_env={"env_vars": {"SIGNALS_TEST": "1"}}).remote()
    forked = main_thread_blocks.remote()  # a worker forked by the template
    ray.get(first)
    for blocked in ray.get([in_env, forked], timeout=60):
        assert not {int(s) for s in HANDLED} & set(blocked), blocked
