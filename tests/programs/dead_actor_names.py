"""Differential test: the name of a named actor that died.

Ray keeps a dead actor's name while handles to it remain (get_actor finds it, calls on it
raise ActorDiedError, a new actor cannot take the name: ActorAlreadyExistsError) after its
constructor raised or it called exit_actor(); the name is free once the handles are gone or
ray.kill is called on it, and at once for a killed or a detached actor. list_named_actors()
lists only living actors. NeMo-RL's worker groups re-create workers under the same names after
ray.kill. Prints only deterministic facts.
"""
import gc
import time

import ray

ray.init(num_cpus=2, namespace="names")


@ray.remote
class W:
    def __init__(self, fail=False):
        if fail:
            raise ValueError("init failed")

    def ping(self):
        return "pong"

    def leave(self):
        ray.actor.exit_actor()


def found(name):
    try:
        ray.get_actor(name)
        return "found"
    except ValueError:
        return "not found"


def call(handle, method):
    try:
        return ray.get(getattr(handle, method).remote(), timeout=30)
    except ray.exceptions.RayActorError as e:
        return type(e).__name__


def case(tag, make, end):
    handle = make()
    print(f"{tag}: call ->", end(handle))
    time.sleep(1)
    held = found(tag)
    del handle
    gc.collect()
    time.sleep(1)
    print(f"{tag}: while held -> {held}; once dropped -> {found(tag)}")


case("ctor-raised", lambda: W.options(name="ctor-raised").remote(True), lambda h: call(h, "ping"))
case("exit-actor", lambda: W.options(name="exit-actor").remote(), lambda h: call(h, "leave"))
case("killed", lambda: W.options(name="killed").remote(),
     lambda h: (call(h, "ping"), ray.kill(h))[0])
case("detached", lambda: W.options(name="detached", lifetime="detached").remote(True),
     lambda h: call(h, "ping"))

dead = W.options(name="dead-one").remote(True)
print("dead-one:", call(dead, "ping"))
print("listed:", ray.util.list_named_actors())
print("via get_actor:", call(ray.get_actor("dead-one"), "ping"))
try:
    W.options(name="dead-one").remote()
except ValueError as e:
    print("taken:", type(e).__name__)
print("get_if_exists:", call(W.options(name="dead-one", get_if_exists=True).remote(), "ping"))
ray.kill(dead)
time.sleep(1)
print("after ray.kill:", found("dead-one"), call(W.options(name="dead-one").remote(), "ping"))
ray.shutdown()
