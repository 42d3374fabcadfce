"""The core's value serialization: which values take the plain-pickle fast path, and the shared
serialized form of a call without arguments (no runtime needed)."""
import pickle
import threading

import pytest

from ray_adapter.core import errors, serialization
from ray_adapter.core.execution import serialize_args


class _Custom:
    pass


@pytest.mark.parametrize("value", [
    None, True, 3, 2.5, "s", b"b", (), [], {},
    ((), {}), ((1, "a"), {"k": 2.0}), [1, [2, [3]]], {"a": {"b": (None,)}},
    tuple(range(16)), {str(i): i for i in range(16)},
])
def test_builtin_values_take_the_plain_pickle_path(value):
    assert serialization._is_plain(value)
    ser = serialization.dumps(value)
    assert ser.data == pickle.dumps(value, protocol=5) and not ser.buffers
    assert serialization.loads(ser) == value


@pytest.mark.parametrize("value", [
    _Custom(), {1, 2}, [[[[1]]]], tuple(range(17)), {str(i): i for i in range(17)}, {1: "int key"},
    (1, _Custom()), {"k": [_Custom()]}, bytearray(b"x"),
])
def test_other_values_go_through_cloudpickle(value):
    assert not serialization._is_plain(value)
    back = serialization.loads(serialization.dumps(value))
    assert type(back) is type(value)


def test_a_call_without_arguments_shares_one_serialized_form():
    first, second = serialize_args((), {}), serialize_args((), {})
    assert first is second is serialization.NO_ARGS
    assert serialization.loads(first) == ((), {})
    assert not first.buffers and not first.refs and not first.handles
    assert serialization.loads(serialize_args((1,), {})) == ((1,), {})  # others: their own


def test_an_unserializable_argument_is_named():
    with pytest.raises(errors.Unserializable) as info:
        serialize_args((1, threading.Lock()), {})
    assert "lock" in info.value.value_repr


def test_a_torch_state_dict_travels_out_of_band_and_comes_back_writable_and_its_own():
    """torch pickles a storage by torch.save into the pickle's bytes; its bytes travel out of
    band instead (one buffer per tensor; large ones in shared memory), and the reader gets a
    writable tensor of its own, as from Ray (tests/programs/torch_values.py compares the rest)."""
    torch = pytest.importorskip("torch")
    weight = torch.arange(1 << 20, dtype=torch.float32)  # 4 MB: shared memory
    state = {"weight": weight, "bias": torch.ones(3, dtype=torch.bfloat16)}
    ser = serialization.dumps(state)
    assert len(ser.buffers) == 2 and len(ser.data) < 4096  # no tensor bytes inside the pickle
    back = serialization.loads(ser)
    assert torch.equal(back["weight"], weight) and back["bias"].dtype == torch.bfloat16
    back["weight"][0] = 5.0  # writable, and a copy: the stored bytes are unchanged
    assert float(serialization.loads(ser)["weight"][0]) == 0.0 and float(weight[0]) == 0.0
