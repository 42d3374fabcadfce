"""Differential test: exit_actor() in a concurrent actor (threaded, async, a sync method of an
async actor). The calls already running beside the exiting one run to their end and return their
values; the exiting call raises ActorDiedError; the actor is not restarted: a later call raises
ActorDiedError too. Prints only from the driver (no ids, pids or timings). (With two calls
running beside it, Ray 2.60 reports the exiting call of a threaded or async actor as
ActorUnavailableError, both RayActorErrors; the adapter says ActorDiedError.)
"""
import asyncio
import time

import ray


def outcome(ref):
    try:
        return ray.get(ref, timeout=60)
    except ray.exceptions.RayActorError as e:
        return type(e).__name__


@ray.remote(max_concurrency=4)
class Threaded:
    def slow(self, seconds):
        time.sleep(seconds)
        return f"slept {seconds}"

    def leave(self):
        ray.actor.exit_actor()

    def ping(self):
        return "pong"


@ray.remote
class Async:
    async def slow(self, seconds):
        await asyncio.sleep(seconds)
        return f"awaited {seconds}"

    async def leave(self):
        ray.actor.exit_actor()

    async def ping(self):
        return "pong"


@ray.remote(max_concurrency=4, concurrency_groups={"io": 2})
class Groups:
    @ray.method(concurrency_group="io")
    def slow(self, seconds):
        time.sleep(seconds)
        return f"io slept {seconds}"

    def leave(self):
        ray.actor.exit_actor()

    def ping(self):
        return "pong"


def exit_beside_running_calls(label, actor):
    print(f"== {label}")
    print("ready:", ray.get(actor.ping.remote(), timeout=60))
    running = [actor.slow.remote(1.5)]
    time.sleep(0.5)  # it has started
    leaving = actor.leave.remote()
    print("exiting call:", outcome(leaving))
    print("running call:", [outcome(r) for r in running])
    print("a later call:", outcome(actor.ping.remote()))


def main():
    ray.init(num_cpus=4)
    exit_beside_running_calls("threaded actor", Threaded.remote())
    exit_beside_running_calls("async actor", Async.remote())
    exit_beside_running_calls("threaded actor with a concurrency group",
                              Groups.remote())
    ray.shutdown()


if __name__ == "__main__":
    main()
