"""ray.util.queue.Queue with real actors on both backends: bounded blocking put/get, timeouts,
the non-blocking and batch forms, Empty / Full, sharing with tasks and actors, shutdown and
actor_options (the differential program tests/programs/queues.py compares with real Ray)."""
import asyncio
import queue as std_queue
import threading
import time

import pytest


@pytest.fixture
def Queue(ray):
    from ray_adapter.ray.util.queue import Queue

    return Queue


def test_errors_are_the_standard_queue_errors():
    from ray_adapter.ray.util.queue import Empty, Full

    assert issubclass(Empty, std_queue.Empty) and issubclass(Full, std_queue.Full)
    assert not issubclass(Empty, Full) and not issubclass(Full, Empty)


def test_sizes_and_fifo_order(ray, Queue):
    q = Queue(maxsize=2)
    assert (q.empty(), q.full(), len(q), q.qsize(), q.size()) == (True, False, 0, 0, 0)
    q.put("a")
    q.put_nowait("b")
    assert (q.empty(), q.full(), len(q)) == (False, True, 2)
    assert [q.get(), q.get_nowait()] == ["a", "b"]
    q.shutdown(force=True)


def test_a_full_queue_blocks_put_until_a_get_makes_room(ray, Queue):
    q = Queue(maxsize=1)
    q.put(1)
    done = []
    putter = threading.Thread(target=lambda: done.append(q.put(2)))
    putter.start()
    time.sleep(0.5)
    assert not done and q.qsize() == 1  # still blocked
    assert q.get(timeout=30) == 1
    putter.join(30)
    assert done == [None] and q.get(timeout=30) == 2


def test_timeouts_raise_full_and_empty(ray, Queue):
    from ray_adapter.ray.util.queue import Empty, Full

    q = Queue(maxsize=1)
    with pytest.raises(Empty):
        q.get(timeout=0.1)
    with pytest.raises(Empty):
        q.get(block=False)
    q.put("x")
    with pytest.raises(Full):
        q.put("y", timeout=0.1)
    with pytest.raises(Full):
        q.put_nowait("y")
    with pytest.raises(ValueError, match="'timeout' must be a non-negative number"):
        q.put("y", timeout=-1)
    with pytest.raises(ValueError, match="'timeout' must be a non-negative number"):
        q.get(timeout=-0.5)
    assert q.get() == "x"


def test_batches_are_all_or_nothing(ray, Queue):
    from ray_adapter.ray.util.queue import Empty, Full

    q = Queue(maxsize=3)
    q.put_nowait_batch([1, 2])
    with pytest.raises(Full, match="Cannot add 2 items to queue of size 2 and maxsize 3"):
        q.put_nowait_batch([3, 4])
    assert q.qsize() == 2
    with pytest.raises(Empty, match="Cannot get 3 items from queue of size 2"):
        q.get_nowait_batch(3)
    assert q.get_nowait_batch(2) == [1, 2] and q.get_nowait_batch(0) == []
    with pytest.raises(TypeError, match="must be an Iterable"):
        q.put_nowait_batch(7)
    with pytest.raises(TypeError, match="must be an int"):
        q.get_nowait_batch(1.0)
    with pytest.raises(ValueError, match="must be nonnegative"):
        q.get_nowait_batch(-1)


def test_shared_between_producer_and_consumer_actors_and_tasks(ray, Queue):
    q = Queue(maxsize=2)

    @ray.remote
    class Producer:
        def run(self, q, n):
            for i in range(n):
                q.put(i)
            return n

    @ray.remote
    def consume(q, n):
        return [q.get(timeout=30) for _ in range(n)]

    producer = Producer.remote()
    made = producer.run.remote(q, 12)
    assert ray.get(consume.remote(q, 12), timeout=60) == list(range(12))
    assert ray.get(made, timeout=30) == 12 and q.empty()


def test_async_forms(ray, Queue):
    from ray_adapter.ray.util.queue import Empty, Full

    q = Queue(maxsize=1)

    async def use():
        await q.put_async(5)
        with pytest.raises(Full):
            await q.put_async(6, block=False)
        with pytest.raises(Full):
            await q.put_async(6, timeout=0.1)
        got = await q.get_async(timeout=10)
        with pytest.raises(Empty):
            await q.get_async(block=False)
        with pytest.raises(Empty):
            await q.get_async(timeout=0.1)
        return got

    assert asyncio.run(use()) == 5


def test_actor_options_reach_the_queue_actor(ray, Queue):
    before = ray.available_resources().get("CPU", 0)
    q = Queue(actor_options={"name": "q-actor", "num_cpus": 1})
    q.put(1)
    assert "q-actor" in ray.util.list_named_actors()
    assert ray.get(ray.get_actor("q-actor").qsize.remote(), timeout=30) == 1
    assert ray.available_resources().get("CPU", 0) == before - 1  # the actor holds its CPU
    q.shutdown()


@pytest.mark.parametrize("force", [False, True])
def test_shutdown_ends_the_queue_actor(ray, Queue, force):
    q = Queue()
    q.put(1)
    actor = q.actor
    q.shutdown(force=force, grace_period_s=10)
    assert q.actor is None
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(actor.qsize.remote(), timeout=30)


def test_a_queue_survives_pickling_as_one_queue(ray, Queue):
    import pickle

    q = Queue()
    q.put("shared")
    same = pickle.loads(pickle.dumps(q))
    assert same.get(timeout=10) == "shared" and q.empty()
