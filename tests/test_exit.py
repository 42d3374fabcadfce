"""The driver's interpreter exits while tasks still run, as under Ray 2.60: its ``atexit``
shutdown gives them 0.5 s with the runtime still working (what they print meanwhile is shown,
a task may still submit and get), then stops every worker, so a task that never ends does not
hold the program (what Ray 2.60 prints is recorded next to :data:`AT_EXIT`)."""
import os
import re
import subprocess
import textwrap
import time

import pytest

from conftest import REPO, run_code

#: A script whose last lines submit tasks. Under Ray 2.60 (run 3
#: times, output without the ``(f pid=N)`` prefixes and colours, sorted) it prints
#: :data:`AT_EXIT_SHOWN`: ``late`` prints its first line, not the one after 3 s (Ray's
#: ``shutdown(_exiting_interpreter=True)`` sleeps 0.5 s, then kills the workers); ``forever``
#: is killed and the program ends (Ray took about 6 s more to tear its processes down).
AT_EXIT = """
import time, ray
ray.init(num_cpus=4)

@ray.remote
def g():
    return 1

@ray.remote
def nap():
    time.sleep(1)

@ray.remote
def f():
    print("first")
    print("second", ray.get(g.remote()))

@ray.remote
def late():
    print("late start", flush=True)
    time.sleep(3)
    print("after 3s")

@ray.remote
def forever():
    print("forever start", flush=True)
    while True:
        time.sleep(0.05)

ray.get([nap.remote() for _ in range(4)])  # four workers are up: g, nested in f, finds one
forever.remote()
late.remote()
f.remote()
"""
AT_EXIT_SHOWN = ["first", "forever start", "late start", "second 1"]

_PREFIX = re.compile(r"^(?:\x1b\[\d+m)?\([^)]*pid=\d+\)(?:\x1b\[0m)? ")


def _shown(stdout):
    return sorted(_PREFIX.sub("", line) for line in stdout.splitlines())


def test_tasks_running_at_exit_show_their_output_and_never_hold_the_program():
    started = time.monotonic()
    result = run_code(textwrap.dedent(AT_EXIT), timeout=120)
    took = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert _shown(result.stdout) == AT_EXIT_SHOWN, result.stdout
    assert took < 60, took  # the never-ending task was killed (the machine may be loaded)


@pytest.mark.skipif(not os.environ.get("RAY_REFERENCE_PYTHON"),
                    reason="RAY_REFERENCE_PYTHON (an interpreter with real Ray) is not set")
def test_what_ray_shows_at_exit_is_the_recorded_output():
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_BACKEND", "PYTHONPATH")}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    result = subprocess.run([os.environ["RAY_REFERENCE_PYTHON"], "-c", textwrap.dedent(AT_EXIT)],
                            capture_output=True, text=True, timeout=300, cwd=str(REPO), env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert _shown(result.stdout) == AT_EXIT_SHOWN
