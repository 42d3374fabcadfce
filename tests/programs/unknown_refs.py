"""Refs to objects the runtime does not hold: rebuilt from the hex of a freed object (from a
task, from ray.put), a made-up id, and a ref made before ray.shutdown() used in the next
session; ray.wait (with and without timeout, fetch_local), ray.get with a timeout, future()."""
import concurrent.futures
import gc
import re
import time

import ray


def show(label, fn):
    try:
        out = fn()
    except (Exception, concurrent.futures.TimeoutError) as e:
        text = re.sub(r"[0-9a-f]{56}", "ID", str(e))
        print(f"{label}: {type(e).__name__}: {text}")
        return
    if isinstance(out, tuple):
        print(f"{label}: {len(out[0])} ready, {len(out[1])} not ready")
    else:
        print(f"{label}: {out!r}")


@ray.remote
def f():
    return 1


@ray.remote
def slow():
    time.sleep(2)
    return 2


def probe(kind, ref):
    show(f"{kind}: wait timeout=0", lambda: ray.wait([ref], timeout=0))
    show(f"{kind}: wait timeout=0.2", lambda: ray.wait([ref], timeout=0.2))
    show(f"{kind}: wait timeout=0.2 fetch_local=False", lambda: ray.wait([ref], timeout=0.2, fetch_local=False))
    s = slow.remote()
    show(f"{kind}: wait with a pending ref, no timeout", lambda: ray.wait([ref, s], num_returns=1))
    show(f"{kind}: wait for both, timeout=0.2", lambda: ray.wait([s, ref], num_returns=2, timeout=0.2))
    show(f"{kind}: get timeout=0.2", lambda: ray.get(ref, timeout=0.2))
    show(f"{kind}: get timeout=0", lambda: ray.get(ref, timeout=0))
    show(f"{kind}: get a list, timeout=0.2", lambda: ray.get([s, ref], timeout=0.2))
    show(f"{kind}: future", lambda: ref.future().result(timeout=0.2))


ray.init(num_cpus=2)
r = f.remote()
ray.get(r)
h = r.hex()
del r
gc.collect()
time.sleep(0.5)
probe("task result freed", ray.ObjectRef(bytes.fromhex(h)))
p = ray.put(5)
h = p.hex()
del p
gc.collect()
time.sleep(0.5)
probe("put freed", ray.ObjectRef(bytes.fromhex(h)))
probe("made-up id", ray.ObjectRef(bytes(range(28))))
live = ray.put(7)
probe("live, rebuilt from hex", ray.ObjectRef(bytes.fromhex(live.hex())))

old = ray.put(3)
ray.shutdown()
ray.init(num_cpus=2)
live = ray.put(1)
show("earlier session: wait", lambda: ray.wait([old], timeout=0))
show("earlier session: wait, no timeout", lambda: ray.wait([old]))
show("earlier session: wait with a ready ref", lambda: ray.wait([live, old], num_returns=1))
show("earlier session: get", lambda: ray.get(old, timeout=0.2))
show("earlier session: get a list", lambda: ray.get([live, old]))
show("earlier session: future", lambda: old.future().result(timeout=0.2))
ray.shutdown()
print("done")
