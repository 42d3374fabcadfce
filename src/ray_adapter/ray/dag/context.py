"""``ray.dag.context``: :class:`DAGContext`, the process-wide settings of compiled graphs.

Defaults come from the ``RAY_CGRAPH_<field>`` environment variables, as in Ray. The adapter's
compiled graphs use ``get_timeout`` (the default wait of ``ray.get`` on their results, in
seconds; -1 waits forever), ``teardown_timeout`` (seconds) and ``max_inflight_executions``; the
buffer settings are kept for code that sets them and have no effect: the pipes carry values of
any size (see the compat matrix).
"""
import os
import threading
from dataclasses import dataclass

_context = None
_context_lock = threading.Lock()


def _env(name, default, kind):
    value = os.environ.get(f"RAY_CGRAPH_{name}")
    if value is None:
        return default
    if kind is bool:
        return value.lower() in ("1", "true")
    return kind(float(value)) if kind is int else kind(value)


@dataclass
class DAGContext:
    """Settings of compiled graphs (mirrors ``ray.dag.DAGContext``); ``get_current()`` gives
    the process's one instance. Times are seconds, sizes bytes."""

    submit_timeout: int = _env("submit_timeout", 10, int)
    get_timeout: int = _env("get_timeout", 10, int)
    teardown_timeout: int = _env("teardown_timeout", 30, int)
    read_iteration_timeout: float = _env("read_iteration_timeout_s", 0.1, float)
    buffer_size_bytes: int = _env("buffer_size_bytes", 1_000_000, int)
    max_inflight_executions: int = _env("max_inflight_executions", 10, int)
    max_buffered_results: int = _env("max_buffered_results", 1000, int)
    overlap_gpu_communication: bool = _env("overlap_gpu_communication", False, bool)

    def __post_init__(self):
        if self.read_iteration_timeout > self.get_timeout:
            raise ValueError(f"RAY_CGRAPH_read_iteration_timeout_s ({self.read_iteration_timeout}) "
                             f"must be less than or equal to RAY_CGRAPH_get_timeout "
                             f"({self.get_timeout})")

    @staticmethod
    def get_current():
        """The process's DAGContext (made with the defaults on first use)."""
        global _context
        with _context_lock:
            if _context is None:
                _context = DAGContext()
            return _context
