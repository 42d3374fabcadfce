"""Differential test: sys.exit(N) in a method of an actor whose calls run side by side.

Ray answers the exiting call with ActorUnavailableError ("UnexpectedSystemExit: Worker exits
with an exit code N.") and lets the calls running beside it finish before the process ends
(a crash: the actor restarts if it may, else later calls raise ActorDiedError); threaded and
concurrency-group actors alike. A sync actor that may restart words it the same. (Ray's async
actors hang on it: not compared.) Prints only deterministic facts.
"""
import re
import sys
import time

import ray

ray.init(num_cpus=3)


def outcome(ref):
    try:
        return ray.get(ref, timeout=60)
    except ray.exceptions.RayActorError as e:
        return type(e).__name__ + ": " + re.sub(r"[0-9a-f]{32}", "<id>", str(e).splitlines()[0])


@ray.remote(max_concurrency=3)
class Threaded:
    def slow(self):
        time.sleep(2)
        return "slow done"

    def leave(self, code):
        sys.exit(code)

    def ping(self):
        return "pong"


@ray.remote(concurrency_groups={"io": 2})
class Grouped:
    @ray.method(concurrency_group="io")
    def slow(self):
        time.sleep(2)
        return "slow done"

    def leave(self, code):
        sys.exit(code)


@ray.remote(max_restarts=1)
class Sync:
    def leave(self, code):
        sys.exit(code)

    def ping(self):
        return "pong"


for tag, actor in (("threaded", Threaded.remote()), ("grouped", Grouped.remote()),
                   ("threaded, may restart", Threaded.options(max_restarts=1).remote())):
    slow = actor.slow.remote()
    time.sleep(0.5)
    print(f"{tag}: the exiting call ->", outcome(actor.leave.remote(3)))
    print(f"{tag}: the call beside it ->", outcome(slow))
    time.sleep(1)
    if tag != "grouped":
        print(f"{tag}: a later call ->", outcome(actor.ping.remote()))

s = Sync.remote()
print("sync, may restart: the exiting call ->", outcome(s.leave.remote(4)))
time.sleep(1)
print("sync, may restart: a later call ->", outcome(s.ping.remote()))
ray.shutdown()
