"""verl 0.9.1's single controller runs unchanged on the adapter and prints what it prints on Ray.

``tests/verl_programs/single_controller.py`` drives verl's real classes (RayResourcePool,
RayClassWithInitArgs, RayWorkerGroup, the @register dispatch/execute modes, DataProto dispatch,
fused colocated workers, worker env vars RANK/WORLD_SIZE/RAY_LOCAL_WORLD_SIZE/worker_env). Its
output under real Ray 2.60 is recorded in ``tests/verl_programs/expected/``; the adapter's
must be the same, and when ``RAY_REFERENCE_PYTHON`` names a Ray interpreter with verl installed
the program is also run there live. Skipped when verl is not installed (``.ci/run`` installs
verl 0.9.1 ``--no-deps`` and its light dependencies in both environments).
"""
import importlib.util
import os
import subprocess

import pytest

from conftest import REPO, run_python

PROGRAMS = REPO / "tests" / "verl_programs"
REFERENCE = os.environ.get("RAY_REFERENCE_PYTHON")
needs_verl = pytest.mark.skipif(importlib.util.find_spec("verl") is None,
                                reason="verl is not installed (pip install --no-deps verl==0.9.1 plus "
                                       "tensordict omegaconf transformers, as .ci/run does)")


def _ray_env():
    return {k: v for k, v in os.environ.items() if k not in ("RAY_BACKEND", "RAY_ADDRESS")}


def _adapter_output(name):
    out = run_python([str(PROGRAMS / f"{name}.py")], timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    return out.stdout


@needs_verl
def test_single_controller_matches_recorded_ray_output():
    expected = (PROGRAMS / "expected" / "single_controller.txt").read_text()
    assert _adapter_output("single_controller") == expected


@needs_verl
@pytest.mark.skipif(not REFERENCE, reason="RAY_REFERENCE_PYTHON (an interpreter with real Ray) is not set")
def test_single_controller_recording_matches_live_ray():
    has = subprocess.run([REFERENCE, "-c", "import verl.single_controller.ray"], capture_output=True,
                         text=True, timeout=120, env=_ray_env(), cwd="/")
    if has.returncode != 0:
        pytest.skip(f"verl is not importable by RAY_REFERENCE_PYTHON: {has.stderr.strip().splitlines()[-1:]}")
    out = subprocess.run([REFERENCE, str(PROGRAMS / "single_controller.py")], capture_output=True, text=True,
                         timeout=300, env=_ray_env(), cwd="/")
    assert out.returncode == 0, out.stderr[-4000:]
    assert out.stdout == (PROGRAMS / "expected" / "single_controller.txt").read_text()
