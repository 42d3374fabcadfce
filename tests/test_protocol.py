"""The driver <-> worker wire contract (``core.embedded.protocol``): typed messages only."""
import inspect

import msgspec

from ray_adapter.core.embedded import protocol, service


def test_every_query_is_a_typed_message_the_driver_answers():
    """One message per query, keyword-built, each with a driver answer; nothing dispatched by
    name or opened from a pickle of arguments."""
    assert set(service.ANSWERS) == set(protocol.QUERIES)
    for query in protocol.QUERIES:
        fields = [f for f in msgspec.structs.fields(query) if f.name != "req_id"]
        sample = {}
        for f in fields:
            if f.type is bytes:
                sample[f.name] = b"\x01" * 4
            elif f.type is str:
                sample[f.name] = "x"
            elif f.type is bool:
                sample[f.name] = True
            elif f.type is protocol.Payload:
                sample[f.name] = protocol.Payload(b"data")
            else:  # optional and container fields
                sample[f.name] = None if "Optional" in str(f.type) else []
        message = query(req_id=7, **sample)
        assert protocol.driver_decoder.decode(protocol.encode(message)) == message
    assert not hasattr(protocol, "QueryReq")
    assert "getattr" not in inspect.getsource(service.DriverService.on_query)


def test_a_worker_of_another_protocol_version_is_refused_by_both_ends():
    """The worker checks the driver's Init (it exits with VERSION_MISMATCH_EXIT_CODE) and the
    driver checks the worker's Hello; either way the reason names the versions."""
    from ray_adapter.core.embedded import pool

    why = pool.boot_failure("/venv/bin/python", protocol.VERSION_MISMATCH_EXIT_CODE)
    assert "another protocol version" in why and str(protocol.VERSION) in why
    why = pool.version_failure("/venv/bin/python", protocol.VERSION + 1)
    assert str(protocol.VERSION + 1) in why and "/venv/bin/python" in why


def test_an_actor_a_task_creates_keeps_every_option_through_the_typed_wire(ray):
    """A worker's actor creation travels as typed fields (ActorOptionsWire); its handle
    metadata as the worker's own pickle, which names a class of the test module by reference
    (retry_exceptions) and is opened only where a handle is rebuilt."""
    import os

    PlacementGroupSchedulingStrategy = ray.util.scheduling_strategies.PlacementGroupSchedulingStrategy
    pg = ray.util.placement_group([{"CPU": 0.5}, {"CPU": 0.5}])
    ray.get(pg.ready(), timeout=30)

    @ray.remote
    class Flaky:
        def __init__(self):
            self.n = 0

        @ray.method(retry_exceptions=[_Flake], max_task_retries=2)
        def attempt(self):
            self.n += 1
            if self.n < 2:
                raise _Flake()
            ctx = ray.get_runtime_context()
            return self.n, os.environ.get("WIRE_VAR"), ctx.get_placement_group_id() == pg.id.hex()

    @ray.remote
    def make():
        actor = Flaky.options(
            name="typed-wire", lifetime="detached", max_concurrency=2, num_cpus=0.5,
            runtime_env={"env_vars": {"WIRE_VAR": "set"}},
            scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=1),
        ).remote()
        return ray.get(actor.attempt.remote())

    assert ray.get(make.remote(), timeout=60) == (2, "set", True)
    handle = ray.get_actor("typed-wire")  # rebuilt in the driver from the worker's pickle
    assert ray.get(handle.attempt.remote(), timeout=30) == (3, "set", True)
    ray.kill(handle)


class _Flake(Exception):
    pass
