"""Argument checks of ``ray.util.collective``, raising what Ray 2.60 raises, with its messages."""
import sys

import numpy as np

from ray_adapter import gaps
from ray_adapter.ray.util.collective import types

KNOWN_BACKENDS = (types.Backend.GLOO, types.Backend.NCCL, types.Backend.HCCL)


def need_torch(qualname):
    """Raise the documented gap (naming the ``collective`` extra) when torch is not installed."""
    if not types.torch_available():
        raise gaps.extra_missing_error(qualname, extra="collective", package="torch")


def usable_backend(backend, qualname, *, declaring=False):
    """The canonical name of a backend this process can use.

    Unknown: ``ValueError`` (``RuntimeError`` when ``declaring``, as Ray's
    ``create_collective_group``). Known but not usable here (no torch, no device):
    the extra gap, or ``RuntimeError`` saying what is missing.
    """
    name = str(backend).upper()
    if name not in KNOWN_BACKENDS:
        if declaring:
            raise RuntimeError(f"Backend {name} is not registered. ray-adapter provides GLOO, NCCL "
                               "and HCCL (custom backends are not supported).")
        raise ValueError(f"Backend {name} not registered")
    need_torch(qualname)
    from ray_adapter.ray.util.collective import _torch_groups

    reason = _torch_groups.unavailable_reason(name, devices=not declaring)
    if reason is not None:
        if declaring:
            raise RuntimeError(f"Backend {name} is registered but not available. Please check the "
                               f"installation requirements for this backend: {reason}.")
        raise RuntimeError(f"Backend {name} is not available. Please check the installation: {reason}.")
    return name


def check_inside_actor():
    """The caller's :class:`~ray_adapter.core.CallContext`; ``RuntimeError`` unless called
    inside an actor or task (Ray's check)."""
    from ray_adapter.ray._private.core_access import context_if_started

    ctx = context_if_started()
    if ctx is None or ctx.is_driver:
        raise RuntimeError("The collective APIs shall be only used inside a Ray actor or task.")
    return ctx


def _is_tensor(value):
    if isinstance(value, np.ndarray):
        return True
    torch = sys.modules.get("torch")  # a torch tensor means torch is imported already
    if torch is not None and isinstance(value, torch.Tensor):
        return True
    cupy = sys.modules.get("cupy")
    return cupy is not None and isinstance(value, cupy.ndarray)


def check_tensor(tensor):
    if not _is_tensor(tensor):
        raise RuntimeError("Unrecognized tensor type '{}'. Supported types are: np.ndarray, "
                           "torch.Tensor, cupy.ndarray.".format(type(tensor)))


def check_tensor_list(tensor_list):
    if not isinstance(tensor_list, list):
        raise RuntimeError("The input must be a list of tensors. Got '{}'.".format(type(tensor_list)))
    if not tensor_list:
        raise RuntimeError("Got an empty list of tensors.")
    for t in tensor_list:
        check_tensor(t)


def check_tensor_lists(tensor_lists):
    if not isinstance(tensor_lists, list):
        raise RuntimeError("The input must be a list of lists of tensors. Got '{}'.".format(
            type(tensor_lists)))
    if not tensor_lists:
        raise RuntimeError(f"Did not receive tensors. Got: {tensor_lists}")
    for t in tensor_lists:
        check_tensor_list(t)


def check_rank(group, rank):
    if rank < 0:
        raise ValueError("rank '{}' is negative.".format(rank))
    if rank >= group.world_size:
        raise ValueError("rank '{}' must be less than world size '{}'".format(rank, group.world_size))


def check_root_tensor(length, root_tensor):
    if root_tensor < 0:
        raise ValueError("root_tensor '{}' is negative.".format(root_tensor))
    if root_tensor >= length:
        raise ValueError("root_tensor '{}' is greater than the number of GPUs: '{}'".format(
            root_tensor, length))
