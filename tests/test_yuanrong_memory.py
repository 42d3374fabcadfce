"""What a finished call leaves behind on yr's local mode. yr's local store keeps every call's
future (and what hangs off it) for the whole session, so whatever the adapter attaches to yr's
futures is kept with it: per call the adapter may keep little more than yr itself keeps."""
import gc

import pytest

yr = pytest.importorskip("yr", reason="the openYuanrong SDK is not installed (pip install 'ray-adapter[yuanrong]')")


def _kept_per_call(call, n=500):
    for _ in range(50):
        call()
    gc.collect()
    before = len(gc.get_objects())
    for _ in range(n):
        call()
    gc.collect()
    return (len(gc.get_objects()) - before) / n


def test_a_finished_actor_call_keeps_little_more_than_yr_keeps(monkeypatch):
    import ray_adapter.ray as ray

    monkeypatch.setenv("RAY_ADAPTER_RUNTIME", "yr-local")
    if ray.is_initialized():
        ray.shutdown()
    yr.init(yr.Config(local_mode=True))
    try:
        ray.init(num_cpus=2)  # attaches to the yr session above

        @yr.instance
        class YrCounter:
            def __init__(self):
                self.n = 0

            def inc(self):
                self.n += 1
                return self.n

        @ray.remote
        class Counter:
            def __init__(self):
                self.n = 0

            def inc(self):
                self.n += 1
                return self.n

        raw, ours = YrCounter.invoke(), Counter.remote()
        by_yr = _kept_per_call(lambda: yr.get(raw.inc.invoke()))
        by_adapter = _kept_per_call(lambda: ray.get(ours.inc.remote()))
        # 62 objects a call before (four futures: one per thing done at the call's end, each
        # with its ref and callbacks); about 16 more than yr's own now: one watcher per call.
        assert by_adapter <= by_yr + 20, f"adapter keeps {by_adapter:.0f} objects a call, yr {by_yr:.0f}"
    finally:
        ray.shutdown()
        yr.finalize()
