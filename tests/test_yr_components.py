"""The yuanrong backend's components on their own, in this process: each built from its
constructor's named collaborators (the real object table where a component needs one; for yr,
the recording stand-in of ``yr_recorder``, a fake named so; no Yuanrong cluster runs here),
as ``test_components`` does for the embedded runtime. The conformance suite covers them wired
together on yr's real local mode."""
import concurrent.futures
import threading

import pytest

from ray_adapter.core import errors, ids, serialization
from ray_adapter.core.interface import ActorInfo
from ray_adapter.core.releases import DeferredReleases
from ray_adapter.core.yuanrong import actors as yr_actors
from ray_adapter.core.yuanrong import shell
from ray_adapter.core.yuanrong.objects import ObjectTable
from ray_adapter.core.yuanrong.streams import StreamTable
from yr_recorder import RecordingYr, Ref

JOB = ids.job_id(1)


def object_table(freed=None, reports=None, on_unhandled_error=None):
    releases = DeferredReleases(name="test-releases")
    table = ObjectTable(RecordingYr(), ids.IdFactory(JOB), local_mode=True, local=None,
                        releases=releases, reports=reports, on_unhandled_error=on_unhandled_error,
                        on_free_handles=(lambda handles: freed.append((handles, table._lock.held_by_me())))
                        if freed is not None else (lambda handles: None))
    return table, releases


def holding(*refs, handles=()):
    """A packed value with ``refs`` and ``handles`` pickled inside it."""
    packed = serialization.dumps("a value")
    return shell.Box(True, serialization.Serialized(packed.data, (), list(refs), list(handles)))


# -- the object table: holds, cascading frees, handles handed over outside its lock ---------------
def test_a_freed_value_releases_what_it_holds_down_the_chain_outside_the_lock():
    freed = []
    table, releases = object_table(freed)
    try:
        inner = table.put(1)
        middle = table.put(2)
        table.hold([inner])       # the middle value holds the inner ref ...
        table.hold([middle])      # ... and a result holds the middle one and an actor handle
        table._adopt(([inner], holding()))  # holds nothing: nothing adopted
        result_id = ids.IdFactory.returns(ids.IdFactory(JOB).task(), 1)[0]
        table.new_id(Ref(holding(middle, handles=[b"actor-1"])), object_id=result_id)
        table._adopt(([result_id], holding(middle, handles=[b"actor-1"])))
        table.release_contained(([inner], []))  # the middle value is gone: its hold on inner ...
        table.drop(middle)                       # ... and the program's own refs
        table.drop(inner)
        assert table.entry(inner) is None        # nobody holds inner any more
        assert table.entry(middle) is not None   # the result still holds the middle value
        table.drop(result_id)                    # the result goes: middle, then the handle
        releases.flush()
        assert table.entry(middle) is None
        assert freed == [([b"actor-1"], False)]  # handed over once, the table's lock not held
    finally:
        releases.close()


def test_an_unread_failure_is_reported_once_when_its_last_ref_goes():
    reported = []
    reports = DeferredReleases(name="test-reports")
    table, releases = object_table(reports=reports, on_unhandled_error=reported.append)
    try:
        def failure(text):
            return shell.Box(False, errors.TaskFailed(ValueError(text), text, "f", 1, "127.0.0.1"))

        failed = table.new_id(Ref(failure("boom")))
        read = table.new_id(Ref(failure("seen")))
        with pytest.raises(errors.TaskFailed):
            table.get([read], timeout=5)
        table.remove_local_reference(failed)
        table.remove_local_reference(read)
        releases.flush()
        reports.flush()
        assert [str(e.cause) for e in reported] == ["boom"]
    finally:
        releases.close()
        reports.close()


def test_threads_asking_for_one_object_get_one_future():
    table, releases = object_table()
    try:
        pending = concurrent.futures.Future()
        ref = Ref()
        ref._future = pending
        oid = table.new_id(ref)
        start = threading.Barrier(8)
        seen = []

        def ask():
            start.wait()
            seen.append(table.future_of(oid))

        threads = [threading.Thread(target=ask) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len({id(f) for f in seen}) == 1
        pending.set_result(shell.Box(True, 7))
        assert table.get([oid], timeout=5) == [7]
    finally:
        releases.close()


# -- streams: items are entries of the object table -----------------------------------------------
def test_a_stream_hands_items_in_order_and_its_close_frees_what_was_not_taken():
    table, releases = object_table()
    streams = StreamTable(table, releases, local_mode=False)
    try:
        task_id = ids.IdFactory(JOB).task()
        call = Ref()
        call._future = concurrent.futures.Future()
        [completion] = streams.open_call(lambda: call, task_id, limit=-1)
        stream = streams._stream_of(completion)
        for i in range(3):
            assert stream.put(shell.Box(True, i), block=False)
        first = streams.next(completion, timeout=5)
        assert table.get([first], timeout=5) == [0]
        assert streams.peek(completion) == (ids.IdFactory.stream_item(task_id, 1), False)
        call._future.set_result(shell.Box(True, None))  # the call ended: the stream ends after item 2
        assert table.get([completion], timeout=5) == [None]
        streams.close(completion)
        releases.flush()
        assert table.entry(ids.IdFactory.stream_item(task_id, 1)) is None  # untaken: freed
        assert table.entry(first) is not None  # taken: the consumer's own
    finally:
        releases.close()


# -- actors: an actor out of scope ends after its calls, on the endings thread ----------------------
class _Options:
    max_pending_calls = -1
    max_task_retries = 0


def test_an_actor_whose_handles_are_gone_ends_after_its_calls_and_its_calls_fail_after_a_kill():
    table, releases = object_table()
    endings = DeferredReleases(name="test-endings")
    terminated = []

    class Proxy:
        def __init__(self, name):
            self.name = name
            self.call = self

        def terminate(self, is_sync=False):
            terminated.append(self.name)

    actors_table = yr_actors.ActorTable(RecordingYr(), ids.IdFactory(JOB), table,
                                        StreamTable(table, releases, local_mode=False), None,
                                        job_env=None, local=None, endings=endings, namespace="ns",
                                        local_mode=False)
    try:
        records = []
        for name in ("scoped", "killed"):
            actor_id = ids.IdFactory(JOB).actor()
            info = ActorInfo(actor_id, None, "ns", name, {})
            actors_table._actors[actor_id] = record = yr_actors._Actor(
                actor_id, Proxy(name), info, detached=False, options=_Options())
            records.append(record)
        scoped, killed = records
        calls = []
        for record in records:
            ref = Ref()
            ref._future = concurrent.futures.Future()
            calls.append((ref, table.returns(ref, ids.IdFactory(JOB).task(record.actor_id), 1,
                                             record.actor_id)[0]))
        actors_table.add_handle(scoped.actor_id)
        actors_table.drop_handles([scoped.actor_id])  # its last handle: it waits for its call
        endings.flush()
        assert terminated == [] and not scoped.dead
        calls[0][0]._future.set_result(shell.Box(True, "done"))
        endings.flush()
        assert terminated == ["scoped"] and scoped.death.cause == errors.ActorDeath.OUT_OF_SCOPE
        assert table.get([calls[0][1]], timeout=5) == ["done"]  # its call's result is kept

        actors_table.kill(killed.actor_id, no_restart=True)  # its call in flight fails now
        assert terminated == ["scoped", "killed"]
        with pytest.raises(errors.ActorDied) as died:
            table.get([calls[1][1]], timeout=5)
        assert died.value.cause == errors.ActorDeath.KILLED
    finally:
        endings.close()
        releases.close()


def test_a_dropped_running_call_is_still_waited_for_at_exit_and_nothing_waits_after_close():
    table, releases = object_table()
    try:
        call = Ref()
        call._future = concurrent.futures.Future()
        oid = table.new_id(call)
        table.drop(oid)  # the program let go of it while it runs: exit still gives it its grace
        [ended] = table.unfinished()
        assert not ended.done()
        call._future.set_result(shell.Box(True, 1))
        assert ended.done() and table.unfinished() == []
        gone = errors.NotInitialized("shut down")
        table.close(gone)
        late = table.new_pending(b"late-item")  # a stream item after shutdown: failed at once
        assert late.exception() is gone and table.entry(b"late-item") is None
    finally:
        releases.close()
