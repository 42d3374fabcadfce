"""The embedded object table on its own: which freed errors it reports as unread.

Ray logs "Unhandled error" for an error object freed before anything read it
(tests/programs/unhandled_errors.py checks the whole path against Ray); here the table's rule:
what counts as a read, and that a report is handed over once, for the error's data.
"""
from ray_adapter.core.embedded.objects import ObjectTable


def _table():
    reported = []
    return ObjectTable(on_unread_error=lambda data, owner: reported.append(data)), reported


def _failed(table, oid, refs=1):
    table.create([oid], refs, producer=b"task")
    table.seal(oid, b"error data", is_error=True)


def test_an_error_dropped_unread_is_reported_once():
    table, reported = _table()
    _failed(table, b"a")
    table.drop_ref(b"a")
    table.drop_ref(b"a")
    assert reported == [b"error data"]


def test_an_error_sealed_after_its_last_ref_went_is_reported():
    table, reported = _table()
    table.create([b"a"], 1, producer=b"task")
    table.drop_ref(b"a")  # fire and forget: pending, nothing holds it
    assert reported == []
    table.seal(b"a", b"error data", is_error=True)
    assert reported == [b"error data"]


def test_reads_get_wait_and_dependents_silence_the_report():
    table, reported = _table()
    for oid in (b"get", b"values", b"wait", b"dependent"):
        _failed(table, oid)
    assert table.collect([b"get"]) == [(b"error data", True)]
    table.values([b"values"])
    assert table.ready_flags([b"wait"]) == [True]
    assert table.first_error([b"dependent"]) == b"error data"
    for oid in (b"get", b"values", b"wait", b"dependent"):
        table.drop_ref(oid)
    assert reported == []


def test_values_and_objects_still_held_are_not_reported():
    table, reported = _table()
    table.put(b"v", b"value")
    table.drop_ref(b"v")
    _failed(table, b"held")
    table.close()
    assert reported == []


def test_an_error_inside_a_freed_container_is_reported():
    class Data(bytes):
        refs = (b"inner",)

    table, reported = _table()
    _failed(table, b"inner")
    table.put(b"outer", Data(b"container"))
    table.drop_ref(b"inner")  # the container still holds it
    assert reported == []
    table.drop_ref(b"outer")
    assert reported == [b"error data"]
