"""``ray.util.collective.types``: backend names, reduce operations and per-operation options.

Mirrors Ray 2.60's module of the same name. Importing it never imports torch or cupy (Ray's
imports both): :func:`torch_available` imports torch when called, :func:`cupy_available` only
looks cupy up.
"""
import importlib.util
from datetime import timedelta
from enum import Enum

from ray_adapter import gaps


def torch_available():
    """True when ``torch`` imports (``pip install "ray-adapter[collective]"``); the first call
    imports it, as the first collective call would."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def cupy_available():
    """True when ``cupy`` is installed (cupy arrays are then accepted as tensors)."""
    return importlib.util.find_spec("cupy") is not None


class Backend:
    """Collective backend names (mirrors ``ray.util.collective.types.Backend``).

    ``Backend("gloo")`` returns the canonical upper-case name (``"GLOO"``); ``"torch_gloo"`` is
    an alias of ``GLOO``, as in Ray. ``HCCL`` (Ascend NPUs through ``torch_npu``) is the
    adapter's addition. An unknown name raises ``ValueError``.
    """

    NCCL = "NCCL"
    GLOO = "GLOO"
    HCCL = "HCCL"
    UNRECOGNIZED = "unrecognized"

    def __new__(cls, name: str):
        upper = str(name).upper()
        if upper == "TORCH_GLOO":
            return Backend.GLOO
        if upper in (Backend.NCCL, Backend.GLOO, Backend.HCCL):
            return upper
        raise ValueError(f"Unrecognized backend: '{name}'. Only NCCL, GLOO and HCCL are supported")


class ReduceOp(Enum):
    """Reduction of ``allreduce`` / ``reduce`` / ``reducescatter`` (same values as Ray's)."""

    SUM = 0
    PRODUCT = 1
    MIN = 2
    MAX = 3


unset_timeout_ms = timedelta(milliseconds=-1)


class _Options:
    """Base of the per-operation option records; fields are keyword arguments."""

    def __init__(self, **fields):
        for name, value in fields.items():
            if not hasattr(type(self), name):
                raise TypeError(f"{type(self).__name__} has no option {name!r}")
            setattr(self, name, value)

    def __repr__(self):
        fields = {k: getattr(self, k) for k in dir(type(self)) if not k.startswith("_")}
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in fields.items())})"


class AllReduceOptions(_Options):
    """Options of ``allreduce`` on a group handle: ``reduceOp``, ``timeout_ms`` (unused: the
    group's ``gloo_timeout`` applies)."""

    reduceOp = ReduceOp.SUM
    timeout_ms = unset_timeout_ms


class BarrierOptions(_Options):
    """Options of ``barrier`` on a group handle."""

    timeout_ms = unset_timeout_ms


class ReduceOptions(_Options):
    """Options of ``reduce``: ``reduceOp``, ``root_rank`` (destination), ``root_tensor`` (its
    tensor index; 0 with one device per actor)."""

    reduceOp = ReduceOp.SUM
    root_rank = 0
    root_tensor = 0
    timeout_ms = unset_timeout_ms


class AllGatherOptions(_Options):
    """Options of ``allgather`` on a group handle."""

    timeout_ms = unset_timeout_ms


class BroadcastOptions(_Options):
    """Options of ``broadcast``: ``root_rank`` (source) and ``root_tensor`` (its tensor index)."""

    root_rank = 0
    root_tensor = 0
    timeout_ms = unset_timeout_ms


class ReduceScatterOptions(_Options):
    """Options of ``reducescatter`` on a group handle."""

    reduceOp = ReduceOp.SUM
    timeout_ms = unset_timeout_ms


class SendOptions(_Options):
    """Options of ``send``: ``dst_rank``, ``dst_gpu_index``, ``n_elements`` (0 = whole tensor)."""

    dst_rank = 0
    dst_gpu_index = 0
    n_elements = 0
    timeout_ms = unset_timeout_ms


class RecvOptions(_Options):
    """Options of ``recv``: ``src_rank``, ``src_gpu_index``, ``n_elements`` (0 = whole tensor)."""

    src_rank = 0
    src_gpu_index = 0
    n_elements = 0
    unset_timeout_ms = unset_timeout_ms


__getattr__ = gaps.module_getattr("ray.util.collective.types")
