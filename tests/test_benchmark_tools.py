"""The profiling tools in ``benchmarks/`` still run against the runtime they wrap (they reach
into its internals): a smoke run, no timings asserted (those are the tools' output)."""
import json

from conftest import REPO, run_python


def test_task_timeline_stamps_every_segment_of_a_round_trip():
    out = run_python([str(REPO / "benchmarks" / "task_timeline.py"), "--calls", "60"], timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["floor_pipe_rt"] > 0 and result["floor_pipe_rt_idle_200us"] > 0
    for kind in ("task", "actor"):
        segments = dict(result[kind])
        bounds = segments.pop("bounds")
        # A seam renamed or moved in the runtime shows up here as a seam stamped in no cycle.
        assert not segments.pop("unstamped"), (kind, result[kind], out.stderr[-2000:])
        found = {name: value for name, value in segments.items() if value is not None}
        # A segment is None only when its seams came out of order in every cycle (the woken
        # side ran before its waker's stamp, on a loaded machine): most are always found.
        assert len(found) >= len(segments) - 2, (kind, segments)
        # Each segment lies inside its own cycle, so its median cannot exceed the median total
        # of the cycles it was found in (pointwise x_i <= y_i orders every order statistic);
        # the median of all cycles is no bound (a segment found only in slow cycles exceeds
        # it: seen under load), nor is a sum of medians.
        found.pop("total_with_stamps")
        over = {name: (value, bounds[name]) for name, value in found.items()
                if not 0 <= value <= bounds[name]}
        assert not over, over
