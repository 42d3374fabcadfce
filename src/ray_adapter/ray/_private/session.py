"""The session: the runtime core this driver started and what ``ray.init`` returned
(:data:`_context`, a :class:`RayContext`); :func:`start` (``ray.init``'s last step),
``ray.shutdown`` and ``ray.is_initialized``.

Low in the proxy's layers (above :mod:`.core_access`, below options, refs and the API): it
knows nothing of ``init``'s arguments, which ``ray._private.worker.init`` checks before it
calls :func:`start` (and which it registers with :mod:`.core_access` as what starts the
runtime on a first call without ``ray.init()``).

Thread-safety: ``_init_lock`` (re-entrant) serializes ``init`` and ``shutdown``; ``_context``
is rebound under it and read without it (one reference, atomic).
"""
import atexit
import sys
import threading
import weakref

from ray_adapter import RAY_API_VERSION
from ray_adapter import core as _core
from ray_adapter.ray._private import local_clusters as _local_clusters
from ray_adapter.ray._private.core_access import context_if_started

_init_lock = threading.RLock()
#: What ends with the session (a compiled graph's channels): objects with ``_end_with_session()``,
#: held weakly, so the set is never larger than what lives.
_tied = weakref.WeakSet()

#: What the last ``init`` returned (None before it and after ``shutdown``).
_context = None


class RayContext(dict):
    """What ``ray.init()`` returns (``ray._private.worker.RayContext``): a context manager that
    shuts Ray down on exit; ``address_info`` keys are also readable as items."""

    def __init__(self, address_info):
        super().__init__(address_info)
        self.address_info = address_info
        self.dashboard_url = ""
        self.python_version = "{}.{}.{}".format(*sys.version_info[:3])
        self.ray_version = RAY_API_VERSION
        self.ray_commit = "ray-adapter"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        shutdown()

    def disconnect(self):
        shutdown()

    def __repr__(self):
        return (f"RayContext(dashboard_url={self.dashboard_url!r}, python_version="
                f"{self.python_version!r}, ray_version={self.ray_version!r}, "
                f"ray_commit={self.ray_commit!r})")


def is_initialized():
    """``ray.is_initialized()``: True after ``ray.init()`` in the driver, always in workers."""
    return _core.is_started()


def start(make_options, ignore_reinit_error=False):
    """Start the runtime core for ``ray.init``: under the session lock, unless it runs already,
    ``make_options()`` (the caller's checks of its arguments, then the core's
    :class:`~ray_adapter.core.InitOptions`; what it raises leaves nothing started) and the
    core is started with them. Returns the :class:`RayContext` (also :data:`_context`). When
    it runs already: that context with ``ignore_reinit_error``, else Ray's RuntimeError."""
    global _context
    with _init_lock:
        if _core.is_started():
            if ignore_reinit_error:
                return _context or RayContext({})
            raise RuntimeError(
                "Maybe you called ray.init twice by accident? This error can be suppressed by "
                "passing in 'ignore_reinit_error=True' or by calling 'ray.shutdown()' prior to "
                "'ray.init()'.")
        _, info = _core.start(make_options())
        _context = RayContext({
            "node_ip_address": info.get("node_ip_address", "127.0.0.1"),
            "redis_address": None,
            "object_store_address": "",
            "raylet_socket_name": "",
            "webui_url": "",
            "session_dir": "",
            "metrics_export_port": info.get("metrics_export_port", -1),
            "gcs_address": info.get("address", ""),
            "address": info.get("address", ""),
            "dashboard_agent_listen_port": -1,
            "node_id": info.get("node_id", ""),
        })
        return _context


def shutdown(_exiting_interpreter=False, *, wait_for_processes=False):
    """Stop the runtime this driver started (mirrors ``ray.shutdown``): every worker process
    exits and every object is freed. A no-op when not initialized or inside a worker."""
    global _context
    with _init_lock:
        ctx = context_if_started()
        if ctx is not None and not ctx.is_driver:
            return
        for obj in list(_tied):  # as Ray tears its compiled graphs down first
            obj._end_with_session()
        _tied.clear()
        _core.shutdown()
        _context = None
        _local_clusters.disconnected()


def tie_to_session(obj):
    """End ``obj`` (call its ``_end_with_session()``) when this session shuts down."""
    _tied.add(obj)


# As Ray (registered when the module loads): the driver's runtime is shut down when the
# interpreter exits, before objects are finalized, so ``is_initialized()`` is False in the
# ``__del__`` methods that run then (and a call there behaves as after ``ray.shutdown()``).
atexit.register(shutdown, _exiting_interpreter=True)
