"""The ``ray`` logger, set up as Ray 2.60 sets it up (its ``ray._private.log`` and
``ray._private.ray_logging.setup_logger``, written anew here).

``import ray`` gives the ``ray`` logger level INFO, one handler writing to the ``sys.stderr``
of that moment (as Ray's: a later ``sys.stderr = ...`` does not move it; fd 2 is where it goes)
and ``propagate = False`` (ray's records do not reach the root logger's handlers); ``ray.rllib``
logs WARNING and above. In the driver a record reads ``<time>\\t<LEVEL> <file>:<line> --
<message>``; in a task or actor only the message is written (the driver prefixes a worker's
output with ``(name pid=N)``). ``ray.init(configure_logging=True, logging_level=...,
logging_format=...)`` then sets the level and, given a format, every handler's formatter;
``configure_logging=False`` removes the handlers (as Ray does).

Thread-safety: :func:`configure_at_import` runs once, under :data:`_lock`; the handler keeps no
state of its own beyond what ``logging`` guards.
"""
import logging
import os
import sys
import threading

#: Ray's default record format for the driver (``ray_constants.LOGGER_FORMAT``).
LOGGER_FORMAT = "%(asctime)s\t%(levelname)s %(filename)s:%(lineno)s -- %(message)s"
#: ``ray.init``'s default ``logging_level`` (``ray_constants.LOGGER_LEVEL``).
LOGGER_LEVEL = os.environ.get("RAY_LOGGER_LEVEL", "info")

_lock = threading.Lock()
_configured = False


def _in_task():
    """True in a task or actor call (worker mode), False in the driver or before ``ray.init``."""
    from ray_adapter.ray._private.core_access import context_if_started

    try:
        ctx = context_if_started()
    except Exception:  # noqa: BLE001 - a log record must never fail on the runtime's state
        return False
    return ctx is not None and not ctx.is_driver


class RayStderrHandler(logging.StreamHandler):
    """Writes each record to ``sys.stderr``: in the driver the one of when the handler was
    made, formatted; in tasks and actors the current one (the worker's writer, which prefixes
    ``(name pid=N)``), the bare message."""

    _plain = logging.Formatter("%(message)s")

    def emit(self, record):
        if not _in_task():
            super().emit(record)
            return
        # Under the handler's lock (handle()): this record's stream and format only.
        saved = self.stream, self.formatter
        self.stream, self.formatter = sys.stderr, self._plain
        try:
            super().emit(record)
        finally:
            self.stream, self.formatter = saved


def configure_at_import():
    """What ``import ray`` does to the ``ray`` logger (once per process)."""
    global _configured
    with _lock:
        if _configured:
            return
        _configured = True
        handler = RayStderrHandler()
        handler.setFormatter(logging.Formatter(LOGGER_FORMAT))
        ray_logger = logging.getLogger("ray")
        ray_logger.setLevel(logging.INFO)
        ray_logger.addHandler(handler)
        ray_logger.propagate = False
        logging.getLogger("ray.rllib").setLevel(logging.WARNING)


def configure_at_init(configure_logging, logging_level, logging_format):
    """What ``ray.init`` does to the ``ray`` logger: ``logging_level`` (an int, or a name such
    as ``"info"``) and ``logging_format`` (None: Ray's) when ``configure_logging``; otherwise
    the logger loses its handlers. Raises ``ValueError`` for an unknown level name."""
    ray_logger = logging.getLogger("ray")
    if not configure_logging:
        ray_logger.handlers.clear()
        return
    formatter = logging.Formatter(logging_format or LOGGER_FORMAT)
    for handler in ray_logger.handlers:
        handler.setFormatter(formatter)
    if isinstance(logging_level, str):
        logging_level = logging.getLevelName(logging_level.upper())
    ray_logger.setLevel(logging_level)
