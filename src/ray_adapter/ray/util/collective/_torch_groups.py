"""Collective groups as torch.distributed process-group objects (gloo, nccl, hccl).

Each group a member joins is its own process-group object, built directly from a
``TCPStore`` (rank 0 hosts it on a free port) wrapped in a ``PrefixStore`` -- never the
process-wide default group. So one process may be in several groups at once (a trainer in a
training group and a weight-sync group), and several ranks may live in one process (the
yuanrong backend's local mode runs actors as threads of the driver).

Nothing here knows Ray or the runtime: the caller passes the rendezvous (how rank 0's store
address reaches the others). Imported only when torch is installed.

Thread-safety: a :class:`TorchGroup` holds no mutable state after construction; torch's
process groups may be driven from any thread (ops of one group must be issued in the same
order on every rank, as with any collective library).
"""
import datetime
import os
import warnings

import numpy as np
import torch
import torch.distributed as dist

from ray_adapter.ray.util.collective.types import Backend, ReduceOp

_TORCH_OPS = {ReduceOp.SUM: dist.ReduceOp.SUM, ReduceOp.PRODUCT: dist.ReduceOp.PRODUCT,
              ReduceOp.MIN: dist.ReduceOp.MIN, ReduceOp.MAX: dist.ReduceOp.MAX}


def _npu_importable():
    try:
        import torch_npu  # noqa: F401  (registers torch.npu and ProcessGroupHCCL)
    except ImportError:
        return False
    return True


def _npu_available():
    return _npu_importable() and bool(getattr(torch, "npu", None) and torch.npu.is_available())


def unavailable_reason(backend, devices=True):
    """Why ``backend`` (a canonical name) cannot be used in this process, or None if it can.
    ``devices=False`` (a driver declaring a group) checks the library only, not the devices."""
    if backend == Backend.GLOO:
        return None if dist.is_gloo_available() else "this torch build has no gloo support"
    if backend == Backend.NCCL:
        if not dist.is_nccl_available():
            return "this torch build has no NCCL support (a CPU-only torch wheel?)"
        if devices and not torch.cuda.is_available():
            return "no CUDA device is visible to this process (request one with num_gpus=)"
        return None
    if backend == Backend.HCCL:
        if not devices:
            return None if _npu_importable() else "torch_npu is not installed"
        return None if _npu_available() else (
            "torch_npu is not importable or sees no Ascend NPU (request one with resources={'NPU': n})")
    return f"unknown backend {backend!r}"


def _store_timeout(timeout_s):
    return datetime.timedelta(seconds=timeout_s)


def host_store(host, timeout_s):
    """Rank 0: a TCPStore server on a free port of ``host``; returns ``(store, port)``."""
    store = dist.TCPStore(host, 0, None, True, _store_timeout(timeout_s), wait_for_workers=False)
    return store, store.port


def join_store(host, port, timeout_s):
    """Ranks > 0: a client of rank 0's TCPStore (fails after ``timeout_s`` if unreachable)."""
    return dist.TCPStore(host, port, None, False, _store_timeout(timeout_s))


def _gloo_device(host):
    interface = os.environ.get("GLOO_SOCKET_IFNAME", "").split(",")[0]
    if interface:
        return dist.ProcessGroupGloo.create_device(interface=interface)
    return dist.ProcessGroupGloo.create_device(hostname=host)


#: Device backends keep torch's own operation timeout: their watchdogs end the process when it
#: passes, so a short ``gloo_timeout`` must never reach them (Ray's NCCL group has none).
DEVICE_TIMEOUT = datetime.timedelta(minutes=30)


def build_process_group(backend, store, prefix, rank, world_size, host, timeout_s):
    """The process-group object of one rank (gloo: every operation bounded by ``timeout_s``).
    gloo connects every pair of ranks here, so this blocks until all ranks have joined or
    ``timeout_s`` passed; nccl and hccl connect at the first operation."""
    prefixed = dist.PrefixStore(prefix, store)
    if backend == Backend.GLOO:
        opts = dist.ProcessGroupGloo._Options()
        opts._timeout = _store_timeout(timeout_s)
        opts._devices = [_gloo_device(host)]
        return dist.ProcessGroupGloo(prefixed, rank, world_size, opts)
    if backend == Backend.NCCL:
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = DEVICE_TIMEOUT
        return dist.ProcessGroupNCCL(prefixed, rank, world_size, opts)
    if backend == Backend.HCCL:
        import torch_npu  # noqa: F401  (adds ProcessGroupHCCL to torch.distributed)

        return dist.ProcessGroupHCCL(prefixed, rank, world_size, DEVICE_TIMEOUT)
    raise ValueError(f"Backend {backend} not registered")


def as_tensor(value, writes):
    """A torch view of ``value`` (a torch tensor, numpy array or cupy array; no copy).

    ``writes``: the operation stores its result into ``value``. A read-only numpy array (what
    the object store hands out) cannot take a result: ``ValueError``. One that is only read is
    viewed without torch's not-writable warning (the operation never writes to it).
    """
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, np.ndarray):
        if value.flags.writeable:
            return torch.from_numpy(value)
        if writes:
            raise ValueError(
                "ray.util.collective: the numpy array that should receive the result is read-only "
                "(arrays passed through the object store are); pass a writable copy (array.copy()).")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(value)
    return torch.from_dlpack(value)  # cupy (checked by the caller): a zero-copy device view


def _failure(group, what, exc):
    """``exc`` (a torch RuntimeError) with the operation, group and rank named; same class."""
    message = (f"ray.util.collective.{what} in group '{group.group_name}' (rank {group.rank} of "
               f"{group.world_size}, backend {group.backend()}) failed: {exc}")
    try:
        return type(exc)(message)
    except Exception:  # a class that takes other arguments: the builtin it derives from
        return RuntimeError(message)


class TorchGroup:
    """One rank's membership of one collective group (the object ``get_group_handle`` returns).

    The methods mirror Ray's ``BaseGroup``: tensors come in one-element lists (one device per
    actor), options are :mod:`ray.util.collective.types` records, results land in place.
    Failures of the transport (a member died: "Connection closed by peer"; a member did not
    take part within the group's timeout: "Timed out") raise torch's ``RuntimeError`` (or its
    ``DistError`` subclasses) naming the operation, the group and this rank.
    """

    def __init__(self, backend, world_size, rank, group_name, timeout_s, store, pg):
        self._backend = backend
        self._world_size = world_size
        self._rank = rank
        self._group_name = group_name
        self._timeout_s = timeout_s
        self._store = store  # rank 0 serves the store; every rank keeps its connection open
        self._pg = pg

    # -- Ray's BaseGroup surface -----------------------------------------------------------
    @property
    def rank(self):
        return self._rank

    @property
    def world_size(self):
        return self._world_size

    @property
    def group_name(self):
        return self._group_name

    def backend(self):
        return self._backend

    def destroy_group(self):
        """Release the communicators and the store (the group cannot be used afterwards)."""
        pg, self._pg, self._store = self._pg, None, None
        if pg is not None:
            try:
                pg.shutdown()
            except Exception:  # already broken by a dead member: nothing left to release
                pass

    def _run(self, what, start):
        if self._pg is None:
            raise RuntimeError(f"The collective group '{self._group_name}' has been destroyed.")
        try:
            start().wait()
        except RuntimeError as exc:
            raise _failure(self, what, exc) from exc

    @staticmethod
    def _one(tensors):
        if len(tensors) != 1:
            raise RuntimeError(
                f"ray-adapter runs one device per actor: expected a list of one tensor, got {len(tensors)}.")
        return tensors[0]

    @staticmethod
    def _op(reduce_op):
        try:
            return _TORCH_OPS[reduce_op]
        except (KeyError, TypeError):
            raise ValueError(f"Unknown reduce operation {reduce_op!r}: use "
                             "ray.util.collective.types.ReduceOp (SUM, PRODUCT, MIN, MAX).") from None

    def allreduce(self, tensors, allreduce_options):
        t = as_tensor(self._one(tensors), writes=True)
        opts = dist.AllreduceOptions()
        opts.reduceOp = self._op(allreduce_options.reduceOp)
        self._run("allreduce", lambda: self._pg.allreduce([t], opts))

    def barrier(self, barrier_options=None):
        if self._backend == Backend.GLOO:
            self._run("barrier", lambda: self._pg.barrier(dist.BarrierOptions()))
        else:  # device backends: a one-element all-reduce on the device is the barrier
            t = torch.zeros(1, device=_device_of_backend(self._backend))
            self._run("barrier", lambda: self._pg.allreduce([t], dist.AllreduceOptions()))

    def reduce(self, tensors, reduce_options):
        """The result lands in the destination rank's tensor; the others' stay unchanged."""
        root = reduce_options.root_rank
        user = as_tensor(self._one(tensors), writes=self._rank == root)
        t = user if self._rank == root else user.detach().clone()
        opts = dist.ReduceOptions()
        opts.reduceOp = self._op(reduce_options.reduceOp)
        opts.rootRank = root
        opts.rootTensor = 0
        self._run("reduce", lambda: self._pg.reduce([t], opts))

    def broadcast(self, tensors, broadcast_options):
        root = broadcast_options.root_rank
        value = self._one(tensors)
        t = as_tensor(value, writes=self._rank != root)
        opts = dist.BroadcastOptions()
        opts.rootRank = root
        opts.rootTensor = 0
        self._run("broadcast", lambda: self._pg.broadcast([t], opts))

    def allgather(self, tensor_lists, tensors, allgather_options=None):
        outputs = [as_tensor(o, writes=True) for o in self._one(tensor_lists)]
        t = as_tensor(self._one(tensors), writes=False)
        self._run("allgather", lambda: self._pg.allgather([outputs], [t]))

    def reducescatter(self, tensors, tensor_lists, reducescatter_options):
        """gloo (as Ray's torch-gloo group): every input is all-reduced in place and this
        rank's reduced shard is copied to the output. Device backends: a reduce-scatter that
        leaves the inputs unchanged (as Ray's NCCL group)."""
        out = as_tensor(self._one(tensors), writes=True)
        op = self._op(reducescatter_options.reduceOp)
        if self._backend == Backend.GLOO:
            inputs = [as_tensor(x, writes=True) for x in self._one(tensor_lists)]
            if out.shape != inputs[self._rank].shape:
                raise ValueError(f"Output tensor has wrong shape {tuple(out.shape)}, expected "
                                 f"{tuple(inputs[self._rank].shape)}")
            opts = dist.AllreduceOptions()
            opts.reduceOp = op
            for x in inputs:
                self._run("reducescatter", lambda x=x: self._pg.allreduce([x], opts))
            if out.data_ptr() != inputs[self._rank].data_ptr():
                out.copy_(inputs[self._rank])
            return
        inputs = [as_tensor(x, writes=False) for x in self._one(tensor_lists)]
        opts = dist.ReduceScatterOptions()
        opts.reduceOp = op
        self._run("reducescatter", lambda: self._pg.reduce_scatter([out], [inputs], opts))

    def send(self, tensors, send_options):
        t = _first(as_tensor(self._one(tensors), writes=False), send_options.n_elements)
        self._run("send", lambda: self._pg.send([t], send_options.dst_rank, 0))

    def recv(self, tensors, recv_options):
        t = _first(as_tensor(self._one(tensors), writes=True), recv_options.n_elements)
        self._run("recv", lambda: self._pg.recv([t], recv_options.src_rank, 0))


def _first(t, n_elements):
    """The first ``n_elements`` of ``t`` as a view (all of it for 0)."""
    return t.view(-1)[:n_elements] if n_elements else t


def _device_of_backend(backend):
    if backend == Backend.NCCL:
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("npu", torch.npu.current_device())
