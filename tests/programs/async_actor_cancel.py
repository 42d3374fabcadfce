"""Differential test: what ray.cancel makes of an async actor's calls.

Ray hands an async actor's call to the actor's event loop as soon as the actor is built and
the call's concurrency group has a slot; cancelling it from then on raises the call's
CancelledError inside it: RayTaskError(TaskCancelledError), whether its coroutine had begun or
still waited for the loop (a sync method blocking it). A call still waiting for a slot never
reached the loop: a plain TaskCancelledError in the actor's words. NeMo-RL's vLLM workers
cancel their async generation calls this way. Prints only deterministic facts.
"""
import asyncio
import re
import time

import ray

ray.init(num_cpus=2)


def outcome(ref):
    try:
        return ray.get(ref, timeout=30)
    except ray.exceptions.TaskCancelledError as e:
        last = re.sub(r"[0-9a-f]{32,}", "<id>", str(e).strip().splitlines()[-1])
        return type(e).__name__, isinstance(e, ray.exceptions.RayTaskError), last


@ray.remote
class Mixed:
    def blocking(self, seconds):
        time.sleep(seconds)  # a sync method of an async actor runs on (and blocks) its loop
        return "blocking done"

    async def sleepy(self, seconds):
        await asyncio.sleep(seconds)
        return "sleepy done"


a = Mixed.remote()
print("ready:", ray.get(a.sleepy.remote(0)))

running = a.sleepy.remote(30)
time.sleep(1)
ray.cancel(running)
print("running coroutine:", outcome(running))

blocking = a.blocking.remote(4)
time.sleep(1)
behind = a.sleepy.remote(30)  # handed to the loop, which the sync method holds
time.sleep(1)
ray.cancel(behind)
print("coroutine behind a blocked loop:", outcome(behind))
print("the blocking call itself:", outcome(blocking))

one = Mixed.options(max_concurrency=1).remote()
ray.get(one.sleepy.remote(0))
holder, waiting = one.sleepy.remote(3), one.sleepy.remote(3)
time.sleep(1)
ray.cancel(waiting)  # waits for the one slot
print("waiting for a slot:", outcome(waiting))
print("the slot's holder:", outcome(holder))
ray.shutdown()
