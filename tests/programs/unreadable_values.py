"""Differential test: a value that cannot be rebuilt where it is read (its unpickling raises).

Ray raises RaySystemError (a RayError) from ray.get of such a put value or task result, with the
unpickling's exception as its first argument; a call given such an argument, by ref or by value,
fails itself with a RayTaskError(RaySystemError) quoting it under "At least one of the input
arguments for this task could not be computed:"; an actor given one at creation dies with it.
Prints only from the driver: pids, addresses, ids, reprs and the traceback's frames (Ray's own
internals there) are left out.
"""
import re

import ray


def _boom():
    raise RuntimeError("cannot rebuild")


class Unreadable:
    def __reduce__(self):
        return _boom, ()


def masked(text):
    text = re.sub(r"pid=\d+", "pid=N", text)
    text = re.sub(r"ip=[0-9.]+", "ip=IP", text)
    text = re.sub(r"actor_id=[0-9a-f]+", "actor_id=ID", text)
    return re.sub(r"repr=[^)]*\)", "repr=R)", text)


def show(label, call):
    try:
        value = call()
    except Exception as e:  # noqa: BLE001 - what each raises is the point
        print(f"{label}: {type(e).__name__}")
        print(f"  is RayError: {isinstance(e, ray.exceptions.RayError)}, "
              f"is RaySystemError: {isinstance(e, ray.exceptions.RaySystemError)}, "
              f"first argument: {type(e.args[0]).__name__ if e.args else None}")
        lines = masked(str(e)).splitlines()
        end = next((i for i, line in enumerate(lines) if line.startswith("traceback:")), len(lines))
        for line in lines[:end + 1]:
            print(f"  | {line!r}")
        print(f"  | ... {lines[-1]!r}")
    else:
        print(f"{label}: returned {value!r}")


@ray.remote
def use(x):
    return 1


@ray.remote
def returns_unreadable():
    return Unreadable()


@ray.remote
class Holder:
    def __init__(self, x=None):
        pass

    def take(self, x):
        return 1


def main():
    ray.init(num_cpus=2)
    ref = ray.put(Unreadable())
    show("get of a put value", lambda: ray.get(ref))
    show("get of a task's result", lambda: ray.get(returns_unreadable.remote()))
    show("a task given it by ref", lambda: ray.get(use.remote(ref)))
    show("a task given it by value", lambda: ray.get(use.remote(Unreadable())))
    holder = Holder.remote()
    show("an actor call given it", lambda: ray.get(holder.take.remote(ref)))
    show("the actor still serves", lambda: ray.get(holder.take.remote(1)))
    show("an actor created with it", lambda: ray.get(Holder.remote(ref).take.remote(1)))
    print("done")


if __name__ == "__main__":
    main()
