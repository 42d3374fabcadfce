"""Differential tests: unmodified Ray programs, run under the adapter (RAY_BACKEND=yuanrong in
a fresh interpreter) and compared with real Ray 2.60's output.

The recorded outputs (``tests/programs/expected``, ``examples/expected``) come from real Ray.
When ``RAY_REFERENCE_PYTHON`` names an interpreter with real Ray installed (``.ci/run`` sets
one up), each program also runs under it in the same session and the two outputs are compared
live.
"""
import importlib.util
import os
import re
import subprocess

import pytest

from conftest import EXAMPLES, PROGRAMS, REPO, run_python

PROGRAM_FILES = sorted(p.stem for p in PROGRAMS.glob("*.py"))
EXAMPLE_FILES = sorted(p.stem for p in EXAMPLES.glob("*.py"))
REFERENCE = os.environ.get("RAY_REFERENCE_PYTHON")


def ray_stdout(path, with_notices=False):
    """The program's stdout under real Ray, without Ray's '(raylet)' notices (printed to
    stdout at a timing-dependent place when a worker dies; see tests/programs/README.md);
    ``with_notices``: ``(stdout, whether Ray printed any)``."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_BACKEND", "PYTHONPATH")}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    result = subprocess.run([REFERENCE, str(path)], capture_output=True, text=True, timeout=300,
                            cwd=str(REPO), env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    # The notice can land in the middle of a line the program is printing: cut it out from
    # its "(raylet)" marker through its own newline, leaving the program's text joined.
    cleaned = _RAYLET_NOTICE.sub("", result.stdout)
    return (cleaned, cleaned != result.stdout) if with_notices else cleaned


_RAYLET_NOTICE = re.compile(r"(?:\x1b\[\d+m)?\(raylet\)(?:\x1b\[0m)?[^\n]*\n")


def adapter_stdout(path, runtime="embedded"):
    env = {"RAY_ADAPTER_RUNTIME": runtime}
    result = run_python([str(path)], cwd=str(REPO), timeout=180, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


# What a program needs that yr's local mode (tasks and actors as threads of the driver) lacks.
YR_LOCAL_SKIPS = {
    "actor_cleanup": "follows an actor's process end (its atexit handlers; no __del__ after "
                     "sys.exit() in its hook): in yr local mode actors are threads of the "
                     "driver, whose atexit handlers run when the driver ends, and the instance "
                     "is collected (matrix: ray.actor.ActorClass)",
    "actor_never_ran": "crashes an actor's constructor with os._exit: in yr local mode actors "
                       "are threads of the driver, so it would end the program itself",
    "compiled_graph_faults": "an actor of a compiled graph ends its process with os._exit: in yr "
                             "local mode actors are threads of the driver, so it would end the "
                             "program itself",
    "crash_words": "crashes actors and tasks with os._exit: in yr local mode they are threads "
                   "of the driver, so it would end the program itself",
    "errors": "crashes workers with os._exit and interrupts running tasks: in yr local mode "
              "tasks are threads of the driver, so os._exit would end the program itself",
    "placement_gpus": "checks the GPU ids handed to actors: the yuanrong backend reports none "
                      "(Yuanrong sets device visibility itself; matrix: ray.get_gpu_ids partial)",
    "runtime_envs": "runs tasks in a working_dir copy: in yr local mode tasks are threads of "
                    "the driver, whose cwd cannot change per task (see the compat matrix)",
    "task_worker_reuse": "sets max_calls, which the yuanrong backend does not provide (matrix: "
                         "task.max_calls gap)",
    "state_workers": "lists worker processes and tasks: in yr local mode tasks and actors are "
                     "threads of the driver, the one process listed, and no task events are "
                     "recorded (matrix: ray.util.state list_workers partial, list_tasks gap)",
}
RUNTIMES = ["embedded", "yr-local"]
# Programs that import an optional package: skipped (saying so) where it is not installed.
NEEDS = {"collective_weights": "torch", "torch_values": "torch"}


def _has_module(python, module):
    if python is None:
        return importlib.util.find_spec(module) is not None
    return subprocess.run([python, "-c", f"import {module}"], capture_output=True, timeout=120).returncode == 0


def _skip_missing(name, python=None):
    module = NEEDS.get(name)
    if module and not _has_module(python, module):
        where = "the reference interpreter (RAY_REFERENCE_PYTHON)" if python else "this environment"
        pytest.skip(f"{name} needs {module!r}, which {where} does not have")


#: The runtimes the programs run on here (comma-separated; default both): CI's runs on the
#: oldest and newest Python set "embedded", as 3.11's run has compared yr-local already.
SELECTED = os.environ.get("RAY_ADAPTER_TEST_PROGRAM_RUNTIMES", ",".join(RUNTIMES)).split(",")


def _skip_unsupported(name, runtime):
    if runtime not in SELECTED:
        pytest.skip(f"{runtime}: not selected by RAY_ADAPTER_TEST_PROGRAM_RUNTIMES={','.join(SELECTED)}")
    _skip_missing(name)
    if runtime != "yr-local":
        return
    try:
        import yr  # noqa: F401
    except ImportError:
        pytest.skip("yr-local: the openYuanrong SDK is not installed (pip install 'ray-adapter[yuanrong]')")
    if name in YR_LOCAL_SKIPS:
        pytest.skip(f"yr-local: {YR_LOCAL_SKIPS[name]}")


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("name", PROGRAM_FILES)
def test_program_matches_recorded_ray_output(name, runtime):
    _skip_unsupported(name, runtime)
    expected = (PROGRAMS / "expected" / f"{name}.out").read_text()
    assert adapter_stdout(PROGRAMS / f"{name}.py", runtime) == expected


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_example_matches_recorded_ray_output(name, runtime):
    _skip_unsupported(name, runtime)
    expected = (EXAMPLES / "expected" / f"{name}.out").read_text()
    assert adapter_stdout(EXAMPLES / f"{name}.py", runtime) == expected


@pytest.mark.skipif(not REFERENCE, reason="RAY_REFERENCE_PYTHON (an interpreter with real Ray) is not set")
@pytest.mark.parametrize("path", [PROGRAMS / f"{n}.py" for n in PROGRAM_FILES]
                         + [EXAMPLES / f"{n}.py" for n in EXAMPLE_FILES], ids=lambda p: p.stem)
def test_program_matches_live_ray(path):
    _skip_missing(path.stem)
    _skip_missing(path.stem, REFERENCE)
    ours = adapter_stdout(path)
    theirs, noticed = ray_stdout(path, with_notices=True)
    for _ in range(2):
        # Ray's "(raylet)" worker-died notice lands on its stdout at a timing-dependent place,
        # sometimes splitting the program's lines beyond repair: such a run of Ray is repeated.
        if theirs == ours or not noticed:
            break
        theirs, noticed = ray_stdout(path, with_notices=True)
    assert ours == theirs
