"""The embedded runtime's shared-memory object store: arena blocks are reused only when no
process can see them, every reader sees the current object, and nothing leaks."""
import ctypes
import gc
import os
import time

import numpy as np
import pytest

pytestmark = pytest.mark.embedded_only("the shared-memory arena is the embedded runtime's")

MB = 1 << 20


def _arena():
    from ray_adapter import core

    return core.current().arena


def _settle(predicate, timeout=10):
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.05)
    return predicate()


def test_repeated_puts_reuse_the_arena(ray):
    arr = np.ones(8 * MB // 8)
    for _ in range(20):
        ref = ray.put(arr)
        back = ray.get(ref)
        assert back[0] == 1.0 and not back.flags.writeable
        del ref, back
    assert _settle(lambda: len(_arena()._blocks) == 0)
    assert len(_arena()._segments) <= 2  # the same memory, over and over


def test_a_worker_sees_the_new_object_in_a_reused_block(ray):
    @ray.remote
    def first(a):
        return float(a[0])

    @ray.remote(num_cpus=2)  # both CPUs: the same (only free) worker process runs each call
    def pid_and_first(a):
        return os.getpid(), float(a[0])

    pid, value = ray.get(pid_and_first.remote(np.full(4 * MB // 8, 1.0)))
    assert value == 1.0
    assert _settle(lambda: len(_arena()._blocks) == 0)  # its block is free again
    for fill in (2.0, 3.0, 4.0):  # new objects reuse that memory; the worker mapped it before
        again, value = ray.get(pid_and_first.remote(np.full(4 * MB // 8, fill)))
        assert value == fill
    assert ray.get(first.remote(np.full(4 * MB // 8, 5.0))) == 5.0


def test_writing_through_a_read_only_view_changes_nothing_shared(ray):
    arr = np.arange(2 * MB // 8, dtype=np.float64)
    ref = ray.put(arr)

    @ray.remote
    def scribble(a):
        # What torch.from_numpy(a).fill_(0) does: write past the read-only flag.
        ctypes.memset(a.ctypes.data, 0, a.nbytes)
        return float(a.sum())

    assert ray.get(scribble.remote(ref)) == 0.0  # the worker's own copy-on-write pages
    assert np.array_equal(ray.get(ref), arr)  # the stored object is untouched


def test_a_dead_worker_releases_what_it_was_sent(ray):
    @ray.remote
    class Keeper:
        def keep(self, a):
            self.a = a  # a view of the block, held by the actor's process
            return a.nbytes

    keeper = Keeper.remote()
    assert ray.get(keeper.keep.remote(np.ones(4 * MB // 8))) == 4 * MB
    gc.collect()
    assert len(_arena()._blocks) == 1  # pinned: the actor still views it
    ray.kill(keeper)
    assert _settle(lambda: len(_arena()._blocks) == 0)


def test_a_view_in_the_driver_keeps_its_block(ray):
    ref = ray.put(np.full(4 * MB // 8, 7.0))
    view = ray.get(ref)
    del ref
    gc.collect()
    filler = [ray.put(np.full(4 * MB // 8, 9.0)) for _ in range(4)]  # would reuse a free block
    assert float(view[0]) == 7.0 and float(view[-1]) == 7.0
    del filler, view
    assert _settle(lambda: len(_arena()._blocks) == 0)


def _private_dirty_mb():
    """This process's private dirty memory (MiB): pages it wrote of its own."""
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("Private_Dirty:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no Private_Dirty in smaps_rollup")


def test_writes_through_a_read_only_view_never_reach_a_later_object(ray):
    @ray.remote(num_cpus=2)  # both CPUs: the same (only free) worker process runs each call
    def scribble(a):
        ctypes.memset(a.ctypes.data, 0, a.nbytes)  # past the read-only flag, as torch.from_numpy
        return os.getpid()

    @ray.remote(num_cpus=2)
    def read(a):
        return os.getpid(), float(a.min()), float(a.max())

    pid = ray.get(scribble.remote(np.full(4 * MB // 8, 1.0)))
    assert _settle(lambda: len(_arena()._blocks) == 0)  # its block is free again
    for fill in (2.0, 3.0):  # the same block, in the same worker: its scribble must be gone
        assert ray.get(read.remote(np.full(4 * MB // 8, fill))) == (pid, fill, fill)


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def test_in_place_updates_of_a_received_tensor_stay_with_that_tensor(ray, torch):
    """Ray unpickles a fresh tensor on every get: an in-place update (an optimizer step) is
    seen by nothing else, not by a later read of the same object, nor by a new object."""
    @ray.remote(num_cpus=2)
    class Trainer:
        def step(self, w):
            w.add_(1.0)  # in place, as an optimizer's step
            return os.getpid(), float(w.min()), float(w.max())

        def read(self, w):
            return os.getpid(), float(w.min()), float(w.max())

        def twice(self, a, b):
            a.add_(1.0)
            return float(b.max())  # the same object as a, received a second time

    trainer = Trainer.remote()
    n = 4 * MB // 4
    first = ray.put(torch.zeros(n))
    pid, low, high = ray.get(trainer.step.remote(first))
    assert (low, high) == (1.0, 1.0)
    assert ray.get(trainer.read.remote(first)) == (pid, 0.0, 0.0)  # the object is unchanged
    assert ray.get(trainer.twice.remote(first, first)) == 0.0
    del first
    assert _settle(lambda: len(_arena()._blocks) == 0)
    for fill in (5.0, 6.0):  # new objects in the reused block
        assert ray.get(trainer.read.remote(ray.put(torch.full((n,), fill)))) == (pid, fill, fill)
    assert float(ray.get(ray.put(torch.zeros(n))).max()) == 0.0  # and in the driver


def test_each_get_of_a_workers_tensor_is_a_tensor_of_its_own(ray, torch):
    @ray.remote
    def make():
        return torch.zeros(4 * MB // 4)

    @ray.remote
    def largest(t):
        return float(t.max())

    ref = make.remote()
    one = ray.get(ref)
    one.add_(3.0)
    two = ray.get(ref)
    assert float(two.max()) == 0.0 and one.data_ptr() != two.data_ptr()
    two.add_(1.0)
    assert float(one.max()) == 3.0
    assert ray.get(largest.remote(ref)) == 0.0


def test_a_workers_in_place_updates_leave_no_memory_behind(ray, torch):
    @ray.remote(num_cpus=2)
    class Learner:
        def step(self, w):
            w.mul_(0.5)  # every page written
            return _private_dirty_mb()

    learner = Learner.remote()
    size_mb = 32
    # Eight objects alive at once: eight blocks of the arena, each written by one step.
    refs = [ray.put(torch.ones(size_mb * MB // 4)) for _ in range(8)]
    grown = [ray.get(learner.step.remote(ref)) for ref in refs]
    # The pages a step wrote go with its tensor: the steps hold about one step's, not eight.
    assert grown[-1] - grown[0] < 2 * size_mb, grown
