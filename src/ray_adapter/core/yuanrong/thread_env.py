"""yr-local: a task's or actor's environment variables, as far as a thread can have them.

Ray sets a task's or actor's ``runtime_env`` ``env_vars`` and ``CUDA_VISIBLE_DEVICES``
(``ASCEND_RT_VISIBLE_DEVICES`` for NPUs: the devices it was granted) in its worker process. In
yr's local mode every call is a thread of the driver, and the environment is one per process. So, while local mode runs,
``os.environ`` gets a per-call overlay (a context variable): Python code running in a task or
actor call (``os.environ[...]``, ``os.environ.get``, ``os.getenv``, ``in``) reads its own
values, and writing one of those keys changes the call's own view. What a thread cannot have,
and still sees the driver's process environment: native code reading ``getenv`` (the CUDA
runtime reads ``CUDA_VISIBLE_DEVICES`` once per process), subprocesses, threads the call
starts, and iterating or copying ``os.environ``. Pick the device from ``ray.get_gpu_ids()``
(e.g. ``torch.device(f"cuda:{ray.get_gpu_ids()[0]}")``) for code that must run on both.

Thread-safety: the overlay is per context (each call sets a dict of its own); :func:`install`
/ :func:`uninstall` are called by the backend's start and shutdown.
"""
import contextvars
import os

#: ``{name: value}`` of the call running in this context, or None (the driver's own code).
_overlay = contextvars.ContextVar("ray_adapter_yr_env_overlay", default=None)


class _CallEnviron(os._Environ):
    """``os.environ`` with the running call's overlay on top (see the module docstring)."""

    def __getitem__(self, key):
        overlay = _overlay.get()
        if overlay is not None and key in overlay:
            return overlay[key]
        return super().__getitem__(key)

    def __setitem__(self, key, value):
        overlay = _overlay.get()
        if overlay is not None and key in overlay:
            if not isinstance(value, str):  # as os.environ: str values only
                raise TypeError(f"str expected, not {type(value).__name__}")
            overlay[key] = value
            return
        super().__setitem__(key, value)


def install():
    """Put the overlay on ``os.environ`` (idempotent)."""
    if type(os.environ) is os._Environ:
        os.environ.__class__ = _CallEnviron


def uninstall():
    if type(os.environ) is _CallEnviron:
        os.environ.__class__ = os._Environ


def enter(variables):
    """Make ``variables`` (``{name: str}``) the running call's view; returns a token for
    :func:`leave` (None when there is nothing to set)."""
    if not variables:
        return None
    return _overlay.set(dict(variables))


def leave(token):
    if token is not None:
        _overlay.reset(token)
