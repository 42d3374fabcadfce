"""Differential test: the errors of misuse an adversarial run found differing from Ray's.

Refs of a previous session (as arguments, in stored values), values that cannot be pickled for other
reasons than a TypeError, odd timeouts, option values Ray refuses, an ObjectRef of a wrong
size. Prints only from the driver, ids masked; output must be deterministic.
"""
import re
import sys

import ray

_ID = re.compile(r"[0-9a-f]{56}")


def show(label, call):
    try:
        value = call()
    except Exception as exc:  # noqa: BLE001 - the class and text are what is compared
        # Python words int()'s TypeError per version ("a real number" from 3.10 on): the same.
        text = _ID.sub("<id>", str(exc)).replace("a real number", "a number")
        print(f"{label}: {type(exc).__name__}: {text}")
    else:
        print(f"{label}: returned {type(value).__name__}")


def kind(label, call):
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - only the class is compared
        print(f"{label}: {type(exc).__name__}")
    else:
        print(f"{label}: returned")


@ray.remote
def ident(x):
    return x


def two_items():
    yield 1
    yield 2


class Plain:
    pass


@ray.remote
class Counter:
    def value(self):
        return 0


# --- refs of a previous session ----------------------------------------------
ray.init(num_cpus=1)
put_ref = ray.put(1)
task_ref = ident.remote(2)
ray.get(task_ref)
ray.shutdown()
ray.init(num_cpus=1)
# (get and wait: tests/programs/unknown_refs.py)
show("stale argument", lambda: ident.remote(put_ref))
show("stale ref in an argument", lambda: ident.remote([put_ref]))
show("stale ref in a put", lambda: ray.put({"ref": put_ref}))
show("stale task result as a keyword argument", lambda: ident.remote(x=task_ref))
show("the new session works", lambda: ray.get(ident.remote(3)))


# --- values that cannot be pickled, not for a TypeError ---------------------
deep = cur = []
for _ in range(100_000):
    cur.append([])
    cur = cur[0]
show("100,000-deep put", lambda: ray.put(deep))
show("100,000-deep argument", lambda: ident.remote(deep))


class ReduceFails:
    def __reduce__(self):
        raise ValueError("cannot reduce this")


show("__reduce__ raising ValueError, put", lambda: ray.put(ReduceFails()))
show("__reduce__ raising ValueError, argument", lambda: ident.remote(ReduceFails()))


# --- timeouts ----------------------------------------------------------------
ref = ray.put(5)
show("get timeout='x'", lambda: ray.get(ref, timeout="x"))
show("get timeout=[1]", lambda: ray.get(ref, timeout=[1]))
show("wait timeout='x'", lambda: ray.wait([ref], timeout="x"))


# --- option values Ray refuses ----------------------------------------------
show("runtime_env pip=123 in .options", lambda: ident.options(runtime_env={"pip": 123}).remote(1))
show("runtime_env pip=123 in ray.remote", lambda: ray.remote(runtime_env={"pip": 123})(lambda: 1))
show("runtime_env pip=[1] in .options", lambda: ident.options(runtime_env={"pip": [1]}).remote(1))
show("num_returns=-1 in .options", lambda: ident.options(num_returns=-1).remote(1))
show("num_returns=-1 in ray.remote", lambda: ray.remote(num_returns=-1)(lambda: 1))
show("actor name=''", lambda: Counter.options(name="").remote())
show("task name=''", lambda: ray.get(ident.options(name="").remote(4)))
show("max_calls=-1 in .options", lambda: ident.options(max_calls=-1).remote(1))
show("max_calls=-1 in ray.remote", lambda: ray.remote(max_calls=-1)(lambda: 1))
# values Ray takes (a bool is a number; any negative backpressure turns it off), types and
# values it refuses when the function or class is decorated, and an empty namespace
show("num_cpus=True", lambda: ray.get(ray.remote(num_cpus=True)(lambda: 1).remote()))
show("backpressure -5", lambda: [ray.get(r) for r in ray.remote(
    _generator_backpressure_num_objects=-5)(two_items).remote()])
show("enable_task_events='x'", lambda: ray.remote(enable_task_events="x")(lambda: 1))
show("_num_objects_per_yield=0", lambda: ray.remote(_num_objects_per_yield=0)(lambda: 1))
show("max_concurrency=-1", lambda: ray.remote(max_concurrency=-1)(Plain))
show("lifetime='forever' in ray.remote", lambda: ray.remote(lifetime="forever")(Plain))
show("namespace=''", lambda: Counter.options(namespace="").remote())
# (Ray's texts for these two are a failed comparison's: the class is what is compared)
kind("resources={'x': '1'}", lambda: ray.remote(resources={"x": "1"})(lambda: 1))
kind("num_returns='foo'", lambda: ray.remote(num_returns="foo")(lambda: 1))
# an unknown option keyword: Ray lists the valid ones in its own order
show("unknown task option", lambda: ray.remote(foo=1)(lambda: 1))
show("unknown actor option", lambda: ray.remote(foo=1)(Counter))
# ray.remote takes a Python function or a class, nothing else
show("ray.remote of a remote function", lambda: ray.remote(ident))
show("ray.remote of a builtin", lambda: ray.remote(len))


# --- an ObjectRef of a wrong size: the ValueError, nothing else ---------------
unraisable = []
sys.unraisablehook = unraisable.append
show("ObjectRef of 27 bytes", lambda: ray.ObjectRef(b"x" * 27))
show("ObjectRef of a str", lambda: ray.ObjectRef("x" * 28))
import gc  # noqa: E402

gc.collect()
print("exceptions ignored in __del__:", len(unraisable))
sys.unraisablehook = sys.__unraisablehook__

ray.shutdown()
