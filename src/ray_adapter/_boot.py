"""Interpreter-start bootstrap, run from ``ray_adapter.pth`` / ``ray_adapter.start``.

Stdlib only (``os``, ``sys``) and wrapped so that it can never raise: the ``.pth`` line imports
it in every interpreter that starts with ``RAY_BACKEND`` set to anything. ``yuanrong``
(case-insensitive) installs the import hook; any other non-empty value warns once on stderr
(per process tree: the first interpreter marks the environment its children inherit) and
changes nothing, so a guess such as ``RAY_BACKEND=embedded`` does not silently fall through to
``No module named 'ray'``.
"""
import os
import sys

#: Set by the first interpreter that warned about a RAY_BACKEND value (children inherit it).
WARNED_ENV = "_RAY_ADAPTER_BACKEND_WARNED"


def enabled():
    """True when ``RAY_BACKEND`` asks for the adapter (case-insensitive ``yuanrong``)."""
    return os.environ.get("RAY_BACKEND", "").strip().lower() == "yuanrong"


def unknown_value():
    """The ``RAY_BACKEND`` value when it is set to something ray-adapter does not know (a
    non-empty value other than ``yuanrong``), else None."""
    value = os.environ.get("RAY_BACKEND", "").strip()
    return value if value and value.lower() != "yuanrong" else None


def unknown_value_message(value):
    """What is wrong with ``RAY_BACKEND=value`` and what to set instead (one paragraph)."""
    return (f"RAY_BACKEND={value!r} is not a value ray-adapter knows, so the adapter is off and "
            "`import ray` is real Ray (if it is installed). Set RAY_BACKEND=yuanrong to use "
            "ray-adapter: ray.init() then runs on the embedded runtime, or on yuanrong when a "
            "cluster address or RAY_ADAPTER_RUNTIME=yr-local selects it. `ray-adapter doctor` "
            "checks the set-up.")


def boot():
    """Install the ``ray`` import finder; report (never raise) on failure."""
    try:
        from ray_adapter import hook

        hook.install()
    except Exception as exc:  # pragma: no cover - defensive: must not break interpreter start
        sys.stderr.write(f"ray-adapter: import hook not installed: {exc!r}\n")


def start():
    """The ``.pth`` entry (run only when ``RAY_BACKEND`` is non-empty): install the hook for
    ``yuanrong``; warn once on stderr for any other value."""
    try:
        if enabled():
            boot()
            return
        value = unknown_value()
        if value is None or os.environ.get(WARNED_ENV) == value:
            return
        os.environ[WARNED_ENV] = value
        if sys.stderr is not None:
            sys.stderr.write(f"ray-adapter: warning: {unknown_value_message(value)}\n")
    except Exception:  # pragma: no cover - defensive: must not break interpreter start
        pass


def boot_if_enabled():
    """PEP 829 ``.start`` entry point: the same as the ``.pth`` line."""
    if os.environ.get("RAY_BACKEND"):
        start()
