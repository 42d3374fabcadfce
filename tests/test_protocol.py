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
