"""Differential test: a call whose argument failed.

Ray does not hand the argument's error through unchanged: the dependent call fails itself, with
a RayTaskError naming the dependent ("ray::use()") whose text quotes the argument's error
under "At least one of the input arguments for this task could not be computed:", and that is
an instance of the original cause's class. Prints only from the driver; pids, addresses, ids,
reprs and paths are masked so the output is deterministic.
"""
import re

import ray

ray.init(num_cpus=2)


def masked(text):
    text = re.sub(r"pid=\d+", "pid=N", text)
    text = re.sub(r"ip=[0-9.]+", "ip=IP", text)
    text = re.sub(r"actor_id=[0-9a-f]+", "actor_id=ID", text)
    text = re.sub(r"repr=[^)]*\)", "repr=R)", text)
    text = re.sub(r'File "[^"]*"', 'File "F"', text)
    return text


def show(label, ref):
    try:
        value = ray.get(ref)
    except Exception as e:  # noqa: BLE001
        print(f"{label}: {type(e).__name__}")
        print(f"  is RayTaskError: {isinstance(e, ray.exceptions.RayTaskError)}")
        print(f"  is ValueError: {isinstance(e, ValueError)}")
        print(f"  cause: {type(e.cause).__name__}")
        for line in masked(str(e)).splitlines():
            print(f"  | {line!r}")
    else:
        print(f"{label}: no error, {type(value).__name__}")


class Failure(Exception):
    pass


@ray.remote
def bad():
    raise ValueError("boom")


@ray.remote
def bad_custom():
    raise Failure("custom")


@ray.remote
def use(x):
    return x


@ray.remote
def use_both(a, b):
    return a, b


@ray.remote
def use_kw(*, x):
    return x


@ray.remote
class Holder:
    def take(self, x):
        return x


show("task", use.remote(bad.remote()))
show("keyword", use_kw.remote(x=bad.remote()))
show("custom class", use.remote(bad_custom.remote()))
show("chain of two", use.remote(use.remote(bad.remote())))
show("actor method", Holder.remote().take.remote(bad.remote()))
show("nested in a list", use.remote([bad.remote()]))
show("second of two arguments", use_both.remote(ray.put(1), bad.remote()))
options = use.options(name="renamed")
show("named call", options.remote(bad.remote()))
ray.shutdown()
