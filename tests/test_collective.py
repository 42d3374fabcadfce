"""ray.util.collective on real torch.distributed gloo process groups, among real actors.

Every operation across 2 and 4 actors for torch tensors and numpy arrays and each ReduceOp, on
both backends (embedded: one process per actor; yr-local: actors are threads of one process, so
several ranks share a process); groups with different members at once; declared groups; Ray's
errors; a member that dies or stays away; the module without torch.
"""
import os
import textwrap
import time

import numpy as np
import pytest

from conftest import my_worker_processes, run_code

try:
    import torch
except ImportError:  # the module itself must still work: see the last test
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="ray.util.collective runs on torch (the collective extra)")

OPS = ("SUM", "PRODUCT", "MIN", "MAX")
TIMEOUT_MS = 5000  # small group timeouts: a failing test fails in seconds, never hangs


def _member_class(ray, **options):
    @ray.remote(num_cpus=0, **options)
    class Member:
        """One rank; every method runs collective calls inside the actor and returns plain data."""

        def __init__(self, rank):
            self.rank = rank

        def pid(self):
            return os.getpid()

        def join(self, world, group, rank=None, timeout_ms=TIMEOUT_MS):
            import ray_adapter.ray.util.collective as col

            col.init_collective_group(world, self.rank if rank is None else rank, backend="gloo",
                                      group_name=group, gloo_timeout=timeout_ms)
            return col.get_rank(group), col.get_collective_group_size(group), col.is_group_initialized(group)

        def every_op(self, world, group, kind):
            """All operations on float32 values v_r = [r+1, r+2, -r] (r = this rank)."""
            import ray_adapter.ray.util.collective as col
            from ray_adapter.ray.util.collective.types import ReduceOp

            r, out = col.get_rank(group), {}

            def make(values):
                a = np.asarray(values, dtype=np.float32)
                return torch.from_numpy(a.copy()) if kind == "torch" else a.copy()

            def value(t):
                return np.asarray(t).tolist()

            mine = [r + 1, r + 2, -r]
            for op in ReduceOp:
                t = make(mine)
                col.allreduce(t, group_name=group, op=op)
                out[f"allreduce_{op.name}"] = value(t)
                t = make(mine)
                col.reduce(t, dst_rank=world - 1, group_name=group, op=op)
                out[f"reduce_{op.name}"] = value(t)
                shards = [make([v + 10 * i for v in mine]) for i in range(world)]
                t = make([0, 0, 0])
                col.reducescatter(t, shards, group_name=group, op=op)
                out[f"reducescatter_{op.name}"] = value(t)
                out[f"reducescatter_inputs_{op.name}"] = [value(s) for s in shards]
            t = make(mine)
            col.allreduce_multigpu([t], group_name=group)
            out["allreduce_multigpu"] = value(t)
            t = make(mine)
            col.broadcast(t, src_rank=1 % world, group_name=group)
            out["broadcast"] = value(t)
            t = make(mine)
            col.broadcast_multigpu([t], src_rank=0, src_tensor=0, group_name=group)
            out["broadcast_multigpu"] = value(t)
            gathered = [make([0, 0, 0]) for _ in range(world)]
            col.allgather(gathered, make(mine), group_name=group)
            out["allgather"] = [value(g) for g in gathered]
            partner, t = r ^ 1, make(mine)
            if r % 2 == 0:  # pairs (0,1), (2,3): even ranks send first, odd ranks receive first
                col.send(make(mine), partner, group_name=group)
                col.recv(t, partner, group_name=group)
            else:
                col.recv(t, partner, group_name=group)
                col.send(make(mine), partner, group_name=group)
            out["sendrecv"] = value(t)
            col.barrier(group_name=group)
            a = np.full(4, r + 1, dtype=np.float32)
            address = a.ctypes.data
            col.allreduce(a, group_name=group)  # the result lands in the caller's own buffer
            out["numpy_in_place"] = (a.tolist(), a.ctypes.data == address)
            return out

        def allreduce_value(self, group, value):
            import ray_adapter.ray.util.collective as col

            t = torch.full((2,), float(value))
            col.allreduce(t, group_name=group)
            return t.tolist()

        def broadcast_value(self, group, value, src_rank):
            import ray_adapter.ray.util.collective as col

            t = torch.full((2,), float(value))
            col.broadcast(t, src_rank=src_rank, group_name=group)
            return t.tolist()

        def state(self, group):
            import ray_adapter.ray.util.collective as col

            return col.is_group_initialized(group), col.get_rank(group), col.get_collective_group_size(group)

        def destroy(self, group):
            import ray_adapter.ray.util.collective as col

            col.destroy_collective_group(group)
            return col.is_group_initialized(group)

        def attempt(self, what, *args):
            """Run one misuse and return (exception class name, message), or ("ok", result)."""
            import ray_adapter.ray.util.collective as col

            calls = {
                "init": lambda world, rank, backend, group, timeout_ms=TIMEOUT_MS: col.init_collective_group(
                    world, rank, backend=backend, group_name=group, gloo_timeout=timeout_ms),
                "allreduce": lambda value, group: col.allreduce(value, group_name=group),
                "allreduce_multigpu": lambda n, group: col.allreduce_multigpu(
                    [torch.ones(1) for _ in range(n)], group_name=group),
                "allgather": lambda n, group: col.allgather([torch.ones(1)] * n, torch.ones(1), group_name=group),
                "reducescatter": lambda n, group: col.reducescatter(
                    torch.ones(1), [torch.ones(1)] * n, group_name=group),
                "reduce": lambda dst, group: col.reduce(torch.ones(1), dst_rank=dst, group_name=group),
                "send": lambda dst, group: col.send(torch.ones(1), dst, group_name=group),
                "recv": lambda src, group: col.recv(torch.ones(1), src, group_name=group),
                "read_only": lambda group: col.allreduce(_read_only(), group_name=group),
                "destroy": lambda group: col.destroy_collective_group(group),
                "barrier": lambda group: col.barrier(group_name=group),
            }

            def _read_only():
                a = np.ones(3, dtype=np.float32)
                a.flags.writeable = False
                return a

            start = time.monotonic()
            try:
                return "ok", calls[what](*args), round(time.monotonic() - start, 1)
            except BaseException as exc:  # noqa: BLE001 - the test inspects what was raised
                return type(exc).__name__, str(exc), round(time.monotonic() - start, 1)

    return Member


def _expected(world):
    """What every_op returns on each rank, computed with numpy."""
    vals = [np.array([r + 1, r + 2, -r], dtype=np.float32) for r in range(world)]
    reducers = {"SUM": np.sum, "PRODUCT": np.prod, "MIN": np.min, "MAX": np.max}
    per_rank = []
    for r in range(world):
        exp = {}
        for name, fn in reducers.items():
            total = fn(np.stack(vals), axis=0)
            exp[f"allreduce_{name}"] = total.tolist()
            exp[f"reduce_{name}"] = total.tolist() if r == world - 1 else vals[r].tolist()
            shards = [fn(np.stack([v + 10 * i for v in vals]), axis=0) for i in range(world)]
            exp[f"reducescatter_{name}"] = shards[r].tolist()
            exp[f"reducescatter_inputs_{name}"] = [s.tolist() for s in shards]  # Ray's gloo group
        exp["allreduce_multigpu"] = np.sum(np.stack(vals), axis=0).tolist()
        exp["broadcast"] = vals[1 % world].tolist()
        exp["broadcast_multigpu"] = vals[0].tolist()
        exp["allgather"] = [v.tolist() for v in vals]
        exp["sendrecv"] = vals[r ^ 1].tolist()
        exp["numpy_in_place"] = ([float(world * (world + 1) / 2)] * 4, True)
        per_rank.append(exp)
    return per_rank


@needs_torch
@pytest.mark.parametrize("world", [2, 4])
def test_every_operation_for_torch_and_numpy_and_each_reduce_op(ray, world):
    Member = _member_class(ray)
    members = [Member.remote(r) for r in range(world)]
    assert ray.get([m.join.remote(world, "g") for m in members]) == [(r, world, True) for r in range(world)]
    expected = _expected(world)
    for kind in ("torch", "numpy"):
        got = ray.get([m.every_op.remote(world, "g", kind) for m in members])
        for r in range(world):
            assert got[r] == expected[r], (kind, r)
    assert ray.get([m.destroy.remote("g") for m in members]) == [False] * world
    assert ray.get([m.state.remote("g") for m in members]) == [(False, -1, -1)] * world


@needs_torch
def test_groups_with_different_members_at_once(ray):
    """A trainer in a training group and a weight-sync group at the same time (Ray 2.60's
    torch-gloo groups all derive from one default group and cannot do this)."""
    Member = _member_class(ray)
    trainer, peer, rollout = (Member.remote(i) for i in range(3))
    # Same join order everywhere: "train" (trainer 0, peer 1), then "sync" (trainer 0, rollout 1, peer 2).
    joins = [trainer.join.remote(2, "train", 0), peer.join.remote(2, "train", 1),
             trainer.join.remote(3, "sync", 0), rollout.join.remote(3, "sync", 1), peer.join.remote(3, "sync", 2)]
    assert ray.get(joins) == [(0, 2, True), (1, 2, True), (0, 3, True), (1, 3, True), (2, 3, True)]
    got = ray.get([trainer.allreduce_value.remote("train", 1), peer.allreduce_value.remote("train", 2)])
    assert got == [[3.0, 3.0]] * 2
    got = ray.get([trainer.broadcast_value.remote("sync", 7, 0), rollout.broadcast_value.remote("sync", 0, 0),
                   peer.broadcast_value.remote("sync", 0, 0)])
    assert got == [[7.0, 7.0]] * 3
    # Interleaved again, in the other order: each group is independent of the other.
    got = ray.get([trainer.allreduce_value.remote("sync", 1), rollout.allreduce_value.remote("sync", 1),
                   peer.allreduce_value.remote("sync", 1), trainer.allreduce_value.remote("train", 5),
                   peer.allreduce_value.remote("train", 5)])
    assert got == [[3.0, 3.0]] * 3 + [[10.0, 10.0]] * 2
    assert ray.get(trainer.state.remote("train")) == (True, 0, 2)
    assert ray.get(peer.state.remote("sync")) == (True, 2, 3)
    assert ray.get(rollout.state.remote("train")) == (False, -1, -1)


@needs_torch
def test_declared_group_is_joined_on_first_collective_call(ray):
    import ray_adapter.ray.util.collective as col

    Member = _member_class(ray)
    members = [Member.remote(i) for i in range(2)]
    outsider = Member.remote(9)
    col.create_collective_group(members, 2, [1, 0], backend="gloo", group_name="decl", gloo_timeout=TIMEOUT_MS)
    assert ray.get([m.state.remote("decl") for m in members]) == [(False, -1, -1)] * 2
    got = ray.get([members[0].allreduce_value.remote("decl", 1), members[1].allreduce_value.remote("decl", 2)])
    assert got == [[3.0, 3.0]] * 2
    assert ray.get([m.state.remote("decl") for m in members]) == [(True, 1, 2), (True, 0, 2)]
    kind, message, _ = ray.get(outsider.attempt.remote("allreduce", torch.ones(1), "decl"))
    assert (kind, message) == ("RuntimeError", "The collective group 'decl' is not initialized in the process.")

    with pytest.raises(RuntimeError, match="Trying to initialize a group twice."):
        col.create_collective_group(members, 2, [0, 1], backend="gloo", group_name="decl")
    with pytest.raises(RuntimeError, match="Each actor should correspond to one rank. Got '1' ranks but '2' actors"):
        col.create_collective_group(members, 2, [0], backend="gloo", group_name="other")
    with pytest.raises(RuntimeError, match="Ranks must be a permutation from 0 to '2'. Got '02'."):
        col.create_collective_group(members, 2, [0, 2], backend="gloo", group_name="other")
    with pytest.raises(RuntimeError, match="World size must be greater than zero. Got '0'."):
        col.create_collective_group(members, 0, [0, 1], backend="gloo", group_name="other")
    with pytest.raises(RuntimeError, match="Backend MPI is not registered"):
        col.create_collective_group(members, 2, [0, 1], backend="mpi", group_name="other")

    assert ray.get([m.destroy.remote("decl") for m in members]) == [False, False]
    with pytest.raises(ValueError):
        ray.get_actor("info_decl")  # destroying the group removes its declaration, as Ray
    assert all(a["namespace"] != "_ray_internal_collective" for a in ray.util.list_named_actors(True))


@needs_torch
def test_errors_are_the_ones_ray_raises(ray):
    import ray_adapter.ray.util.collective as col

    with pytest.raises(RuntimeError, match="The collective APIs shall be only used inside a Ray actor or task."):
        col.init_collective_group(1, 0, backend="gloo")
    with pytest.raises(RuntimeError, match="Unrecognized tensor type"):
        col.allreduce([1, 2])
    with pytest.raises(RuntimeError, match="only used inside a Ray actor"):
        col.allreduce(np.ones(2))
    assert col.is_group_initialized("default") is False
    assert col.gloo_available() and col.is_backend_available("gloo") and not col.is_backend_available("mpi")

    member = _member_class(ray).remote(0)
    assert ray.get(member.join.remote(1, "solo")) == (0, 1, True)  # a 1-rank group: no rendezvous

    def attempt(*args):
        kind, message, _ = ray.get(member.attempt.remote(*args))
        return kind, message

    assert attempt("init", 1, 0, "gloo", "solo") == ("RuntimeError", "Trying to initialize a group a second time.")
    assert attempt("init", 1, 0, "mpi", "x") == ("ValueError", "Backend MPI not registered")
    assert attempt("init", 1, 0, "torch_gloo", "x") == ("ValueError", "Backend TORCH_GLOO not registered")
    assert attempt("init", 1, 1, "gloo", "x")[0] == "AssertionError"
    assert attempt("init", 1, 0, "gloo", "") == ("ValueError", "group_name '' needs to be a string.")
    if not torch.cuda.is_available():
        kind, message = attempt("init", 1, 0, "nccl", "x")
        assert kind == "RuntimeError" and message.startswith("Backend NCCL is not available.")
    assert attempt("allreduce", torch.ones(1), "nope") == (
        "RuntimeError", "The collective group 'nope' is not initialized in the process.")
    assert attempt("allreduce", "text", "solo")[0] == "RuntimeError"
    assert attempt("allgather", 2, "solo") == (
        "RuntimeError", "The length of the tensor list operands to allgather must be equal to world_size.")
    assert attempt("reducescatter", 3, "solo")[0] == "RuntimeError"
    assert attempt("reduce", 1, "solo") == ("ValueError", "rank '1' must be less than world size '1'")
    assert attempt("reduce", -1, "solo") == ("ValueError", "rank '-1' is negative.")
    assert attempt("send", 0, "solo") == ("RuntimeError", "The destination rank '0' is self.")
    assert attempt("recv", 0, "solo") == ("RuntimeError", "The destination rank '0' is self.")
    kind, message = attempt("allreduce_multigpu", 2, "solo")
    assert kind == "RuntimeError" and "one device per actor" in message
    kind, message = attempt("read_only", "solo")
    assert kind == "ValueError" and "read-only" in message
    assert attempt("allreduce_multigpu", 1, "solo") == ("ok", None)
    assert attempt("destroy", "never-joined") == ("ok", None)  # Ray only logs a warning
    assert attempt("destroy", "solo") == ("ok", None)
    assert ray.get(member.state.remote("solo")) == (False, -1, -1)


@needs_torch
def test_member_that_stays_away_makes_the_others_time_out(ray):
    Member = _member_class(ray, max_concurrency=2)
    a, b = Member.remote(0), Member.remote(1)
    assert ray.get([a.join.remote(2, "g", 0, 2000), b.join.remote(2, "g", 1, 2000)]) == [(0, 2, True), (1, 2, True)]
    kind, message, seconds = ray.get(a.attempt.remote("barrier", "g"))  # b never takes part
    assert kind == "RuntimeError" and "barrier in group 'g' (rank 0 of 2" in message and "Timed out" in message
    assert seconds < 30
    # Rendezvous: rank 1 of a group whose rank 0 never comes raises TimeoutError, as Ray.
    kind, message, seconds = ray.get(b.attempt.remote("init", 2, 1, "gloo", "lonely", 2000))
    assert (kind, message) == ("TimeoutError", "Timed out waiting for GLOO rendezvous metadata for group 'lonely'.")
    # Rank 0 of a group whose other rank never comes: its store times out waiting.
    kind, message, seconds = ray.get(a.attempt.remote("init", 2, 0, "gloo", "alone", 2000))
    assert "could not join the collective group 'alone'" in message and kind != "ok" and seconds < 30
    assert ray.get(a.state.remote("alone")) == (False, -1, -1)  # a failed join leaves nothing behind


@needs_torch
@pytest.mark.embedded_only("kills a member's process mid-collective; in yr local mode actors are threads of the driver")
def test_member_killed_mid_collective_fails_the_others_clearly(ray):
    @ray.remote(num_cpus=0)
    class Gate:
        """Members arrive after their first all-reduce; the driver awaits all of them."""

        def __init__(self, n):
            import asyncio

            self.n, self.count, self.done = n, 0, asyncio.Event()

        async def arrive(self):
            self.count += 1
            if self.count >= self.n:
                self.done.set()

        async def wait(self):
            await self.done.wait()

    @ray.remote(num_cpus=0)
    class Looper:
        def __init__(self, rank):
            self.rank = rank

        def pid(self):
            return os.getpid()

        def loop(self, gate, world, timeout_ms):
            import ray_adapter.ray as ray_in_actor
            import ray_adapter.ray.util.collective as col

            col.init_collective_group(world, self.rank, backend="gloo", group_name="g", gloo_timeout=timeout_ms)
            t, first = torch.ones(1 << 20), True
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    col.allreduce(t, group_name="g")
                except RuntimeError as exc:
                    return type(exc).__name__, str(exc), time.monotonic()
                if first:
                    ray_in_actor.get(gate.arrive.remote())
                    first = False
            return "no error", "", time.monotonic()

    gate = Gate.remote(3)
    loopers = [Looper.remote(r) for r in range(3)]
    pids = ray.get([lp.pid.remote() for lp in loopers])
    refs = [lp.loop.remote(gate, 3, 8000) for lp in loopers]
    ray.get(gate.wait.remote())
    killed_at = time.monotonic()
    ray.kill(loopers[1])
    for ref in (refs[0], refs[2]):
        kind, message, failed_at = ray.get(ref, timeout=60)
        assert kind == "RuntimeError", (kind, message)
        assert "ray.util.collective.allreduce in group 'g'" in message
        assert failed_at - killed_at < 8 + 20  # within the group timeout, with a wide margin
    assert sorted(ray.get([loopers[0].pid.remote(), loopers[2].pid.remote()])) == sorted([pids[0], pids[2]])
    ray.shutdown()
    assert my_worker_processes() == []


@needs_torch
def test_numpy_arrays_go_through_torch_views_without_copies():
    from ray_adapter.ray.util.collective import _torch_groups

    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = _torch_groups.as_tensor(a, writes=True)
    assert t.data_ptr() == a.ctypes.data and tuple(t.shape) == (2, 3)
    t.add_(1)  # writing through the view changes the array itself
    assert a.tolist() == [[1, 2, 3], [4, 5, 6]]
    frozen = np.ones(3, dtype=np.float32)
    frozen.flags.writeable = False
    assert _torch_groups.as_tensor(frozen, writes=False).data_ptr() == frozen.ctypes.data
    with pytest.raises(ValueError, match="read-only"):
        _torch_groups.as_tensor(frozen, writes=True)
    device_tensor = torch.ones(2)
    assert _torch_groups.as_tensor(device_tensor, writes=True) is device_tensor  # tensors as they are


def test_without_torch_the_module_imports_and_calls_name_the_extra(tmp_path):
    hidden = tmp_path / "torch"
    hidden.mkdir()
    (hidden / "__init__.py").write_text("raise ImportError(\"No module named 'torch' (hidden by the test)\")\n")
    code = textwrap.dedent("""
        import numpy as np
        import ray
        import ray.util.collective as col
        print("imported", col.gloo_available(), col.nccl_available(), col.is_backend_available("gloo"))
        ray.init(num_cpus=1)

        @ray.remote(num_cpus=0)
        class A:
            def go(self):
                try:
                    col.init_collective_group(1, 0, backend="gloo")
                except ModuleNotFoundError as exc:
                    return type(exc).__name__, str(exc)

        a = A.remote()
        try:
            col.create_collective_group([a], 1, [0], backend="gloo")
        except ModuleNotFoundError as exc:
            print("driver", type(exc).__name__, "ray-adapter[collective]" in str(exc))
        kind, message = ray.get(a.go.remote())
        print("actor", kind, "ray-adapter[collective]" in message, "compat_matrix" in message)
        ray.shutdown()
    """)
    result = run_code(code, env={"PYTHONPATH": str(tmp_path)}, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == [
        "imported False False False",
        "driver RayAdapterExtraMissingError True",
        "actor RayAdapterExtraMissingError True True",
    ]
