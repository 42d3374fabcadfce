"""ray.experimental.tqdm_ray: bars made in a task, an actor (iterable form, set_description,
safe_print) and the driver are drawn by the driver on its stderr, as Ray 2.60 draws them
(measured: the same program under Ray prints the same bar texts, prefixed ``(pid=N)`` in
dim cyan, and nothing of the bars on stdout); without tqdm the driver warns once."""
import re
import textwrap

import pytest

from conftest import run_code

pytest.importorskip("tqdm")

PROGRAM = """
import time, ray
from ray.experimental import tqdm_ray
ray.init(num_cpus=2)

@ray.remote
def work(n):
    bar = tqdm_ray.tqdm(total=n, desc="work", position=0)
    for _ in range(n):
        time.sleep(0.05)
        bar.update(1)
    bar.close()
    return n

@ray.remote
class Loader:
    def load(self):
        for _ in tqdm_ray.tqdm(range(4), desc="load"):
            time.sleep(0.05)
        bar = tqdm_ray.tqdm(total=2, desc="phase one")
        bar.set_description("phase two")
        bar.update(2)
        bar.close()
        tqdm_ray.safe_print("loaded")
        return 4

print(ray.get(work.remote(5)))
print(ray.get(Loader.remote().load.remote()))
bar = tqdm_ray.tqdm(total=3, desc="driver")
bar.update(3)
bar.close()
print("done")
"""
_PREFIX = re.compile(r"^(?:\x1b\[36m)?\(\w+ pid=\d+\)(?:\x1b\[0m)? ")  # Ray colours it
_BAR_PREFIX = "\x1b[2m\x1b[36m(pid={pid}) \x1b[0m"


def _stdout_lines(stdout):
    return [_PREFIX.sub("", line) for line in stdout.splitlines()]


@pytest.mark.parametrize("runtime", ["embedded", "yr-local"])
def test_bars_of_tasks_actors_and_the_driver_are_drawn_by_the_driver(runtime):
    if runtime == "yr-local":
        pytest.importorskip("yr")
    result = run_code(textwrap.dedent(PROGRAM), env={"RAY_ADAPTER_RUNTIME": runtime}, timeout=120)
    assert result.returncode == 0, result.stderr
    assert _stdout_lines(result.stdout) == ["5", "loaded", "4", "done"]  # no bar state on stdout
    drawn = result.stderr.replace("\r", "\n")
    pid = re.search(r"\(\w+ pid=(\d+)\)(?:\x1b\[0m)? loaded", result.stdout)
    # Ray prefixes a remote bar with its process (none in yr's local mode: tasks are threads
    # of the driver).
    prefix = _BAR_PREFIX.format(pid=pid.group(1)) if runtime == "embedded" else ""
    # The task's bar carries its own process (never the actor's: as in Ray, an actor does not
    # start in a process that ran tasks).
    task_prefix = re.escape(_BAR_PREFIX).replace(r"\{pid\}", r"\d+") if runtime == "embedded" else ""
    assert re.search(task_prefix + r"work: 100%\|█+\| 5\.00/5\.00 ", drawn), drawn
    assert re.search(re.escape(prefix) + r"phase two: 100%\|█+\| 2\.00/2\.00 ", drawn), drawn
    assert re.search(re.escape(prefix) + r"load:  25%\|", drawn), drawn  # never closed, as in Ray
    assert re.search(r"\ndriver: 100%\|█+\| 3\.00/3\.00 ", drawn), drawn
    assert "__ray_tqdm_magic_token__" not in result.stdout + result.stderr


def test_without_tqdm_the_driver_warns_once_and_draws_nothing():
    program = "import sys\nsys.modules['tqdm'] = sys.modules['tqdm.auto'] = None\n" + textwrap.dedent(PROGRAM)
    result = run_code(program, timeout=120)
    assert result.returncode == 0, result.stderr
    assert _stdout_lines(result.stdout) == ["5", "loaded", "4", "done"]
    assert result.stderr.count("tqdm is not installed. Progress bars will be disabled.") == 1
    assert "work:" not in result.stderr  # no bar drawn
