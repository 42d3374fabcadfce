"""The embedded runtime's components on their own, in this process: each built from its
constructor's named collaborators (the real scheduler and object table where the component
needs them, small fakes of a worker process and of the worker pool), as Ray tests its core
worker's parts apart from a running cluster. The real-process tests cover them wired together."""
import threading
import time

import pytest

from ray_adapter.core import errors, ids, serialization
from ray_adapter.core.embedded import protocol
from ray_adapter.core.embedded.demands import InfeasibleWarnings
from ray_adapter.core.embedded.nodes import Nodes, describe_all, make_head
from ray_adapter.core.embedded.objects import ObjectTable
from ray_adapter.core.embedded.placement import PlacementGroups
from ray_adapter.core.embedded.results import error_data
from ray_adapter.core.embedded.scheduler import Scheduler
from ray_adapter.core.embedded.streams import StreamTable
from ray_adapter.core.interface import InitOptions, NodeSpec
from ray_adapter.core.serialization import Serialized


class FakeWorker:
    """Stands for a worker process's handle: records what is posted to it."""

    def __init__(self):
        self.posted = []
        self.killed = False

    def post(self, message, buffers=()):
        self.posted.append(message)

    def kill_group(self):
        self.killed = True


class FakePool:
    """Stands for the worker pool: the workers it runs per node."""

    def __init__(self):
        self.by_node = {}

    def workers_of(self, node_id):
        return list(self.by_node.get(node_id, ()))


def value(v):
    return serialization.dumps(v)


def head_scheduler(cpus=2):
    return Scheduler([make_head(InitOptions(num_cpus=cpus, memory=10**9, object_store_memory=10**8))])


def read(objects, oid):
    (data, is_error), = objects.values([oid])
    return serialization.loads(data), is_error


# -- the object table: results sealed, handles adopted and let go ---------------------------------
def test_object_table_seals_results_and_adopts_the_handles_inside():
    adopted, freed = [], []
    objects = ObjectTable(on_free_handles=freed.extend, on_adopt_handles=adopted.extend)
    returns = [b"r1", b"r2", b"r3"]
    objects.create(returns, 1, b"task")
    first = value("first")
    with_handle = Serialized(first.data, first.buffers, first.refs, [b"actor-1"])
    failure = error_data(errors.CoreError("boom"))
    # a generator that gave one value, then failed: the first return holds it, the rest the error
    objects.seal_results(returns, [with_handle, failure], is_error=True)
    assert adopted == [b"actor-1"]
    assert read(objects, b"r1") == ("first", False)
    for oid in (b"r2", b"r3"):
        error, is_error = read(objects, oid)
        assert is_error and isinstance(error, errors.CoreError) and "boom" in str(error)
    objects.drop_ref(b"r1")  # its last holder: the value goes, and the handle with it
    assert freed == [b"actor-1"]


# -- placement groups: placed by the real scheduler, ready objects sealed in the real table -------
def test_placement_groups_place_ready_and_remove_with_their_collaborators():
    scheduler, objects = head_scheduler(cpus=2), ObjectTable()
    groups = PlacementGroups(ids=ids.IdFactory(ids.job_id(1)), job_id=ids.job_id(1),
                             namespace="ns", objects=objects, scheduler=scheduler)
    placed = groups.create([{"CPU": 1}, {"CPU": 1}], "PACK", "g", None)
    assert groups.wait(placed, 5) is True
    assert read(objects, groups.ready(placed, value("ok"))) == ("ok", False)
    assert "CPU" not in scheduler.available()  # both CPUs are the group's now
    with pytest.raises(errors.PlacementGroupNameTaken):
        groups.create([{"CPU": 1}], "PACK", "g", None)

    pending = groups.create([{"CPU": 1}], "PACK", None, None)  # no CPU left: it waits
    ready = groups.ready(pending, value("late"))
    assert objects.ready_flags([ready]) == [False]
    groups.remove(placed)  # its CPUs go back: the pending group is placed, its object sealed
    assert scheduler.groups[placed].state == "REMOVED"
    assert read(objects, ready) == ("late", False)
    assert [r["state"] for r in groups.table(pending)] == ["CREATED"]

    groups.remove(pending)
    error, is_error = read(objects, groups.ready(pending, value("never")))
    assert is_error and isinstance(error, errors.PlacementGroupRemoved)
    with pytest.raises(errors.PlacementGroupRemoved):
        groups.wait(pending, 1)


# -- streams: items are objects of the table, takes acknowledged to the producing worker -----------
def test_stream_table_hands_items_in_order_and_acknowledges_takes():
    objects = ObjectTable()
    streams = StreamTable(objects)
    task_id, producer = b"t" * ids.TASK_ID_SIZE, FakeWorker()
    streams.open(task_id, acks=True)
    streams.attach(task_id, producer)
    for i in range(2):
        assert streams.item(task_id, i, value(i * 10), False) is True
    assert streams.item(task_id, 0, value("again"), False) is False  # a retry's repeat
    generator_id = task_id + b"\x00" * (ids.OBJECT_ID_SIZE - ids.TASK_ID_SIZE)
    taken = [streams.next(generator_id, 5), streams.next(generator_id, 5)]
    assert [read(objects, oid)[0] for oid in taken] == [0, 10]
    assert [(m.task_id, m.consumed) for m in producer.posted] == [(task_id, 1), (task_id, 2)]
    with pytest.raises(errors.GetTimeout):
        streams.next(generator_id, 0.05)  # nothing more yet
    streams.end(task_id)
    assert streams.next(generator_id, 5) is None
    assert all(isinstance(m, protocol.StreamAck) for m in producer.posted)


def test_a_stream_consumer_waits_for_the_next_item_and_wakes_when_it_arrives():
    objects = ObjectTable()
    streams = StreamTable(objects)
    task_id = b"w" * ids.TASK_ID_SIZE
    streams.open(task_id, acks=False)
    got = []
    consumer = threading.Thread(target=lambda: got.append(streams.next(task_id + b"\0" * 4, 30)))
    consumer.start()
    streams.item(task_id, 0, value("x"), False)
    consumer.join(30)
    assert not consumer.is_alive() and read(objects, got[0]) == ("x", False)


# -- virtual nodes: resources in the scheduler, their workers killed when removed ---------------
def test_nodes_add_to_the_scheduler_and_removal_kills_their_workers():
    scheduler, pool = head_scheduler(cpus=1), FakePool()
    nodes = Nodes(scheduler=scheduler, pool=pool)
    added = nodes.add(NodeSpec(num_cpus=3, labels={"zone": "b"}))
    assert added["address"] == "127.0.0.2" and added["is_head"] is False
    assert scheduler.total()["CPU"] == 4
    node = scheduler.by_hex[added["node_id"]]
    assert node.labels["zone"] == "b"
    worker = FakeWorker()
    pool.by_node[node.node_id] = [worker]
    nodes.remove(added["node_id"])
    assert worker.killed and not node.alive and scheduler.total()["CPU"] == 1
    nodes.remove(added["node_id"])  # removing it again changes nothing
    assert [n["node_id"] for n in describe_all(scheduler)][1] == added["node_id"]


# -- infeasible warnings: once per resource shape, naming the cluster's total -------------------
def test_infeasible_warnings_are_given_once_per_shape(capfd):
    scheduler = head_scheduler(cpus=1)
    warnings = InfeasibleWarnings(scheduler.total)
    warnings.warn("f", {"GPU": 1})
    warnings.warn("g", {"GPU": 1})
    warnings.warn("h", {"CPU": 64})
    err = capfd.readouterr().err
    assert err.count("which no node can satisfy") == 2
    assert "'f'" in err and "'g'" not in err and "'h'" in err and "'CPU': 1.0" in err


# -- the worker's actor host: an async actor's calls take its slots in arrival order -------------
class FakeActorWorker:
    """Stands for the worker process an actor host answers through: records the answers."""

    actor_id = b"a" * ids.ACTOR_ID_SIZE
    actor_label = None
    exit_actor_after_call = False
    exit_call = None

    def __init__(self):
        self.done = []

    def send_done(self, task_id, reply, retryable=False):
        self.done.append(task_id)


def _on_loop(loop, fn):
    """Run ``fn()`` on ``loop``'s thread and wait for it."""
    done = threading.Event()
    loop.call_soon_threadsafe(lambda: (fn(), done.set()))
    assert done.wait(10)


def test_an_async_actor_gives_its_slots_in_arrival_order_whenever_its_constructor_ends():
    """A call whose first step ran before the constructor ended, and one that arrives just
    after, in the same turn of the loop as the constructor's end: the first still runs first
    (max_concurrency=1), as in Ray. The loop is held so that the second call and the
    constructor's end are queued together; waiting for the constructor before taking a slot
    let the second call take the one slot first."""
    from types import SimpleNamespace

    from ray_adapter.core.embedded.executors import ActorHost
    from ray_adapter.core.embedded.protocol import to_payload
    from ray_adapter.core.execution import serialize_args

    order = []

    class Actor:
        async def call(self, i):
            order.append(i)

    worker = FakeActorWorker()
    host = ActorHost(worker, SimpleNamespace(is_async=True, max_concurrency=1,
                                             concurrency_groups=None, backpressure=-1))
    host.instance, host.actor_cls = Actor(), Actor
    group = host.loops[""]

    def call(i):
        buffers = []
        message = protocol.CallActor(task_id=bytes([i]) * ids.TASK_ID_SIZE, method="call",
                                     args=to_payload(serialize_args((i,), {}), buffers), deps=[],
                                     num_returns=1, name="Actor.call")
        host.accept(message, buffers)

    call(1)
    _on_loop(group.loop, lambda: None)  # its first step ran: it waits for the constructor
    held, release = threading.Event(), threading.Event()
    group.loop.call_soon_threadsafe(lambda: (held.set(), release.wait(10)))
    assert held.wait(10)
    call(2)  # queued on the held loop...
    group.loop.call_soon_threadsafe(group.ready.set)  # ...then the constructor's end, as create() does
    release.set()
    deadline = time.monotonic() + 10
    while len(worker.done) < 2 and time.monotonic() < deadline:
        _on_loop(group.loop, lambda: None)
    assert order == [1, 2] and worker.done == [bytes([1]) * ids.TASK_ID_SIZE, bytes([2]) * ids.TASK_ID_SIZE]
    group.loop.call_soon_threadsafe(group.loop.stop)
