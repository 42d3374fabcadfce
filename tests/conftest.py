"""Shared fixtures.

In-process tests use the proxy package directly (``ray_adapter.ray``) against a real embedded
runtime with real worker processes. Tests of the import hook and of whole programs run real
interpreters in subprocesses with ``RAY_BACKEND=yuanrong`` (never mutating this process's
``sys.meta_path``).
"""
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[1]
PROGRAMS = REPO / "tests" / "programs"
EXAMPLES = REPO / "examples"


def run_python(args, *, backend=True, env=None, timeout=120, cwd=None, input=None):
    """Run ``python ARGS`` in a fresh interpreter; ``backend`` sets RAY_BACKEND=yuanrong."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("RAY_BACKEND", "RAY_ADDRESS")}
    if backend:
        full_env["RAY_BACKEND"] = "yuanrong"
    full_env.update(env or {})
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout,
                          env=full_env, cwd=cwd or "/", input=input)


def run_code(code, **kwargs):
    return run_python(["-c", code], **kwargs)


def worker_processes():
    """Live embedded-runtime worker processes (any parent)."""
    out = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            cmd = p.info["cmdline"] or []
            if any("ray_adapter.core.embedded.worker" in c for c in cmd) and p.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            continue
    return out


def my_worker_processes():
    """Worker processes that are children of this test process."""
    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return []
    return [p for p in children if _is_worker(p)]


def _is_worker(p):
    try:
        return any("ray_adapter.core.embedded.worker" in c for c in p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.fixture
def ray():
    """The proxy ``ray`` with a fresh 2-CPU embedded runtime; shut down afterwards."""
    import ray_adapter.ray as ray_module

    if ray_module.is_initialized():
        ray_module.shutdown()
    ray_module.init(num_cpus=2)
    yield ray_module
    ray_module.shutdown()


@pytest.fixture
def ray_module():
    """The proxy ``ray`` without starting anything (the test calls init itself)."""
    import ray_adapter.ray as ray_module

    if ray_module.is_initialized():
        ray_module.shutdown()
    yield ray_module
    ray_module.shutdown()
