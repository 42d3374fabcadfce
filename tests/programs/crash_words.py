"""How Ray words a worker's death: an actor whose process vanished (os._exit, SIGKILL) while
constructing or after it ran (the connection lost), one whose code called sys.exit(3) (the exit
code), sys.exit(0) or exit_actor() (an intended exit, which only exit_actor() names), in its
constructor (not a creation failure, and not "never ran") or a method, and a task's
WorkerCrashedError (fixed words, no arguments) either way."""
import os
import signal
import sys

import ray
from ray.actor import exit_actor

ray.init(num_cpus=2)


@ray.remote
class Dies:
    def __init__(self, how=None):
        if how == "os._exit(1)":
            os._exit(1)
        if how == "SIGKILL":
            os.kill(os.getpid(), signal.SIGKILL)
        leave(how)

    def ping(self):
        return "pong"

    def leave(self, how):
        leave(how)
        os._exit(3)


def leave(how):
    if how == "sys.exit(3)":
        sys.exit(3)
    if how == "sys.exit(0)":
        sys.exit(0)
    if how == "exit_actor()":
        exit_actor()


def reason(exc):
    """The lines after the actor's identity (the part Ray's text says why in)."""
    return [line for line in str(exc).splitlines()
            if not line.startswith("\t") and not line.startswith("The actor died unexpectedly")]


for how in ("os._exit(1)", "SIGKILL", "sys.exit(3)", "sys.exit(0)", "exit_actor()"):
    actor = Dies.remote(how)
    try:
        ray.get(actor.ping.remote(), timeout=60)
    except ray.exceptions.ActorDiedError as exc:
        print("constructor", how, "->", reason(exc))

for how in ("sys.exit(3)", "sys.exit(0)", "exit_actor()", "os._exit(3)"):
    actor = Dies.remote()
    ray.get(actor.ping.remote())
    try:
        ray.get(actor.leave.remote(how), timeout=60)
    except ray.exceptions.ActorDiedError as exc:
        print("method", how, "->", reason(exc))


@ray.remote(max_retries=0)
def task(how):
    if how == "sys.exit(3)":
        sys.exit(3)
    os._exit(3)


for how in ("sys.exit(3)", "os._exit(3)"):
    try:
        ray.get(task.remote(how), timeout=60)
    except ray.exceptions.WorkerCrashedError as exc:
        print("task", how, "->", type(exc).__name__, exc.args, str(exc))
