"""``ray.cloudpickle`` (Ray vendors cloudpickle 3.1; the adapter serves the cloudpickle package)."""
import os
import subprocess

import pytest

from conftest import run_python

REFERENCE = os.environ.get("RAY_REFERENCE_PYTHON")

PROGRAM = """
import io, pickle, sys, types
import ray
cp = ray.cloudpickle
k = 5
blob = cp.dumps(lambda x: x * k)
print(cp.loads(blob)(3), pickle.loads(blob)(4))
f = io.BytesIO(); cp.dump({"a": (1, 2)}, f); f.seek(0); print(cp.load(f))
print(cp.Pickler is cp.CloudPickler, cp.DEFAULT_PROTOCOL == pickle.HIGHEST_PROTOCOL, cp.PicklingError is pickle.PicklingError)
mod = types.ModuleType("made_up_mod"); sys.modules["made_up_mod"] = mod
cp.register_pickle_by_value(mod); print("made_up_mod" in cp.list_registry_pickle_by_value()); cp.unregister_pickle_by_value(mod)
print("made_up_mod" in cp.list_registry_pickle_by_value())
print(ray.cloudpickle.cloudpickle.dumps is cp.dumps, ray.cloudpickle.cloudpickle_fast.dumps is cp.dumps)
import ray.cloudpickle.cloudpickle_fast as fast; print(fast.CloudPickler is cp.CloudPickler)
"""


def test_cloudpickle_round_trips_as_in_ray():
    out = run_python(["-c", PROGRAM])
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["15 20", "{'a': (1, 2)}", "True True True", "True", "False",
                                       "True True", "True"]


@pytest.mark.skipif(not REFERENCE, reason="RAY_REFERENCE_PYTHON (an interpreter with real Ray) is not set")
def test_cloudpickle_same_output_as_real_ray():
    ours = run_python(["-c", PROGRAM])
    theirs = subprocess.run([REFERENCE, "-c", PROGRAM], capture_output=True, text=True, timeout=120, cwd="/",
                            env={k: v for k, v in os.environ.items() if k != "RAY_BACKEND"})
    assert theirs.returncode == 0, theirs.stderr[-2000:]
    assert ours.stdout == theirs.stdout
