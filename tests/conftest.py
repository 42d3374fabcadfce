"""Shared fixtures.

In-process tests use the proxy package directly (``ray_adapter.ray``) against a real embedded
runtime with real worker processes. Tests of the import hook and of whole programs run real
interpreters in subprocesses with ``RAY_BACKEND=yuanrong`` (never mutating this process's
``sys.meta_path``).
"""
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

# Every runtime started by this run (in-process, in subprocesses, by `ray start`) registers in
# a registry directory of this run's own, so that `ray.init("auto")` and a plain `ray.init()`
# never find another run's runtime (CI runs two suites at once) or a head a developer started.
# Made once, by the pytest process: a worker process that imports a test module (a task defined
# there) imports this file too, and takes the directory it inherited.
_REGISTRY = os.environ.get("RAY_ADAPTER_TESTS_REGISTRY")
_OWN_REGISTRY = _REGISTRY is None
if _OWN_REGISTRY:
    _REGISTRY = os.environ["RAY_ADAPTER_TESTS_REGISTRY"] = tempfile.mkdtemp(prefix="ray-adapter-tests-")
os.environ["RAY_TMPDIR"] = _REGISTRY

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


def when_restarted(ray, call, timeout=30):
    """``ray.get(call())`` once the actor is back: as in Ray, a call made while the actor is
    restarting (and may not be retried) fails with ActorUnavailableError, so a caller retries
    (the S7 pattern of real workloads) until the restart is done."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        try:
            return ray.get(call(), timeout=timeout)
        except ray.exceptions.ActorUnavailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def process_alive(pid):
    """True while ``pid`` runs (a zombie, or a process gone meanwhile, is not alive)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


_WORKER_MODULE = "ray_adapter.core.embedded.worker"
_TEMPLATE_MODULE = "ray_adapter.core.embedded.zygote"  # workers forked from it share its cmdline


def _runtime_process(p):
    """'worker', 'template' or None for a process (a forked worker's parent is the template)."""
    cmd = " ".join(p.cmdline())
    if _WORKER_MODULE in cmd:
        return "worker"
    if _TEMPLATE_MODULE in cmd:
        parent = p.parent()
        return "worker" if parent is not None and _TEMPLATE_MODULE in " ".join(parent.cmdline()) else "template"
    return None


def worker_processes():
    """Live embedded-runtime worker processes (any parent)."""
    out = []
    for p in psutil.process_iter(["status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and _runtime_process(p) == "worker":
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
        return p.status() != psutil.STATUS_ZOMBIE and _runtime_process(p) == "worker"
    except psutil.Error:
        return False


def _yr_available():
    try:
        import yr  # noqa: F401
    except ImportError:
        return False
    return True


# The conformance suite: every test taking the ``ray`` or ``ray_module`` fixture runs on each
# backend. "yr-local" is the yuanrong backend on yr's local mode (RAY_ADAPTER_RUNTIME=yr-local).
BACKENDS = ["embedded", "yr-local"]


def pytest_sessionfinish(session, exitstatus):
    if not _OWN_REGISTRY:  # a pytest run started by a test of this one: the outer run's
        return
    from ray_adapter.core import runtimes

    runtimes.stop_heads(force=True)  # what a failed test of `ray start` left
    shutil.rmtree(_REGISTRY, ignore_errors=True)


def pytest_configure(config):
    config.addinivalue_line("markers", "embedded_only(reason): the test needs the embedded "
                            "runtime; on other backends it is skipped with that reason")


def _select_backend(request, monkeypatch):
    backend = request.param
    marker = request.node.get_closest_marker("embedded_only")
    if backend != "embedded" and marker is not None:
        pytest.skip(f"{backend}: {marker.args[0]}")
    if backend == "yr-local":
        if not _yr_available():
            pytest.skip("yr-local: the openYuanrong SDK is not installed (pip install 'ray-adapter[yuanrong]')")
        monkeypatch.setenv("RAY_ADAPTER_RUNTIME", "yr-local")
    else:
        monkeypatch.delenv("RAY_ADAPTER_RUNTIME", raising=False)
    return backend


@pytest.fixture(params=BACKENDS)
def ray(request, monkeypatch):
    """The proxy ``ray`` with a fresh 2-CPU runtime of each backend; shut down afterwards."""
    import ray_adapter.ray as ray_module

    _select_backend(request, monkeypatch)
    if ray_module.is_initialized():
        ray_module.shutdown()
    ray_module.init(num_cpus=2)
    yield ray_module
    ray_module.shutdown()


@pytest.fixture
def ray1(ray):
    """The proxy ``ray`` with a 1-CPU runtime: one task at a time, the rest queued or
    pipelined to the busy worker."""
    ray.shutdown()
    ray.init(num_cpus=1)
    return ray


@pytest.fixture(params=BACKENDS)
def ray_module(request, monkeypatch):
    """The proxy ``ray`` of each backend without starting anything (the test calls init)."""
    import ray_adapter.ray as ray_module

    _select_backend(request, monkeypatch)
    if ray_module.is_initialized():
        ray_module.shutdown()
    yield ray_module
    ray_module.shutdown()
