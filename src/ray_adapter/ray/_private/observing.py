"""A look at a runtime this process has not joined, as Ray's State API takes one before
``ray.init()``: through a connection of its own (``core.runtimes.observe``), never through the
process's session, which it neither starts nor disturbs (a thread calling ``ray.init()``
meanwhile is unaffected, the ``ray`` logger is left as it is). Not a module of Ray's."""
import os
import re

from ray_adapter.core import runtimes as _runtimes

_NONE_RUNNING = ("Could not find any running Ray instance. Please specify the one to connect to "
                 "by setting the `--address` flag or `RAY_ADDRESS` environment variable.")
_HOST_PORT = re.compile(r"^[^\s:/]+:\d+$")


def records(kind, address=None):
    """The raw records of ``kind`` ("actors", "nodes", ...) of the running runtime at
    ``address`` (None: ``RAY_ADDRESS``, else this machine's; a dashboard URL ``http://...``:
    this machine's; ``"host:port"``: the runtime with that address). Raises ConnectionError,
    with Ray's State API text, when none runs there (``"local"`` names none: nothing is
    started), ValueError for an address that is not one (as Ray's), and NotImplementedError
    where the runtime does not record ``kind``."""
    address = address or os.environ.get("RAY_ADDRESS") or "auto"
    if "://" in address:
        address = "auto"
    elif address != "auto" and address != "local" and not _HOST_PORT.match(address):
        raise ValueError(f"Invalid address format: {address}")
    core = None if address == "local" else _runtimes.observe(address)
    if core is None:
        raise ConnectionError(_NONE_RUNNING if address in ("auto", "local") else
                              f"Could not find any running Ray instance at {address}: no runtime "
                              "of this machine has that address (`ray status` shows the running one).")
    try:
        return core.state(kind)
    finally:
        core.shutdown()
