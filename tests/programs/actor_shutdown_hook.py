"""Differential test: an actor's ``__ray_shutdown__`` runs when the actor ends gracefully --
its handles gone out of scope, ``exit_actor()``, ``__ray_terminate__`` -- in sync, threaded and
async actors, and when it raises the actor still ends; it does not run on ``ray.kill`` nor on
``ray.shutdown()``. The hook records itself in a file the driver reads (the actor writes it, the
driver prints). Prints only from the driver (no ids, pids or timings)."""
import os
import tempfile
import time

import ray


class Recorder:
    def __init__(self, folder, tag):
        self.folder, self.tag = folder, tag

    def ping(self):
        return "pong"

    def leave(self):
        ray.actor.exit_actor()

    def __ray_shutdown__(self):
        path = os.path.join(self.folder, self.tag)
        with open(path + ".tmp", "w") as f:
            f.write(f"{type(self).__name__} shut down")
        os.replace(path + ".tmp", path)


@ray.remote
class Sync(Recorder):
    pass


@ray.remote(max_concurrency=3)
class Threaded(Recorder):
    pass


@ray.remote
class Async(Recorder):
    async def ping(self):
        return "pong"


@ray.remote
class Raising(Recorder):
    def __ray_shutdown__(self):
        super().__ray_shutdown__()
        raise ValueError("the cleanup failed")


def recorded(folder, tag, seconds):
    """What the actor's hook wrote, or None if nothing within ``seconds``."""
    path = os.path.join(folder, tag)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if os.path.exists(path):
            with open(path) as f:
                return f.read()
        time.sleep(0.05)
    return None


def main():
    ray.init(num_cpus=4)
    folder = tempfile.mkdtemp()

    kinds = {"Sync": Sync, "Threaded": Threaded, "Async": Async, "Raising": Raising}
    for kind, cls in kinds.items():
        actor = cls.remote(folder, f"scope-{kind}")
        ray.get(actor.ping.remote())
        del actor
        print("out of scope", kind, recorded(folder, f"scope-{kind}", 20))

    for kind in ("Sync", "Threaded", "Async"):
        actor = kinds[kind].remote(folder, f"exit-{kind}")
        ray.get(actor.ping.remote())
        try:
            ray.get(actor.leave.remote())
        except ray.exceptions.RayActorError as e:
            print("exit_actor call raised", type(e).__name__)
        print("exit_actor", kind, recorded(folder, f"exit-{kind}", 20))

    actor = Sync.remote(folder, "terminate")
    ray.get(actor.ping.remote())
    actor.__ray_terminate__.remote()
    print("__ray_terminate__", recorded(folder, "terminate", 20))
    try:
        ray.get(actor.ping.remote())
    except ray.exceptions.RayActorError as e:
        print("after __ray_terminate__", type(e).__name__)

    killed = Sync.remote(folder, "kill")
    ray.get(killed.ping.remote())
    ray.kill(killed)
    print("ray.kill", recorded(folder, "kill", 1.5))

    survivor = Sync.remote(folder, "shutdown")
    ray.get(survivor.ping.remote())
    ray.shutdown()
    print("ray.shutdown", recorded(folder, "shutdown", 2))


if __name__ == "__main__":
    main()
