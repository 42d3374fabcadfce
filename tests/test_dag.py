"""ray.dag with real workers on both backends: .bind() on functions, actor classes and
methods, InputNode and its parts, MultiOutputNode, execute(), experimental_compile() (the
differential program tests/programs/dags.py compares the same with real Ray)."""
import asyncio
import time

import pytest

pytestmark = pytest.mark.filterwarnings(r"ignore:DAGNode\.execute\(\) is deprecated")


@pytest.fixture
def dag(ray):
    import ray_adapter.ray.dag as dag

    return dag


def test_function_graph_with_input_parts(ray, dag):
    @ray.remote
    def add(a, b):
        return a + b

    with dag.InputNode() as inp:
        graph = add.bind(add.bind(inp[0], inp["k"]), {"not": "a node"}["not"] and 0)
        parts = add.bind(inp.x, inp.y)
    ref = graph.execute(1, k=2)
    assert isinstance(ref, ray.ObjectRef) and ray.get(ref) == 3
    assert ray.get(graph.execute(10, k=20)) == 30  # a graph runs again with new input

    class P:
        x, y = 4, 5

    assert ray.get(parts.execute(P())) == 9
    assert graph.get_args()[1] == 0 and isinstance(graph.get_args()[0], dag.FunctionNode)


def test_nodes_nested_in_containers_and_shared_nodes_run_once(ray, dag):
    @ray.remote
    class Counter:
        def __init__(self):
            self.n = 0

        def bump(self, x):
            self.n += 1
            return x

        def count(self):
            return self.n

    @ray.remote
    def gather(d):
        return sorted(ray.get(list(d.values())))

    counter = Counter.remote()
    with dag.InputNode() as inp:
        shared = counter.bump.bind(inp)
        graph = gather.bind({"a": shared, "b": shared})
    assert ray.get(graph.execute(7), timeout=30) == [7, 7]
    assert ray.get(counter.count.remote()) == 1


def test_class_nodes_make_an_actor_per_execution_and_keep_bind_order(ray, dag):
    @ray.remote
    class Log:
        def __init__(self):
            self.items = []

        def add(self, x):
            self.items.append(x)
            return list(self.items)

    with dag.InputNode() as inp:
        log = Log.bind()
        first = log.add.bind(inp)
        second = log.add.bind("after")
        out = dag.MultiOutputNode([second, first])
    assert ray.get(out.execute("x"), timeout=30) == [["x", "after"], ["x"]]
    assert ray.get(out.execute("y"), timeout=30) == [["y", "after"], ["y"]]  # a new actor
    assert isinstance(log, dag.ClassNode) and isinstance(first, dag.ClassMethodNode)
    with pytest.raises(AttributeError):
        log.no_such_method


def test_long_chains_execute_without_deep_recursion(ray, dag):
    @ray.remote
    def inc(x):
        return x + 1

    with dag.InputNode() as inp:
        node = inp
        for _ in range(400):
            node = inc.bind(node)
    assert ray.get(node.execute(0), timeout=120) == 400


def test_input_node_must_be_used_as_a_context_manager(ray, dag):
    @ray.remote
    def ident(x):
        return x

    with pytest.raises(ValueError, match="should not take any args"):
        dag.InputNode(1)
    with pytest.raises(AssertionError, match="context manager"):
        ident.bind(dag.InputNode()).execute(1)


def test_compiled_graph_runs_the_same_graph(ray, dag):
    @ray.remote
    class Stage:
        def __init__(self, k):
            self.k = k

        def f(self, x):
            return x * self.k

        def slow(self, x):
            time.sleep(2)
            return x

    a, b = Stage.remote(2), Stage.remote(3)
    with dag.InputNode() as inp:
        compiled = dag.MultiOutputNode([a.f.bind(inp), b.f.bind(a.f.bind(inp))]).experimental_compile()
    refs = compiled.execute(5)
    from ray_adapter.ray.experimental.compiled_dag_ref import CompiledDAGRef  # where Ray's docs import it

    assert all(isinstance(r, CompiledDAGRef) for r in refs) and len(refs) == 2
    assert ray.get(refs, timeout=30) == [10, 30]
    with pytest.raises(ValueError, match="only be called once"):
        ray.get(refs[0])
    with pytest.raises(ValueError, match="must be a list of CompiledDAGRefs"):
        ray.get([ray.put(1)] + compiled.execute(1))
    compiled.teardown()
    with pytest.raises(ray.exceptions.RayChannelError):
        compiled.execute(1)

    with dag.InputNode() as inp:
        slow = a.slow.bind(inp).experimental_compile()
    with pytest.raises(ray.exceptions.RayChannelTimeoutError, match="RAY_CGRAPH_get_timeout"):
        slow.execute(1).get(timeout=0.1)
    slow.teardown()


def test_compiled_graph_async(ray, dag):
    @ray.remote
    class Echo:
        def echo(self, x):
            return x

    e = Echo.remote()

    async def run():
        with dag.InputNode() as inp:
            compiled = e.echo.bind(inp).experimental_compile(enable_asyncio=True)
        with pytest.raises(ValueError, match="Use execute_async"):
            compiled.execute(1)
        fut = await compiled.execute_async("hi")
        value = await fut
        compiled.teardown()
        return type(fut).__name__, value

    assert asyncio.run(run()) == ("CompiledDAGFuture", "hi")


def test_results_dropped_unread_give_their_place_back(ray, dag):
    """As Ray's: a CompiledDAGRef (or future) dropped without a get lets its result go, so a
    loop that never reads keeps running past _max_inflight_executions, and a multi-output
    graph read for one output keeps none of the other's values."""
    import gc

    @ray.remote
    class Echo:
        def echo(self, x):
            return x

    e = Echo.remote()
    with dag.InputNode() as inp:
        compiled = e.echo.bind(inp).experimental_compile(_max_inflight_executions=3)
    for i in range(20):
        compiled.execute(i)  # dropped at once
    assert ray.get(compiled.execute("last"), timeout=30) == "last"
    held = [compiled.execute(i) for i in range(3)]  # held: their places are taken
    with pytest.raises(ray.exceptions.RayCgraphCapacityExceeded):
        compiled.execute(3)
    assert ray.get(held, timeout=30) == [0, 1, 2]
    compiled.teardown()

    with dag.InputNode() as inp:
        both = dag.MultiOutputNode([e.echo.bind(inp), e.echo.bind(inp)]).experimental_compile()
    for i in range(30):
        first, second = both.execute(i)
        assert ray.get(first, timeout=30) == i
        del second
    gc.collect()
    kept = getattr(both._channels, "_results", {})  # the pipes' driver side (None: classic path)
    assert not kept, f"{len(kept)} results nobody can read are kept"
    both.teardown()

    async def run():
        with dag.InputNode() as inp:
            compiled = e.echo.bind(inp).experimental_compile(enable_asyncio=True, _max_inflight_executions=2)
        for i in range(6):
            await compiled.execute_async(i)  # the future dropped unawaited
        value = await (await compiled.execute_async("last"))
        compiled.teardown()
        return value

    assert asyncio.run(run()) == "last"


def _cgraph_threads(self):
    import os
    import threading

    return os.getpid(), sum(t.name == "ray-adapter-cgraph" for t in threading.enumerate())


def _loop_threads(ray, *actors):
    """The compiled-graph loop threads of the actors' processes (yr-local: one process)."""
    return sum(dict(ray.get([a.__ray_call__.remote(_cgraph_threads) for a in actors])).values())


def _wait_for(predicate, seconds=30):
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_compiled_graph_runs_on_pipes_and_leaves_nothing(ray, dag, monkeypatch):
    import os
    import tempfile

    # The directories this graph's compile makes, by name: other processes (CI runs two suites at
    # once) make and remove their own in the same temporary directory meanwhile.
    made, mkdtemp = [], tempfile.mkdtemp
    monkeypatch.setattr(tempfile, "mkdtemp", lambda *a, **k: made.append(mkdtemp(*a, **k)) or made[-1])

    @ray.remote
    class Stage:
        def f(self, x):
            return (x, "seen")

    a, b = Stage.remote(), Stage.remote()
    with dag.InputNode() as inp:
        compiled = b.f.bind(a.f.bind(inp)).experimental_compile()
    assert compiled._channels is not None  # the pipes carry it, not the classic path
    ours = [path for path in made if os.path.basename(path).startswith("ray-adapter-cg-")]
    assert len(ours) == 1 and not os.path.exists(ours[0])  # FIFOs removed once open
    assert ray.get(compiled.execute(None)) == ((None, "seen"), "seen")  # None is an input like any
    assert [ray.get(compiled.execute(i))[0][0] for i in range(50)] == list(range(50))
    assert _loop_threads(ray, a, b) == 2
    compiled.teardown()
    _wait_for(lambda: _loop_threads(ray, a, b) == 0)


def test_compiled_failure_skips_what_takes_it_and_the_next_step_runs(ray, dag):
    import threading

    @ray.remote
    class Stage:
        def __init__(self):
            self.calls = 0

        def f(self, x):
            self.calls += 1
            if x == "boom":
                raise KeyError("boom")
            if x == "lock":
                return threading.Lock()  # does not pickle
            return x

        def count(self):
            return self.calls

    a, b = Stage.remote(), Stage.remote()
    with dag.InputNode() as inp:
        compiled = b.f.bind(a.f.bind(inp)).experimental_compile()
    with pytest.raises(ray.exceptions.RayTaskError) as info:
        ray.get(compiled.execute("boom"))
    assert isinstance(info.value, KeyError) and "Stage.__ray_call__" in str(info.value)
    assert ray.get(b.count.remote()) == 0  # b's node took a's failure: it did not run
    with pytest.raises(ray.exceptions.RayTaskError, match="pickle"):
        ray.get(compiled.execute("lock"))
    assert ray.get(compiled.execute(7)) == 7
    compiled.teardown()


def test_compiled_graph_serves_many_threads(ray, dag):
    import concurrent.futures

    @ray.remote
    class Stage:
        def __init__(self, k):
            self.k = k

        def f(self, x):
            return (x[0], x[1] + self.k)

    a, b = Stage.remote(1), Stage.remote(10)
    with dag.InputNode() as inp:
        compiled = b.f.bind(a.f.bind(inp)).experimental_compile()

    def run(thread):
        return [ray.get(compiled.execute((thread, i)), timeout=60) for i in range(40)]

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(run, range(8)))
    assert results == [[(t, i + 11) for i in range(40)] for t in range(8)]
    compiled.teardown()


def test_compiled_graph_the_pipes_cannot_carry_runs_the_classic_path(ray, dag):
    @ray.remote
    class Stage:
        async def f(self, x):
            return x + 1

        def g(self, x):
            return x * 2

    a = Stage.remote()
    with dag.InputNode() as inp:
        compiled = a.g.bind(a.f.bind(inp)).experimental_compile()
    assert compiled._channels is None
    assert [ray.get(compiled.execute(i)) for i in range(3)] == [2, 4, 6]
    compiled.teardown()
    b = Stage.remote()
    with dag.InputNode() as inp:
        nested = b.g.bind([a.g.bind(inp)])  # a node inside a list: Ray refuses it
    with pytest.raises(ValueError, match="Found 1 DAGNodes from the arg"):
        nested.experimental_compile()
    with dag.InputNode() as inp:
        unfed = dag.MultiOutputNode([a.g.bind(inp), b.g.bind(1)])  # b.g takes no node
    with pytest.raises(ValueError, match="require each task to take a ray.dag.InputNode"):
        unfed.experimental_compile()


def test_compiled_graph_with_large_values_never_deadlocks(ray, dag):
    import numpy as np

    @ray.remote
    class Stage:
        def big(self, n):
            return np.full(n, 2.0)

        def small(self, array):
            return float(array[0])

        def forward(self, x):
            return x

        def combine(self, array, x):
            return float(array.sum()) + x

    a, b, c = Stage.remote(), Stage.remote(), Stage.remote()
    with dag.InputNode() as inp:
        first = a.big.bind(inp)  # 16 MB: far more than a pipe holds
        # b's first node waits on c's pipe while a's large value waits on b's pipe
        out = b.combine.bind(first, b.forward.bind(c.forward.bind(a.small.bind(first))))
    compiled = out.experimental_compile()
    n = 2_000_000
    refs = [compiled.execute(n) for _ in range(3)]  # three in flight: execute never blocks
    assert [ray.get(r, timeout=60) for r in refs] == [2.0 * n + 2.0] * 3
    with dag.InputNode() as inp:
        fanout = dag.MultiOutputNode([c.small.bind(b.forward.bind(a.big.bind(inp))), b.forward.bind(a.big.bind(inp))])
    both = fanout.experimental_compile()
    small_ref, big_ref = both.execute(n)
    assert ray.get(small_ref, timeout=60) == 2.0 and ray.get(big_ref, timeout=60).shape == (n,)
    compiled.teardown()
    both.teardown()


def test_compiled_graph_inputs_gets_and_shutdown_as_in_ray(ray, dag):
    @ray.remote
    class Stage:
        def f(self, *args):
            return args

    a = Stage.remote()
    with dag.InputNode() as inp:
        direct = a.f.bind(inp).experimental_compile()
    with pytest.raises(ValueError, match="must be called with 1 positional args, got 2"):
        direct.execute(1, 2)
    ref = direct.execute(1)
    _wait_for(lambda: bool(direct._channels is None or direct._channels._outputs[0].reader.wait(0)))
    assert ray.get(ref, timeout=0) == (1,)  # already there: a zero timeout still takes it
    slow = direct.execute(2)
    direct.teardown()
    with dag.InputNode() as inp:
        parts = a.f.bind(inp[1], inp.key).experimental_compile()
    with pytest.raises(ValueError, match="must be called with 2 positional args, got 1"):
        parts.execute(1, key=3)
    with pytest.raises(ValueError, match="must be called with kwarg `key`"):
        parts.execute(1, 2)
    assert ray.get(parts.execute("x", "y", key="k")) == ("y", "k")
    with dag.InputNode() as inp:
        with pytest.raises(ValueError, match="All tasks must either use InputNode"):
            dag.MultiOutputNode([a.f.bind(inp), a.f.bind(inp[0])]).experimental_compile()
    pending = parts.execute(1, 2, key=3)
    ray.shutdown()
    with pytest.raises(ray.exceptions.RayChannelError):
        parts.execute(1, 2, key=3)
    with pytest.raises(ray.exceptions.RayError):
        ray.get(pending, timeout=10)
    assert not ray.is_initialized()  # finding why the graph ended did not start a runtime
    del slow


def test_compile_refuses_what_ray_refuses(ray, dag):
    @ray.remote
    def f(x):
        return x

    @ray.remote
    class A:
        def m(self, x):
            return x

    with dag.InputNode() as inp:
        fn_graph = f.bind(inp)
    with pytest.raises(NotImplementedError, match="only support actor method nodes"):
        fn_graph.experimental_compile()
    with dag.InputNode() as inp:
        created = A.bind().m.bind(inp)
    with pytest.raises(ValueError, match="already created with Actor.remote"):
        created.experimental_compile()
    with pytest.raises(ValueError, match="No InputNode found"):
        A.remote().m.bind(1).experimental_compile()
    handle = A.remote()
    with dag.InputNode() as inp:
        one, two = handle.m.bind(inp), handle.m.bind(inp)
    # Ray checks the whole graph: two takes the same input and its result reaches no output.
    with pytest.raises(ValueError, match=r"doesn't support leaf nodes.*1 leaf nodes.*\['m'\]"):
        one.experimental_compile()
    with pytest.raises(ValueError, match="compiled more than once"):  # one's compile marked it
        two.experimental_compile()
    with dag.InputNode() as inp:
        graph = handle.m.bind(inp["x"])
        inp["y"]  # an input attribute the output does not need
    with pytest.raises(ValueError, match="using all of attributes x, y, but y is unused"):
        graph.experimental_compile()


def test_gaps_are_documented(ray, dag):
    from ray_adapter import gaps

    @ray.remote
    def f():
        return 1

    with pytest.raises(gaps.RayAdapterGapError, match="ray.dag.plot"):
        dag.plot
    with pytest.raises(gaps.RayAdapterGapError, match="with_tensor_transport"):
        f.bind().with_tensor_transport()
