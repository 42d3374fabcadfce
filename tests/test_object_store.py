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
