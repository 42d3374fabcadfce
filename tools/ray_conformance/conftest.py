"""Fixtures for running Ray's own core test files (``python/ray/tests/test_*.py`` of
ray-project/ray) unchanged, against real Ray or against ray-adapter.

This is our own implementation of the fixture contracts of Ray's ``python/ray/tests/conftest.py``
(the names and what a test may expect of them); Ray's test files are not part of this
repository. See README.md next to this file for how to get them and run them.

Contracts (as Ray's conftest defines them):

* ``shutdown_only``: nothing before the test; ``ray.shutdown()`` after it.
* ``ray_start_regular`` / ``ray_start_regular_shared`` (module scope) / ``ray_start_no_cpu`` /
  ``ray_start_2_cpus`` / ``ray_start_10_cpus``: ``ray.init("local", **kwargs)`` with Ray's
  fixture defaults (1 CPU unless the name says otherwise, 150 MiB object store, namespace
  ``default_test_namespace``, ``_system_config`` with short timeouts), updated with the dict a
  test passes through ``@pytest.mark.parametrize(..., indirect=True)``; yields what
  ``ray.init`` returned (tests read ``["address"]``); ``ray.shutdown()`` after.
* ``ray_start_object_store_memory``: ``ray.init`` with 1 CPU and the store size of the param;
  yields that size.
* ``ray_start_cluster`` / ``_enabled`` / ``_init`` / ``_head`` / ``_2_nodes``: a
  ``ray.cluster_utils.Cluster``; the param may say ``num_nodes`` (nodes added with the fixture
  defaults and the param's node arguments) and ``do_init`` (``ray.init(address=...)`` once the
  first node is up; the default is ``num_nodes > 0``). ``_head`` adds one node and connects,
  ``_2_nodes`` two. Yields the cluster; shuts both down after.
* ``call_ray_start``: runs ``ray start --head ...`` (the param may replace the command line,
  or be ``{"cmd": ..., "env": ...}``) and yields the address printed after ``--address='``;
  ``ray stop`` after.

Version skew: the test files in Ray's repository may be newer or older than the Ray the
interpreter has (ray 2.60 here). Names that moved between ``ray._private.test_utils`` and
``ray._common.test_utils`` are made importable from both (on either backend) before the test
modules are imported, so that an import line of another Ray version does not hide every test
of a file; the old module name ``ray.test_utils`` is an alias of ``ray._private.test_utils``.
"""
import os
import shutil
import subprocess
import sys

import pytest

import ray

_MOVED_HELPERS = ("SignalActor", "Semaphore", "wait_for_condition", "async_wait_for_condition",
                  "run_string_as_driver", "run_string_as_driver_nonblocking",
                  "run_string_as_driver_stdout_stderr", "fetch_prometheus_metric_timeseries",
                  "MetricSamplePattern", "PrometheusTimeseries")


def _alias_moved_helpers():
    import importlib

    modules = []
    for name in ("ray._private.test_utils", "ray._common.test_utils"):
        try:
            modules.append(importlib.import_module(name))
        except ImportError:
            pass
    # Ray before 1.x named the module ``ray.test_utils``; old test files still import it.
    if modules and "ray.test_utils" not in sys.modules:
        try:
            importlib.import_module("ray.test_utils")
        except ImportError:
            sys.modules["ray.test_utils"] = modules[0]
            ray.test_utils = modules[0]
    for name in _MOVED_HELPERS:
        owner = next((m for m in modules if name in vars(m)), None)
        if owner is None:
            continue
        for module in modules:
            if name not in vars(module):
                setattr(module, name, getattr(owner, name))


_alias_moved_helpers()


def _provide_ray_tests_package():
    """Ray's wheel does not ship ``ray.tests``, but some test files import helpers from it
    (``ray.tests.client_test_utils.create_remote_signal_actor``). Provide those few, in our
    own code, when the interpreter has no ``ray.tests``."""
    import importlib
    import types

    try:
        importlib.import_module("ray.tests.client_test_utils")
        return
    except ImportError:
        pass
    package = types.ModuleType("ray.tests")
    package.__path__ = []
    helpers = types.ModuleType("ray.tests.client_test_utils")

    def create_remote_signal_actor(ray_module):
        """A SignalActor class made with ``ray_module`` (Ray's helper takes the module so
        that it works over Ray Client too): ``wait(should_wait=True)``, ``send(clear=False)``,
        ``cur_num_waiters()``."""
        from ray._common.test_utils import SignalActor

        return SignalActor

    helpers.create_remote_signal_actor = create_remote_signal_actor
    package.client_test_utils = helpers
    sys.modules["ray.tests"] = package
    sys.modules["ray.tests.client_test_utils"] = helpers


_provide_ray_tests_package()


def _backend_label():
    return "ray-adapter" if "ray_adapter" in (ray.__file__ or "") else f"ray {ray.__version__}"


def pytest_report_header(config):
    return f"ray under test: {_backend_label()} ({ray.__file__})"


def _fixture_system_config():
    # (Ray 2.60's GCS aborts on num_heartbeats_timeout, which older conftests passed.)
    return {"object_timeout_milliseconds": 200,
            "object_store_full_delay_ms": 100}


def _fixture_init_kwargs():
    return {"num_cpus": 1, "object_store_memory": 150 * 1024 * 1024, "dashboard_port": None,
            "namespace": "default_test_namespace", "_system_config": _fixture_system_config()}


def _param(request):
    return dict(getattr(request, "param", None) or {})


def _start(**overrides):
    kwargs = _fixture_init_kwargs()
    kwargs.update(overrides)
    return ray.init("local", **kwargs)


def _stop():
    ray.shutdown()
    os.environ.pop("RAY_ADDRESS", None)


@pytest.fixture
def shutdown_only():
    yield None
    _stop()


@pytest.fixture(scope="class")
def class_ray_instance():
    yield ray.init()
    _stop()


def _started(request, **defaults):
    kwargs = dict(defaults)
    kwargs.update(_param(request))
    info = _start(**kwargs)
    try:
        yield info
    finally:
        _stop()


@pytest.fixture
def ray_start_regular(request):
    yield from _started(request)


@pytest.fixture(scope="module")
def ray_start_regular_shared(request):
    yield from _started(request)


@pytest.fixture
def ray_start_no_cpu(request):
    yield from _started(request, num_cpus=0)


@pytest.fixture
def ray_start_2_cpus(request):
    yield from _started(request, num_cpus=2)


@pytest.fixture
def ray_start_10_cpus(request):
    yield from _started(request, num_cpus=10)


@pytest.fixture
def ray_start_object_store_memory(request):
    size = request.param
    ray.init("local", num_cpus=1, object_store_memory=size,
             _system_config=_fixture_system_config())
    try:
        yield size
    finally:
        _stop()


def _cluster(request, **defaults):
    from ray.cluster_utils import Cluster

    kwargs = dict(defaults)
    kwargs.update(_param(request))
    kwargs.pop("skip_cluster", None)
    num_nodes = kwargs.pop("num_nodes", 0)
    do_init = kwargs.pop("do_init", num_nodes > 0)
    node_kwargs = _fixture_init_kwargs()
    node_kwargs.update(kwargs)
    namespace = node_kwargs.pop("namespace")
    cluster = Cluster()
    try:
        for i in range(num_nodes):
            if i > 0:
                node_kwargs.pop("_system_config", None)
            cluster.add_node(**node_kwargs)
            if i == 0 and do_init:
                ray.init(address=cluster.address, namespace=namespace)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.fixture
def ray_start_cluster(request):
    yield from _cluster(request)


@pytest.fixture
def ray_start_cluster_enabled(request):
    yield from _cluster(request)


@pytest.fixture
def ray_start_cluster_init(request):
    yield from _cluster(request, do_init=True)


@pytest.fixture
def ray_start_cluster_head(request):
    yield from _cluster(request, do_init=True, num_nodes=1)


@pytest.fixture
def ray_start_cluster_2_nodes(request):
    yield from _cluster(request, do_init=True, num_nodes=2)


def _ray_cli():
    """The ``ray`` command of the interpreter running the tests."""
    candidate = os.path.join(os.path.dirname(sys.executable), "ray")
    return candidate if os.path.exists(candidate) else shutil.which("ray") or "ray"


@pytest.fixture
def call_ray_start(request):
    command = ("ray start --head --num-cpus=1 --min-worker-port=0 --max-worker-port=0 "
               "--port 0")
    param = getattr(request, "param", command)
    env = None
    if isinstance(param, dict):
        if "env" in param:
            env = {**param["env"], **os.environ}
        param = param.get("cmd", command)
    args = param.split(" ")
    if args[0] == "ray":
        args[0] = _ray_cli()
    out = subprocess.check_output(args, stderr=subprocess.STDOUT, env=env).decode(
        "utf-8", errors="replace")
    marker = "--address='"
    address = out[out.find(marker) + len(marker):].split("'")[0]
    try:
        yield address
    finally:
        ray.shutdown()
        subprocess.call([_ray_cli(), "stop"], env=env)
        os.environ.pop("RAY_ADDRESS", None)


@pytest.fixture
def call_ray_stop_only():
    yield
    subprocess.call([_ray_cli(), "stop"])
    os.environ.pop("RAY_ADDRESS", None)
