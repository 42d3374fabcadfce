"""ray.util.queue: a bounded queue between producer and consumer actors, the blocking and
non-blocking forms, batches, timeouts, Empty / Full, async use and shutdown."""
import asyncio
import queue as std_queue

import ray
from ray.util.queue import Empty, Full, Queue

ray.init(num_cpus=2)


@ray.remote
class Producer:
    def __init__(self, q, tag):
        self.q = q
        self.tag = tag

    def produce(self, n):
        for i in range(n):
            self.q.put((self.tag, i))  # blocks while the bounded queue is full
        return n


@ray.remote
class Consumer:
    def __init__(self, q):
        self.q = q

    def consume(self, n):
        return [self.q.get(timeout=30) for _ in range(n)]


@ray.remote
def drain(q):
    out = []
    while True:
        try:
            out.append(q.get(block=False))
        except Empty:
            return out


q = Queue(maxsize=3)
print("empty/full/len:", q.empty(), q.full(), len(q), q.qsize(), q.size())
producers = [Producer.remote(q, tag) for tag in ("a", "b")]
consumer = Consumer.remote(q)
made = [p.produce.remote(10) for p in producers]
got = ray.get(consumer.consume.remote(20))
print("produced:", ray.get(made))
print("consumed in order per producer:",
      all([i for t, i in got if t == tag] == list(range(10)) for tag in ("a", "b")), len(got))
print("after:", q.empty(), len(q))

# Non-blocking forms and their errors.
q.put_nowait(1)
q.put(2, block=False)
q.put(3)
print("full:", q.full(), q.qsize())
for attempt in (lambda: q.put_nowait(4), lambda: q.put(4, block=False), lambda: q.put(4, timeout=0.2)):
    try:
        attempt()
    except Full as e:
        print("Full raised:", isinstance(e, std_queue.Full), isinstance(e, Full))
print("get:", q.get(), q.get_nowait(), q.get(block=False))
for attempt in (lambda: q.get_nowait(), lambda: q.get(block=False), lambda: q.get(timeout=0.2)):
    try:
        attempt()
    except Empty as e:
        print("Empty raised:", isinstance(e, std_queue.Empty), isinstance(e, Empty))
for bad in (lambda: q.put(1, timeout=-1), lambda: q.get(timeout=-1), lambda: q.get_nowait_batch(-1)):
    try:
        bad()
    except ValueError as e:
        print("ValueError:", e)
for bad in (lambda: q.put_nowait_batch(5), lambda: q.get_nowait_batch("2")):
    try:
        bad()
    except TypeError as e:
        print("TypeError:", e)

# Batches: all or nothing.
q.put_nowait_batch([10, 11])
try:
    q.put_nowait_batch([12, 13])
except Full as e:
    print("batch Full:", str(e).splitlines()[-1].split(": ", 1)[-1])
print("qsize after refused batch:", q.qsize())
try:
    q.get_nowait_batch(3)
except Empty as e:
    print("batch Empty:", str(e).splitlines()[-1].split(": ", 1)[-1])
print("batch get:", q.get_nowait_batch(2), q.get_nowait_batch(0))

# Unbounded, shared with a task.
big = Queue()
big.put_nowait_batch(list(range(50)))
print("drained by a task:", ray.get(drain.remote(big)) == list(range(50)), big.empty())


# Async use from the driver.
async def async_use():
    aq = Queue(maxsize=1)
    await aq.put_async("x")
    try:
        await aq.put_async("y", block=False)
    except Full:
        print("async Full")
    try:
        await aq.put_async("y", timeout=0.2)
    except Full:
        print("async Full after timeout")
    first = await aq.get_async()
    try:
        await aq.get_async(block=False)
    except Empty:
        print("async Empty")
    try:
        await aq.get_async(timeout=0.2)
    except Empty:
        print("async Empty after timeout")
    aq.shutdown(force=True)
    return first


print("async got:", asyncio.run(async_use()))

# A consumer blocked on an empty queue is woken by a later put.
wq = Queue()
waiting = Consumer.remote(wq).consume.remote(2)
wq.put("late-1")
wq.put("late-2")
print("woken consumer:", ray.get(waiting))

# actor_options reach the queue's actor; shutdown ends it.
rq = Queue(actor_options={"num_cpus": 1, "name": "the-queue"})
rq.put("kept")
print("named queue actor:", "the-queue" in ray.util.list_named_actors())
rq.shutdown()
print("after shutdown:", rq.actor)
q.shutdown(force=True)
big.shutdown(grace_period_s=10)
print("done")
