"""An actor that dies before its constructor finished: Ray's ActorDiedError says it never ran
(killed, crashed or left out of scope while constructing), and the State API's death cause
says never_started; an actor that died after it ran says neither."""
import os
import time

import ray
from ray.util.state import list_actors

ray.init(num_cpus=2)


@ray.remote
class Slow:
    def __init__(self, crash=False):
        if crash:
            os._exit(1)
        time.sleep(2)

    def ping(self):
        return "pong"


def show(label, ref):
    try:
        ray.get(ref, timeout=30)
        print(label, "no error")
    except ray.exceptions.ActorDiedError as exc:
        # (ids and the crash's wording left out: how a process crash is worded is another test's)
        lines = [line for line in str(exc).splitlines()
                 if not line.startswith(("\tactor_id", "\tpid", "\tnamespace", "\tip", "\tclass_name",
                                         "The actor is dead because its worker process has died"))]
        print(label, type(exc).__name__)
        for line in lines:
            print("   ", line)


killed = Slow.options(name="killed").remote()
ref = killed.ping.remote()
time.sleep(0.5)  # its constructor runs
ray.kill(killed)
show("killed while constructing:", ref)

crashed = Slow.options(name="crashed").remote(crash=True)
show("crashed while constructing:", crashed.ping.remote())

ran = Slow.options(name="ran").remote()
print("ran:", ray.get(ran.ping.remote()))
ray.kill(ran)
show("killed after it ran:", ran.ping.remote())

time.sleep(1)
for record in sorted(list_actors(detail=True), key=lambda a: a.name):
    context = record.death_cause["actor_died_error_context"]
    print(record.name, record.state, context["reason"], "never_started:", context["never_started"])
