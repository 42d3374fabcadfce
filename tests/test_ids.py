"""The binary layout of the ids the core mints (no runtime needed)."""
from ray_adapter.core import ids


def test_return_ids_are_the_task_id_and_a_little_endian_index():
    factory = ids.IdFactory(ids.job_id(1))
    task_id = factory.task()
    assert len(task_id) == ids.TASK_ID_SIZE
    for count in (1, 2, 3, 16, 17, 40):
        returns = ids.IdFactory.returns(task_id, count)
        assert len(returns) == count
        for index, object_id in enumerate(returns, start=1):
            assert len(object_id) == ids.OBJECT_ID_SIZE
            assert object_id[:ids.TASK_ID_SIZE] == task_id
            assert int.from_bytes(object_id[ids.TASK_ID_SIZE:], "little") == index
    # The first return of a task prints as Ray's do: <task id hex> + 01000000.
    assert ids.IdFactory.returns(task_id, 1)[0].hex() == task_id.hex() + "01000000"


def test_stream_item_ids_follow_the_completion_object():
    task_id = ids.IdFactory(ids.job_id(1)).task()
    assert ids.IdFactory.stream_item(task_id, 0) == task_id + (2).to_bytes(4, "little")
    assert ids.IdFactory.stream_item(task_id, 5) == task_id + (7).to_bytes(4, "little")


def test_a_job_id_is_its_number_little_endian_as_in_ray():
    from ray_adapter.ray import JobID

    assert repr(JobID.from_int(1)) == "JobID(01000000)" and JobID.from_int(2 ** 32 - 1).hex() == "ffffffff"
    assert JobID.from_hex("05000000").int() == 5 and JobID.from_int(7).int() == 7
    for bad, error in ((2 ** 32, AssertionError), (-1, OverflowError), ("1", TypeError)):
        try:
            JobID.from_int(bad)
        except error:
            continue
        raise AssertionError(f"JobID.from_int({bad!r}) did not raise {error.__name__}")
