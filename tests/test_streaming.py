"""Generator tasks and methods: ObjectRefGenerator streaming, errors, backpressure, cancel,
dynamic generators; on real workers of both backends (yr local mode streams in the adapter)."""
import asyncio
import gc
import pickle
import warnings

import pytest


def _gate(ray):
    """An actor a generator can wait on until the driver opens it (no sleeps, no timing)."""
    @ray.remote
    class Gate:
        def __init__(self):
            self.event = asyncio.Event()

        async def open(self):
            self.event.set()

        async def wait(self):
            await self.event.wait()

    return Gate.remote()


def _outcomes(ray, gen):
    out = []
    for ref in gen:
        try:
            out.append(ray.get(ref, timeout=30))
        except Exception as exc:  # noqa: BLE001 - the item's error is what the test looks at
            out.append(exc)
    return out


def test_first_item_reaches_the_caller_before_the_last_is_produced(ray):
    gate = _gate(ray)

    @ray.remote
    def produce(gate):
        yield "first"
        ray.get(gate.wait.remote())  # only the driver, holding the first item, opens it
        yield "second"

    gen = produce.remote(gate)
    assert isinstance(gen, ray.ObjectRefGenerator)
    assert ray.get(next(gen), timeout=30) == "first"
    gate.open.remote()
    assert ray.get(next(gen), timeout=30) == "second"
    with pytest.raises(StopIteration):
        next(gen)
    assert gen.is_finished() and ray.get(gen.completed()) is None


def test_generator_protocol_as_ray(ray):
    @ray.remote
    def count(n):
        for i in range(n):
            yield i

    gen = count.remote(3)
    assert iter(gen) is gen and gen.__aiter__() is gen
    assert [ray.get(r) for r in gen] == [0, 1, 2]
    with pytest.raises(StopIteration):
        next(gen)
    assert gen.is_finished() and not gen.next_ready()
    assert ray.get(gen) is gen  # Ray returns a generator given to ray.get as it is
    with pytest.raises(TypeError, match="Serializing a ObjectRefGenerator is not allowed"):
        pickle.dumps(gen)
    with pytest.raises(TypeError, match="Could not serialize the put value"):
        ray.put(count.remote(1))
    for call in (lambda: gen.send(None), lambda: gen.throw(None), gen.close):
        with pytest.raises(NotImplementedError):
            call()
    explicit = count.options(num_returns="streaming").remote(2)
    assert [ray.get(r) for r in explicit] == [0, 1]
    assert ray.ObjectRefGenerator is ray.actor.ObjectRefGenerator is ray.remote_function.ObjectRefGenerator


def test_an_exception_at_item_k_comes_after_k_good_items(ray):
    class Boom(Exception):
        def __init__(self, code):
            super().__init__(f"boom {code}")
            self.code = code

    @ray.remote
    def flaky(k):
        for i in range(k):
            yield i
        raise Boom(7)

    out = _outcomes(ray, flaky.remote(3))
    assert out[:3] == [0, 1, 2] and len(out) == 4
    err = out[3]
    assert isinstance(err, ray.exceptions.RayTaskError) and isinstance(err, Boom) and err.code == 7
    gen = flaky.remote(0)
    assert isinstance(_outcomes(ray, gen)[0], Boom)
    assert ray.get(gen.completed()) is None  # the task itself completed, as in Ray


def test_generator_methods_sync_and_async(ray):
    @ray.remote
    class Source:
        def count(self, n):
            for i in range(n):
                yield i * 10

        async def acount(self, n):
            for i in range(n):
                await asyncio.sleep(0)
                yield i

        @ray.method(num_returns="streaming")
        def marked(self):
            yield "m"

    s = Source.remote()
    assert [ray.get(r) for r in s.count.remote(3)] == [0, 10, 20]
    assert [ray.get(r) for r in s.acount.remote(3)] == [0, 1, 2]
    assert [ray.get(r) for r in s.marked.remote()] == ["m"]
    assert [ray.get(r) for r in s.count.options(num_returns="streaming").remote(1)] == [0]
    assert ray.get(s.count.options(num_returns=2).remote(2)) == [0, 10]  # an integer: plain returns

    async def consume():
        return [await ref async for ref in s.acount.remote(4)]

    assert asyncio.run(consume()) == [0, 1, 2, 3]


def test_wait_accepts_generators(ray):
    gate = _gate(ray)

    @ray.remote
    def later(gate):
        ray.get(gate.wait.remote())
        yield 1

    gen = later.remote(gate)
    ready, pending = ray.wait([gen], timeout=0.2)
    assert ready == [] and pending == [gen]
    gate.open.remote()
    ready, pending = ray.wait([gen], timeout=30)
    assert ready == [gen] and pending == []
    assert gen.next_ready()
    assert ray.get(next(gen)) == 1


def test_backpressure_pauses_the_producer(ray):
    @ray.remote(max_concurrency=2)
    class Producer:
        def __init__(self):
            self.made = 0

        @ray.method(_generator_backpressure_num_objects=2)
        def items(self, n):
            for i in range(n):
                self.made = i + 1
                yield i

        def made_(self):
            return self.made

    p = Producer.remote()
    gen = p.items.remote(8)
    taken = []
    for _ in range(8):
        taken.append(ray.get(next(gen), timeout=30))
        # It may run ahead of the consumer by at most the limit, whatever the timing.
        assert ray.get(p.made_.remote()) <= len(taken) + 2
    assert taken == list(range(8))


def test_a_dropped_stream_releases_a_paused_producer(ray):
    @ray.remote(max_concurrency=2)
    class Producer:
        def __init__(self):
            import threading

            self.done = threading.Event()

        @ray.method(_generator_backpressure_num_objects=1)
        def items(self):
            for i in range(5):
                yield i
            self.done.set()

        def wait_done(self):
            return self.done.wait(30)

    p = Producer.remote()
    gen = p.items.remote()
    assert ray.get(next(gen), timeout=30) == 0
    del gen
    gc.collect()
    assert ray.get(p.wait_done.remote(), timeout=60)  # it ran to its end, as in Ray


def test_cancelling_a_running_stream_ends_it_with_the_cancel(ray):
    @ray.remote
    def forever():
        import time

        i = 0
        while True:
            yield i
            i += 1
            time.sleep(0.02)

    gen = forever.remote()
    assert ray.get(next(gen), timeout=30) == 0
    ray.cancel(gen)
    last = _outcomes(ray, gen)[-1]
    assert isinstance(last, ray.exceptions.TaskCancelledError)
    assert isinstance(last, ray.exceptions.RayTaskError)  # a running task: RayTaskError(...), as Ray

    @ray.remote
    class Source:
        def forever(self):
            import time

            i = 0
            while True:
                yield i
                i += 1
                time.sleep(0.02)

        def ping(self):
            return "pong"

    s = Source.remote()
    gen = s.forever.remote()
    assert ray.get(next(gen), timeout=30) == 0
    ray.cancel(gen)
    last = _outcomes(ray, gen)[-1]
    assert isinstance(last, ray.exceptions.TaskCancelledError)
    assert ray.get(s.ping.remote(), timeout=30) == "pong"  # it stopped at its next item


def test_dynamic_generators(ray):
    with pytest.warns(DeprecationWarning, match="num_returns='dynamic' is deprecated"):
        @ray.remote(num_returns="dynamic")
        def split(n):
            for i in range(n):
                yield i
            raise ValueError("after the items")

    ref = split.remote(2)
    assert isinstance(ref, ray.ObjectRef)
    dyn = ray.get(ref, timeout=30)
    assert isinstance(dyn, ray.DynamicObjectRefGenerator) and len(dyn) == 3
    out = [r for r in dyn]
    assert ray.get(out[:2]) == [0, 1]
    with pytest.raises(ValueError, match="after the items"):
        ray.get(out[2])

    @ray.remote
    class Source:
        def items(self):
            yield "a"
            yield "b"

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        dyn = ray.get(Source.remote().items.options(num_returns="dynamic").remote(), timeout=30)
    assert [ray.get(r) for r in dyn] == ["a", "b"]

    # An ObjectRef yielded is stored as a value, as in Ray (ray.put refuses an ObjectRef, so a
    # dynamic generator that stored its items with ray.put failed with TypeError here).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)

        @ray.remote(num_returns="dynamic")
        def refs():
            yield ray.put(7)

    inner, = list(ray.get(refs.remote(), timeout=30))
    value = ray.get(inner, timeout=30)
    assert isinstance(value, ray.ObjectRef) and ray.get(value, timeout=30) == 7


def test_generator_modes_need_generator_functions(ray):
    def plain():
        return 1

    for mode in ("streaming", "dynamic"):
        with pytest.raises(ValueError, match="can only be used with generator functions"):
            ray.remote(num_returns=mode)(plain)

    @ray.remote
    class A:
        def m(self):
            return 1

    with pytest.raises(ValueError, match="can only be used with generator functions"):
        A.remote().m.options(num_returns="streaming")

    @ray.remote(num_returns=1)
    def first():
        yield "only the first"
        yield "dropped"

    assert ray.get(first.remote(), timeout=30) == "only the first"  # as Ray


def test_a_task_consumes_another_tasks_stream(ray):
    @ray.remote
    def count(n):
        for i in range(n):
            yield i

    @ray.remote
    def total(n):
        return sum(ray.get(ref) for ref in count.remote(n))

    assert ray.get(total.remote(5), timeout=60) == 10


@pytest.mark.embedded_only("yr local mode runs tasks as threads of the driver: os._exit would end the test")
def test_items_before_a_crash_arrive_and_retries_do_not_repeat_them(ray, tmp_path):
    @ray.remote(max_retries=0)
    def dies():
        import os

        yield 1
        os._exit(1)

    out = _outcomes(ray, dies.remote())
    assert out[0] == 1 and isinstance(out[1], ray.exceptions.WorkerCrashedError)

    marker = str(tmp_path / "crashed")

    @ray.remote(max_retries=1)
    def once(path):
        import os

        for i in range(4):
            yield i
            if i == 1 and not os.path.exists(path):
                open(path, "w").close()
                os._exit(1)

    assert _outcomes(ray, once.remote(marker)) == [0, 1, 2, 3]  # the retry's 0 and 1 are not repeated


@pytest.mark.embedded_only("counts the embedded runtime's object table")
def test_consumed_items_are_freed(ray):
    from ray_adapter import core

    @ray.remote
    def count(n):
        for i in range(n):
            yield bytes(1000)

    backend = core.current()
    gen = count.remote(1)
    list(gen)
    del gen
    gc.collect()
    backend.flush_releases()
    before = len(backend.objects)
    for _ in range(3):
        gen = count.remote(50)
        assert sum(len(ray.get(r)) for r in gen) == 50_000
        del gen
    gc.collect()
    backend.flush_releases()
    assert len(backend.objects) <= before


class _FakeStream:
    """A core worker's stream calls, scripted: ``items`` the refs ``try_read`` hands out in
    turn (None: not there yet), then the end of the stream."""

    def __init__(self, ray, items):
        self.ray, self.items, self.peeked, self.deleted = ray, list(items), [], 0

    def try_read_next_object_ref_stream(self, generator_ref):
        if not self.items:
            raise self.ray.exceptions.ObjectRefStreamEndOfStreamError("")
        item = self.items.pop(0)
        return self.ray.ObjectRef.nil() if item is None else item

    def peek_object_ref_stream(self, generator_ref):
        ref = self.ray.ObjectRef.from_random()
        self.peeked.append(ref)
        return ref, False

    def async_delete_object_ref_stream(self, generator_ref):
        self.deleted += 1


def test_the_generator_reads_through_its_workers_core_worker_as_rays_does(ray_module, monkeypatch):
    """ObjectRefGenerator(ref, worker) takes its items from ``worker.core_worker`` and waits
    with the public ``ray.wait`` / ``ray.get`` (Ray's own tests drive it so, with a mocked core
    worker): not there -> peek, wait, nil on a timeout; there -> that ref; end of stream ->
    ``ray.get`` of the completion decides: StopIteration, or the completion ref once if the
    task failed."""
    ray = ray_module
    first, second = ray.ObjectRef.from_random(), ray.ObjectRef.from_random()
    stream = _FakeStream(ray, [None, first, None, second])
    worker = type("Worker", (), {"core_worker": stream})()
    completion = ray.ObjectRef.from_random()
    generator = ray.ObjectRefGenerator(completion, worker)
    waits = []
    monkeypatch.setattr(ray, "wait", lambda refs, **kw: (waits.append((refs, kw)) or ([], refs)))
    assert generator._next_sync(timeout_s=0).is_nil()  # not there: peeked, waited, nothing
    assert waits == [([stream.peeked[0]], {"timeout": 0, "fetch_local": False})]
    assert generator._next_sync(timeout_s=0) == first  # there: no wait
    monkeypatch.setattr(ray, "wait", lambda refs, **kw: (refs, []))
    assert generator._next_sync(timeout_s=5) == second  # waited until it came
    monkeypatch.setattr(ray, "get", lambda ref, timeout=None: None)
    with pytest.raises(StopIteration):
        generator._next_sync()
    failed = ray.ObjectRefGenerator(completion, type("Worker", (), {"core_worker": _FakeStream(ray, [])})())

    def task_failed(ref, timeout=None):
        raise ray.exceptions.WorkerCrashedError()

    monkeypatch.setattr(ray, "get", task_failed)
    assert failed._next_sync() == completion  # the failure is the last item
    with pytest.raises(StopIteration):
        failed._next_sync()
    del generator
    gc.collect()
    assert stream.deleted == 1  # dropping it tells the core worker


def test_a_streamed_item_passed_to_a_task_is_resolved_as_any_argument(ray):
    """yr-local crashed here (the item is the adapter's, not in yr's store): a good item is
    the task's value, a failed one fails the task quoting it, as in Ray."""
    @ray.remote
    def gen():
        yield 1
        raise KeyError("item")

    @ray.remote
    def ident(x):
        return x

    stream = gen.remote()
    good, bad = next(stream), next(stream)
    assert ray.get(ident.remote(good), timeout=30) == 1
    with pytest.raises(KeyError) as info:
        ray.get(ident.remote(bad), timeout=30)
    assert "At least one of the input arguments" in str(info.value)
