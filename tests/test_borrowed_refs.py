"""Borrowed references: an ObjectRef (or actor handle) nested in a value, returned by a task or
held by a worker keeps its object (or actor) alive exactly while someone holds it, and it is
freed after (Ray's borrower protocol, on one machine). Real workers on both backends."""
import gc
import os
import pprint
import time

import numpy as np
import psutil
import pytest

from conftest import process_alive


def _table(ray):
    """``(count, settle)``: the number of objects the running backend keeps, and a function
    that applies queued reference drops and waits until at most ``target`` are left."""
    from ray_adapter import core

    backend = core.current()
    count, flush = (lambda: len(backend.objects)), backend.flush_releases

    def settle(target=0, seconds=10.0):
        deadline = time.monotonic() + seconds
        while True:
            gc.collect()
            flush()
            if count() <= target or time.monotonic() > deadline:
                return count()
            time.sleep(0.02)

    def leftover():
        """What the table still keeps, and who holds it (the message of a failed settle)."""
        table = backend.objects
        if not hasattr(table, "_borrows"):  # yr-local's table: the ids are what it can say
            return repr([getattr(r, "hex", lambda: r)() for r in list(getattr(table, "_objects", ()))])
        with table._lock:
            borrowers = {oid: [f"pid {w.pid} {w.state.name}" for w, held in table._borrows.items()
                               if oid in held] for oid in table._objects}
            left = [{"id": oid.hex(), "state": e.state.name, "refs": e.refs, "pinned": e.pinned,
                     "error": e.is_error, "producer": e.producer and e.producer.hex(),
                     "contained": len(e.contained or ()), "borrowers": borrowers[oid]}
                    for oid, e in table._objects.items()]
        # The driver's own live ObjectRefs to them, and what holds each (a leak's first clue).
        ids = {oid.hex() for oid in table._objects}
        every = gc.get_objects()
        for obj in every:
            if type(obj).__name__ == "ObjectRef" and getattr(obj, "hex", None) and obj.hex() in ids:
                holders = [type(r).__name__ for r in gc.get_referrers(obj) if r is not every]
                left.append({"driver_ref": obj.hex(), "held_by": holders})
        # A string: pytest prints it whole (a list in an assert's message is cut short).
        return pprint.pformat(left, width=100)

    settle.leftover = leftover
    return count, settle


def test_a_ref_nested_in_an_argument_lives_until_the_task_is_done(ray):
    count, settle = _table(ray)

    @ray.remote
    def total(box):
        time.sleep(0.2)  # the driver's own ref is long gone by now
        return float(ray.get(box[0]).sum())

    ref = total.remote([ray.put(np.ones(1000))])  # nothing but the task holds the inner object
    gc.collect()
    assert ray.get(ref, timeout=30) == 1000.0
    del ref
    assert settle() == 0, settle.leftover()


def test_a_ref_returned_inside_a_value_lives_while_the_driver_holds_it(ray):
    count, settle = _table(ray)

    @ray.remote
    def make():
        return {"inner": ray.put(np.arange(5))}  # the worker's own object, returned nested

    outer = make.remote()
    box = ray.get(outer, timeout=30)
    del outer
    assert settle(1) == 1, settle.leftover()  # the container is gone; the inner object is still held by `box`
    assert ray.get(box["inner"]).tolist() == [0, 1, 2, 3, 4]
    del box
    assert settle() == 0, settle.leftover()


def test_a_worker_holding_a_ref_keeps_it_until_it_drops_it(ray):
    count, settle = _table(ray)

    @ray.remote
    class Keeper:
        def keep(self, box):
            self.box = box
            return True

        def read(self):
            return ray.get(self.box[0]).tolist()

        def drop(self):
            self.box = None
            return True

    keeper = Keeper.remote()
    assert ray.get(keeper.keep.remote([ray.put(np.arange(3))]), timeout=30)
    assert settle(1) == 1, settle.leftover()  # only the actor holds it now
    assert ray.get(keeper.read.remote(), timeout=30) == [0, 1, 2]
    assert ray.get(keeper.drop.remote(), timeout=30)
    assert settle() == 0, settle.leftover()


def test_containers_hold_what_they_contain_and_frees_cascade(ray):
    count, settle = _table(ray)
    leaf = ray.put(np.arange(4))
    middle = ray.put([leaf])
    top = ray.put({"m": middle})
    del leaf, middle
    assert settle(3) == 3, settle.leftover()
    inner = ray.get(ray.get(top)["m"])[0]
    assert ray.get(inner).tolist() == [0, 1, 2, 3]
    del inner
    assert settle(3) == 3, settle.leftover()
    del top
    assert settle() == 0, settle.leftover()


def test_a_worker_passes_a_borrowed_ref_on_and_drops_it(ray):
    count, settle = _table(ray)

    @ray.remote
    def leaf(box):
        return int(ray.get(box[0]).sum())

    @ray.remote
    def relay(box):
        refs = [leaf.remote([box[0]]) for _ in range(3)]  # nested again, from a worker
        del box
        return sum(ray.get(refs))

    assert ray.get(relay.remote([ray.put(np.ones(7))]), timeout=60) == 21
    assert settle() == 0, settle.leftover()


def test_an_actor_handle_stored_in_an_object_keeps_the_actor_until_the_object_is_freed(ray):
    @ray.remote
    class Pinger:
        def pid(self):
            return os.getpid()

    box = ray.put([Pinger.remote()])  # the handle in the value is the only one left
    gc.collect()
    time.sleep(0.3)
    handle = ray.get(box)[0]
    pid = ray.get(handle.pid.remote(), timeout=30)
    actor_id = handle._ray_actor_id
    del handle
    gc.collect()
    assert ray.get(ray.get(box)[0].pid.remote(), timeout=30) == pid  # still alive
    from ray_adapter import core

    backend = core.current()
    del box
    if pid == os.getpid():  # yr local mode: the actor is a thread here; its record says it ended
        def ended():
            [record] = [a for a in backend.actors.records() if a.actor_id == actor_id]
            return record.dead
    else:
        def ended():
            return not process_alive(pid)
    deadline = time.monotonic() + 15
    while not ended():
        assert time.monotonic() < deadline, "the actor outlived the last object holding its handle"
        gc.collect()
        backend.flush_releases()
        time.sleep(0.05)


@pytest.mark.embedded_only("kills an actor's worker process")
def test_a_dead_workers_borrows_are_released(ray):
    count, settle = _table(ray)

    @ray.remote(max_restarts=0)
    class Keeper:
        def keep(self, box):
            self.box = box
            return os.getpid()

    keeper = Keeper.remote()
    pid = ray.get(keeper.keep.remote([ray.put(np.ones(10))]), timeout=30)
    assert settle(1) == 1, settle.leftover()
    ray.kill(keeper)
    assert settle() == 0, settle.leftover()


@pytest.mark.embedded_only("yr's local mode keeps every value in its own object store until "
                            "yr.finalize() (the adapter's table is freed, yr's memory is not)")
def test_driver_memory_stays_flat_passing_nested_refs(ray):
    """Each round puts a fresh 1 MB object and passes it nested to a task that reads it
    (``RAY_ADAPTER_FLAT_MEMORY_ROUNDS`` rounds, default 2,000; the benchmark
    ``benchmarks/nested_refs_memory.py`` runs 10,000). Before borrowed references, each object
    was pinned until shutdown: 2 GB kept after 2,000 rounds."""
    count, settle = _table(ray)
    rounds = int(os.environ.get("RAY_ADAPTER_FLAT_MEMORY_ROUNDS", "2000"))

    @ray.remote
    def read(box):
        return len(ray.get(box[0]))

    me = psutil.Process()
    window = []
    rss = []
    for i in range(rounds):
        window.append(read.remote([ray.put(np.zeros(1 << 20, dtype=np.uint8))]))
        if len(window) == 20:
            assert sum(ray.get(window, timeout=60)) == 20 << 20
            window = []
        if i % 500 == 499:
            rss.append(me.memory_info().rss)
    ray.get(window, timeout=60)
    del window
    assert settle() == 0, settle.leftover()
    # After the first 500 rounds the driver's memory must not keep growing with the rounds
    # (each round's 1 MB would add 500 MB per sample): allow 100 MB of noise overall.
    assert max(rss) - rss[0] < 100 << 20, [r >> 20 for r in rss]


def test_a_dead_actors_failed_calls_leave_nothing_behind(ray):
    """The error of a dead actor's calls is one object (its death); raised to each caller, it
    must not keep the caller's frames, and the refs in them, alive (yr-local kept them: the
    shared error's traceback held every failed ``ray.get``'s frames)."""
    count, settle = _table(ray)

    @ray.remote(max_restarts=0)
    class Slow:
        def hold(self, box):
            time.sleep(1)
            return len(box)

        def ping(self):
            return 1

    slow = Slow.remote()
    ray.get(slow.ping.remote(), timeout=30)
    refs = [slow.hold.remote([ray.put(np.ones(10))])]
    ray.kill(slow)
    refs.append(slow.ping.remote())
    for ref in refs:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(ref, timeout=30)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(refs, timeout=30)
    del refs, ref
    assert settle() == 0, settle.leftover()
