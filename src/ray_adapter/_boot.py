"""Interpreter-start bootstrap, run from ``ray_adapter.pth`` / ``ray_adapter.start``.

Stdlib only and wrapped so that it can never raise: it runs in every interpreter that starts
with ``RAY_BACKEND=yuanrong`` set.
"""
import os
import sys


def enabled():
    """True when ``RAY_BACKEND`` asks for the adapter (case-insensitive ``yuanrong``)."""
    return os.environ.get("RAY_BACKEND", "").strip().lower() == "yuanrong"


def boot():
    """Install the ``ray`` import finder; report (never raise) on failure."""
    try:
        from ray_adapter import hook

        hook.install()
    except Exception as exc:  # pragma: no cover - defensive: must not break interpreter start
        sys.stderr.write(f"ray-adapter: import hook not installed: {exc!r}\n")


def boot_if_enabled():
    """PEP 829 ``.start`` entry point: the same gate as the ``.pth`` line."""
    if enabled():
        boot()
