"""Attached to a running runtime for one look, as a tool: how Ray's State API (before
``ray.init()``) and ``ray status`` / ``ray list`` read a runtime this process has not joined.
Not a module of Ray's; above :mod:`.worker`, whose ``init`` / ``shutdown`` it calls."""
import os

from ray_adapter.ray._private import worker

_NONE_RUNNING = "Could not find any running Ray instance."


class Observing:
    """``with Observing(address):`` attached to a running runtime for one look, as a tool
    (no job of its own), and detached after: how Ray's State API and ``ray status`` / ``ray
    list`` read a cluster this process has not joined. ``address``: None (``RAY_ADDRESS``,
    else the runtime ``ray start`` started, else this machine's newest), an address, or a
    dashboard URL (``http://...``: this machine's runtime). Raises ConnectionError, with
    Ray's text, when there is none to attach to."""

    __slots__ = ("address",)

    def __init__(self, address=None):
        self.address = address

    def __enter__(self):
        address = self.address or os.environ.get("RAY_ADDRESS") or "auto"
        if "://" in address:  # a dashboard / Jobs API URL: the runtime of this machine
            address = "auto"
        try:
            worker.init(address=address, logging_level="WARNING", log_to_driver=False,
                        _ray_adapter_observer=True)
        except ConnectionError as e:
            if address == "auto" and str(e).startswith(_NONE_RUNNING):  # the State API's text
                raise ConnectionError(_NONE_RUNNING + " Please specify the one to connect to by "
                                      "setting the `--address` flag or `RAY_ADDRESS` environment "
                                      "variable.") from None
            raise
        return self

    def __exit__(self, *exc):
        worker.shutdown()
