"""``ray.util.collective``: collective communication among actors (mirrors Ray 2.60's module).

Groups are torch.distributed process groups: ``gloo`` on CPU, ``nccl`` with CUDA devices,
``hccl`` with Ascend NPUs (``torch_npu``). Each group is its own process-group object, so an
actor may be in several groups at once; rank 0's store address is exchanged through an actor of
the runtime (never a fixed port). Tensors are torch tensors, numpy arrays (through zero-copy
torch views) or cupy arrays of any shape and dtype torch supports (the same on every rank);
results land in place; device tensors stay on their device.

torch is an optional extra (``pip install "ray-adapter[collective]"``): without it this module
imports, the availability checks answer False, and every call that needs a group raises
:class:`ray_adapter.gaps.RayAdapterExtraMissingError` (a ``ModuleNotFoundError``) naming it.

Errors follow Ray: calls outside an actor or task raise ``RuntimeError``; an unknown backend
``ValueError`` (``init_collective_group``) or ``RuntimeError`` (``create_collective_group``); a
group that is not initialised ``RuntimeError``; a member that died or did not take part within
``gloo_timeout`` milliseconds makes the others' call raise torch's ``RuntimeError`` naming the
operation, the group and the rank.
"""
from typing import Any, List

from ray_adapter import gaps
from ray_adapter.ray.util.collective import _membership, _rendezvous, types
from ray_adapter.ray.util.collective._checks import (KNOWN_BACKENDS, check_inside_actor, check_rank,
                                                     check_root_tensor, check_tensor,
                                                     check_tensor_list, check_tensor_lists,
                                                     need_torch, usable_backend)


# -- backends ---------------------------------------------------------------------------------
def is_backend_available(backend: str) -> bool:
    """True when ``backend`` ("GLOO", "NCCL", "HCCL"; any case) can be used in this process."""
    name = str(backend).upper()
    if name not in KNOWN_BACKENDS or not types.torch_available():
        return False
    from ray_adapter.ray.util.collective import _torch_groups

    return _torch_groups.unavailable_reason(name) is None


def gloo_available():
    """True when torch (with gloo) is installed."""
    return is_backend_available(types.Backend.GLOO)


def nccl_available():
    """True when torch has NCCL and a CUDA device is visible."""
    return is_backend_available(types.Backend.NCCL)


# -- groups -----------------------------------------------------------------------------------
def is_group_initialized(group_name):
    """True when the calling actor has joined ``group_name`` (a declared group it has not used
    yet is not joined)."""
    try:
        ctx = check_inside_actor()
    except RuntimeError:  # the driver is in no group
        return False
    return _membership.lookup(ctx, group_name) is not None


def init_collective_group(world_size: int, rank: int, backend: types.Backend = types.Backend.NCCL,
                          group_name: str = "default", gloo_timeout: int = 30000):
    """Join the calling actor to a collective group (blocks until all ``world_size`` ranks join).

    ``gloo_timeout`` (milliseconds) bounds the rendezvous and every later operation of the group.
    Raises ``RuntimeError`` outside an actor or when joined twice, ``ValueError`` for an empty
    name or unknown backend, ``AssertionError`` for a rank outside ``[0, world_size)``,
    ``TimeoutError`` when rank 0 does not publish its address in time.
    """
    ctx = check_inside_actor()
    if not group_name:
        raise ValueError("group_name '{}' needs to be a string.".format(group_name))

    def validate():  # after the already-joined check, as in Ray
        assert world_size > 0
        assert rank >= 0
        assert rank < world_size
        return usable_backend(backend, "ray.util.collective.init_collective_group", declaring=False)

    _membership.join(ctx, validate, world_size, rank, group_name, gloo_timeout)


def create_collective_group(actors: List[Any], world_size: int, ranks: List[int],
                            backend: types.Backend = types.Backend.NCCL, group_name: str = "default",
                            gloo_timeout: int = 30000):
    """Declare ``actors`` (with ``ranks``) a collective group, from the driver; each actor joins
    on its first collective call. Raises ``RuntimeError`` for a group declared twice, a
    rank/actor count mismatch, ranks that are not a permutation of ``0..n-1``, a non-positive
    ``world_size`` or an unusable backend."""
    if _rendezvous.declaration_exists(group_name):
        raise RuntimeError("Trying to initialize a group twice.")
    if len(ranks) != len(actors):
        raise RuntimeError("Each actor should correspond to one rank. Got '{}' ranks but '{}' "
                           "actors".format(len(ranks), len(actors)))
    if set(ranks) != set(range(len(ranks))):
        raise RuntimeError("Ranks must be a permutation from 0 to '{}'. Got '{}'.".format(
            len(ranks), "".join(str(r) for r in ranks)))
    if world_size <= 0:
        raise RuntimeError("World size must be greater than zero. Got '{}'.".format(world_size))
    name = usable_backend(backend, "ray.util.collective.create_collective_group", declaring=True)
    actor_ids = [a._actor_id.hex() for a in actors]
    _rendezvous.declare(group_name, actor_ids, world_size, list(ranks), name, gloo_timeout)


def destroy_collective_group(group_name: str = "default") -> None:
    """Leave ``group_name`` and release its communicators; also removes a declaration made by
    ``create_collective_group``. A group this actor has not joined only logs a warning."""
    _membership.leave(check_inside_actor(), group_name)


def get_rank(group_name: str = "default") -> int:
    """This actor's rank in ``group_name``; -1 if it has not joined it."""
    group = _membership.lookup(check_inside_actor(), group_name)
    return -1 if group is None else group.rank


def get_collective_group_size(group_name: str = "default") -> int:
    """The world size of ``group_name``; -1 if this actor has not joined it."""
    group = _membership.lookup(check_inside_actor(), group_name)
    return -1 if group is None else group.world_size


def get_group_handle(group_name: str = "default"):
    """The group object (``rank``, ``world_size``, ``group_name``, ``backend()``, and Ray's
    ``BaseGroup`` operations), joining a declared group on first use. ``RuntimeError`` if the
    group is neither joined nor declared."""
    ctx = check_inside_actor()
    group = _membership.lookup(ctx, group_name)
    if group is not None:
        return group
    need_torch("ray.util.collective.get_group_handle")
    return _membership.handle(ctx, group_name)


# -- operations -------------------------------------------------------------------------------
def allreduce(tensor: Any, group_name: str = "default", op: types.ReduceOp = types.ReduceOp.SUM):
    """All-reduce ``tensor`` in place across the group with ``op``."""
    check_tensor(tensor)
    get_group_handle(group_name).allreduce([tensor], types.AllReduceOptions(reduceOp=op))


def allreduce_multigpu(tensor_list: list, group_name: str = "default",
                       op: types.ReduceOp = types.ReduceOp.SUM):
    """``allreduce`` of a list of per-device tensors (one per actor here)."""
    check_tensor_list(tensor_list)
    get_group_handle(group_name).allreduce(tensor_list, types.AllReduceOptions(reduceOp=op))


def barrier(group_name: str = "default"):
    """Block until every member of the group reaches the barrier."""
    get_group_handle(group_name).barrier(types.BarrierOptions())


def reduce(tensor: Any, dst_rank: int = 0, group_name: str = "default",
           op: types.ReduceOp = types.ReduceOp.SUM):
    """Reduce ``tensor`` onto rank ``dst_rank`` (in place there; other ranks' tensors unchanged)."""
    check_tensor(tensor)
    g = get_group_handle(group_name)
    check_rank(g, dst_rank)
    g.reduce([tensor], types.ReduceOptions(reduceOp=op, root_rank=dst_rank, root_tensor=0))


def reduce_multigpu(tensor_list: list, dst_rank: int = 0, dst_tensor: int = 0,
                    group_name: str = "default", op: types.ReduceOp = types.ReduceOp.SUM):
    """``reduce`` of per-device tensors onto ``dst_tensor`` of rank ``dst_rank``."""
    check_tensor_list(tensor_list)
    g = get_group_handle(group_name)
    check_rank(g, dst_rank)
    check_root_tensor(len(tensor_list), dst_tensor)
    g.reduce(tensor_list, types.ReduceOptions(reduceOp=op, root_rank=dst_rank, root_tensor=dst_tensor))


def broadcast(tensor: Any, src_rank: int = 0, group_name: str = "default"):
    """Broadcast ``tensor`` from rank ``src_rank`` into every other rank's ``tensor``."""
    check_tensor(tensor)
    g = get_group_handle(group_name)
    check_rank(g, src_rank)
    g.broadcast([tensor], types.BroadcastOptions(root_rank=src_rank, root_tensor=0))


def broadcast_multigpu(tensor_list: list, src_rank: int = 0, src_tensor: int = 0,
                       group_name: str = "default"):
    """``broadcast`` from ``src_tensor`` of rank ``src_rank`` into per-device tensors."""
    check_tensor_list(tensor_list)
    g = get_group_handle(group_name)
    check_rank(g, src_rank)
    check_root_tensor(len(tensor_list), src_tensor)
    g.broadcast(tensor_list, types.BroadcastOptions(root_rank=src_rank, root_tensor=src_tensor))


def allgather(tensor_list: list, tensor: Any, group_name: str = "default"):
    """Gather every rank's ``tensor`` into ``tensor_list`` (``world_size`` tensors) on each rank."""
    check_tensor(tensor)
    check_tensor_list(tensor_list)
    g = get_group_handle(group_name)
    if len(tensor_list) != g.world_size:
        raise RuntimeError("The length of the tensor list operands to allgather must be equal "
                           "to world_size.")
    g.allgather([tensor_list], [tensor], types.AllGatherOptions())


def allgather_multigpu(output_tensor_lists: list, input_tensor_list: list, group_name: str = "default"):
    """``allgather`` of per-device tensors into per-device lists."""
    check_tensor_lists(output_tensor_lists)
    check_tensor_list(input_tensor_list)
    get_group_handle(group_name).allgather(output_tensor_lists, input_tensor_list,
                                           types.AllGatherOptions())


def reducescatter(tensor: Any, tensor_list: list, group_name: str = "default",
                  op: types.ReduceOp = types.ReduceOp.SUM):
    """Reduce ``tensor_list`` (``world_size`` tensors) across ranks; rank r gets shard r in
    ``tensor``. With gloo, as Ray's torch-gloo group, the inputs are reduced in place too."""
    check_tensor(tensor)
    check_tensor_list(tensor_list)
    g = get_group_handle(group_name)
    if len(tensor_list) != g.world_size:
        # Ray's message, word for word (it says "must not be" where it means "must be").
        raise RuntimeError("The length of the tensor list operands to reducescatter must not be "
                           "equal to world_size.")
    g.reducescatter([tensor], [tensor_list], types.ReduceScatterOptions(reduceOp=op))


def reducescatter_multigpu(output_tensor_list: list, input_tensor_lists: list,
                           group_name: str = "default", op: types.ReduceOp = types.ReduceOp.SUM):
    """``reducescatter`` of per-device tensors."""
    check_tensor_lists(input_tensor_lists)
    check_tensor_list(output_tensor_list)
    get_group_handle(group_name).reducescatter(output_tensor_list, input_tensor_lists,
                                               types.ReduceScatterOptions(reduceOp=op))


def send(tensor: Any, dst_rank: int, group_name: str = "default"):
    """Send ``tensor`` to rank ``dst_rank`` (blocks until it is received)."""
    check_tensor(tensor)
    g = get_group_handle(group_name)
    check_rank(g, dst_rank)
    if dst_rank == g.rank:
        raise RuntimeError("The destination rank '{}' is self.".format(dst_rank))
    g.send([tensor], types.SendOptions(dst_rank=dst_rank))


def recv(tensor: Any, src_rank: int, group_name: str = "default"):
    """Receive into ``tensor`` (same shape and dtype as sent) from rank ``src_rank``."""
    check_tensor(tensor)
    g = get_group_handle(group_name)
    check_rank(g, src_rank)
    if src_rank == g.rank:
        raise RuntimeError("The destination rank '{}' is self.".format(src_rank))
    g.recv([tensor], types.RecvOptions(src_rank=src_rank))


def _check_p2p_multigpu(tensor, peer, gpu_index, n_elements, group_name, what):
    check_tensor(tensor)
    g = get_group_handle(group_name)
    check_rank(g, peer)
    if peer == g.rank:
        raise RuntimeError("The dst_rank '{}' is self. Considering doing GPU to GPU memcpy "
                           "instead?".format(peer))
    if n_elements < 0:
        raise RuntimeError("The n_elements '{}' should >= 0.".format(n_elements))
    if gpu_index != 0:
        raise RuntimeError(f"ray.util.collective.{what}: ray-adapter runs one device per actor, "
                           f"so the peer's device index must be 0 (got {gpu_index}).")
    return g


def send_multigpu(tensor: Any, dst_rank: int, dst_gpu_index: int, group_name: str = "default",
                  n_elements: int = 0):
    """``send`` to device ``dst_gpu_index`` (0: one device per actor) of ``dst_rank``; with
    ``n_elements`` > 0 only the tensor's first ``n_elements`` are sent."""
    g = _check_p2p_multigpu(tensor, dst_rank, dst_gpu_index, n_elements, group_name, "send_multigpu")
    g.send([tensor], types.SendOptions(dst_rank=dst_rank, dst_gpu_index=dst_gpu_index,
                                       n_elements=n_elements))


def recv_multigpu(tensor: Any, src_rank: int, src_gpu_index: int, group_name: str = "default",
                  n_elements: int = 0):
    """``recv`` from device ``src_gpu_index`` (0) of ``src_rank``, into the first
    ``n_elements`` of ``tensor`` when > 0."""
    g = _check_p2p_multigpu(tensor, src_rank, src_gpu_index, n_elements, group_name, "recv_multigpu")
    g.recv([tensor], types.RecvOptions(src_rank=src_rank, src_gpu_index=src_gpu_index,
                                       n_elements=n_elements))


def synchronize(gpu_id: int):
    """Wait for the work queued on device ``gpu_id`` (CUDA, or an Ascend NPU) to finish.
    ``RuntimeError`` where there is no such device."""
    if types.torch_available():
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize(gpu_id)
            return
        if getattr(torch, "npu", None) is not None and torch.npu.is_available():
            torch.npu.synchronize(gpu_id)
            return
    raise RuntimeError("synchronize call requires CUDA and NCCL.")


__getattr__ = gaps.module_getattr("ray.util.collective")
