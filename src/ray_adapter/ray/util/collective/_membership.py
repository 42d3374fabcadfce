"""Which collective groups the calling actor belongs to, and how it joins one.

Ray keeps one table of groups per worker process. Here the table is keyed by
``(member, group name)``, the member being the calling actor (or, in a task, the worker), so
several actors sharing one process -- the yuanrong backend's local mode runs actors as threads
of the driver -- each have their own groups, and one actor may be in several groups at once.

Thread-safety: ``_lock`` guards ``_groups`` and ``_joining`` only; joining (rendezvous, store
connections, building the process group) and destroying happen outside it. A join in progress
is a ``Future`` in ``_joining`` that its joining thread always resolves, so a second thread of
the same actor that needs the group waits on it instead of joining twice.
"""
import concurrent.futures
import logging
import os
import threading
import uuid

from ray_adapter.ray.util.collective import _checks, _rendezvous

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_groups = {}    # (job id, member, group name) -> TorchGroup
_joining = {}   # (job id, member, group name) -> Future of the TorchGroup being joined


def _member_key(ctx, group_name):
    """``(job id, member, group name)``; ``ctx`` is the caller's runtime context."""
    actor_id = ctx.actor_id
    member = actor_id.hex() if actor_id is not None else ("worker", ctx.worker_id)
    return ctx.job_id, member, group_name


def _purge_other_jobs(job_id):
    """Groups of runtimes shut down since (a driver process that ran several): released."""
    with _lock:
        stale = [k for k in _groups if k[0] != job_id]
        groups = [_groups.pop(k) for k in stale]
    for g in groups:
        g.destroy_group()


def lookup(ctx, group_name):
    """The calling member's group called ``group_name``, or None (never joins)."""
    key = _member_key(ctx, group_name)
    with _lock:
        return _groups.get(key)


def join(ctx, validate, world_size, rank, group_name, timeout_ms):
    """``init_collective_group``: join now; ``RuntimeError`` if this member already has (or is
    joining) a group of that name. ``validate()`` checks the arguments and returns the backend."""
    key = _member_key(ctx, group_name)
    _purge_other_jobs(key[0])
    with _lock:
        if key in _groups or key in _joining:
            raise RuntimeError("Trying to initialize a group a second time.")
        claim = _joining[key] = concurrent.futures.Future()
    return _complete(key, claim, validate, world_size, rank, group_name, timeout_ms)


def handle(ctx, group_name):
    """The member's group, joining a group declared by ``create_collective_group`` on first
    use (as Ray); ``RuntimeError`` if the group is neither joined nor declared."""
    key = _member_key(ctx, group_name)
    with _lock:
        group, pending = _groups.get(key), _joining.get(key)
    if group is not None:
        return group
    if pending is not None:
        return pending.result()  # another thread of this actor is joining it
    backend, world_size, rank, timeout_ms = _declared_membership(group_name, key[1])
    _purge_other_jobs(key[0])
    with _lock:
        group, pending = _groups.get(key), _joining.get(key)
        if group is None and pending is None:
            claim = _joining[key] = concurrent.futures.Future()
    if group is not None:
        return group
    if pending is not None:
        return pending.result()
    return _complete(key, claim, lambda: _checks.usable_backend(
        backend, "ray.util.collective.get_group_handle"), world_size, rank, group_name, timeout_ms)


def _declared_membership(group_name, member):
    """``(backend, world_size, rank, gloo_timeout)`` of a declared group for ``member``."""
    try:
        actor_ids, world_size, ranks, backend, timeout_ms = _rendezvous.declared(group_name)
        return backend, world_size, ranks[actor_ids.index(member)], timeout_ms
    except ValueError as exc:
        if os.environ.get("collective_group_name") == group_name:  # Ray's env-var declaration
            return (os.environ["collective_backend"], int(os.environ["collective_world_size"]),
                    int(os.environ["collective_rank"]),
                    int(os.environ.get("collective_gloo_timeout", 30000)))
        raise RuntimeError(
            f"The collective group '{group_name}' is not initialized in the process.") from exc


def _complete(key, claim, backend_of, world_size, rank, group_name, timeout_ms):
    try:
        group = connect(backend_of(), world_size, rank, group_name, timeout_ms)
    except BaseException as exc:
        with _lock:
            _joining.pop(key, None)
        claim.set_exception(exc)
        raise
    with _lock:
        _joining.pop(key, None)
        _groups[key] = group
    claim.set_result(group)
    return group


def connect(backend, world_size, rank, group_name, timeout_ms):
    """Build this rank's process group: rank 0 hosts a store on a free port and publishes its
    address in the runtime's rendezvous actor; the other ranks wait for it there."""
    import ray_adapter.ray as ray
    from ray_adapter.ray.util.collective import _torch_groups as tg

    timeout_s = (timeout_ms if timeout_ms and timeout_ms > 0 else 30000) / 1000.0
    host = ray.util.get_node_ip_address()
    rendezvous = None
    if world_size > 1:
        rendezvous = _rendezvous.Rendezvous(ray.get_runtime_context().namespace, group_name, timeout_s)
    if rank == 0:
        store, port = tg.host_store(host, timeout_s)
        address = (host, port, uuid.uuid4().hex)
        if rendezvous is not None:
            rendezvous.publish(address, world_size - 1)
    else:
        address = rendezvous.lookup()
        store = _connecting(group_name, rank, world_size,
                            lambda: tg.join_store(address[0], address[1], timeout_s))
    try:
        pg = _connecting(group_name, rank, world_size, lambda: tg.build_process_group(
            backend, store, f"ray_collective/{group_name}/{address[2]}", rank, world_size, host,
            timeout_s))
    except BaseException:
        if rank == 0 and rendezvous is not None:
            rendezvous.withdraw(address)
        raise
    logger.debug("joined collective group %r as rank %d of %d (%s)", group_name, rank, world_size, backend)
    return tg.TorchGroup(backend, world_size, rank, group_name, timeout_s, store, pg)


def _connecting(group_name, rank, world_size, step):
    try:
        return step()
    except RuntimeError as exc:
        message = (f"ray.util.collective: rank {rank} of {world_size} could not join the "
                   f"collective group '{group_name}': {exc}")
        try:
            err = type(exc)(message)
        except Exception:
            err = RuntimeError(message)
        raise err from exc


def leave(ctx, group_name):
    """``destroy_collective_group``: release the member's group (a warning if it has none)
    and kill the group's declaration actor if there is one, as Ray does."""
    key = _member_key(ctx, group_name)
    with _lock:
        group = _groups.pop(key, None)
    if group is None:
        logger.warning("The group '%s' does not exist.", group_name)
        return
    group.destroy_group()
    _rendezvous.forget_declaration(group_name)
