"""Fault-tolerant env workers (scenario S7): actors that restart after a crash, callers that
catch ActorUnavailableError and retry, max_task_retries replaying a call, and the intended exit
that never restarts. Prints only deterministic facts."""
import atexit
import os
import shutil
import sys
import tempfile

import ray

ray.init(num_cpus=2)

RETRY = (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError,
         ray.exceptions.GetTimeoutError)
marker_dir = tempfile.mkdtemp(prefix="ray_env_test_")
atexit.register(shutil.rmtree, marker_dir, True)  # leave nothing in the temp dir


def show(label, value):
    print(f"{label}: {value}")


def crash_once(name):
    """True the first time it is called for ``name`` (a file outside the actor remembers)."""
    path = os.path.join(marker_dir, name)
    if os.path.exists(path):
        return False
    open(path, "w").close()
    return True


@ray.remote(max_restarts=-1, max_task_retries=-1)
class Env:
    def __init__(self, seed):
        self.seed = seed
        self.t = 0

    def step(self, action):
        self.t += 1
        if action == "crash" and crash_once(f"env-{self.seed}"):
            sys.exit(1)  # not an intended exit: the actor restarts
        return self.seed, self.t, ray.get_runtime_context().was_current_actor_reconstructed


env = Env.remote(3)
show("step 1", ray.get(env.step.remote("noop")))
show("step 2", ray.get(env.step.remote("noop")))
# The crashing call is retried on the restarted actor (max_task_retries=-1): state is fresh.
show("crash, replayed after the restart", ray.get(env.step.remote("crash")))
show("next step", ray.get(env.step.remote("noop")))


@ray.remote(max_restarts=1)
class FragileEnv:
    def __init__(self):
        self.t = 0

    def step(self, action):
        self.t += 1
        if action == "crash":
            sys.exit(1)
        if action == "quit":
            sys.exit(0)  # intended: the actor ends for good
        return self.t


fragile = FragileEnv.remote()
show("fragile step", ray.get(fragile.step.remote("noop")))
try:
    ray.get(fragile.step.remote("crash"))
except ray.exceptions.ActorUnavailableError as e:
    show("in-flight call during the crash", type(e).__name__)
    show("is a RayActorError", isinstance(e, ray.exceptions.RayActorError))
while True:  # the S7 pattern: retry until the restarted actor answers
    try:
        show("served after the restart", ray.get(fragile.step.remote("noop")))
        break
    except RETRY:
        pass
try:
    ray.get(fragile.step.remote("quit"))
except ray.exceptions.ActorDiedError as e:
    show("sys.exit(0)", type(e).__name__)
try:
    ray.get(fragile.step.remote("noop"))
except ray.exceptions.ActorDiedError as e:
    show("after an intended exit", type(e).__name__)

ray.shutdown()
