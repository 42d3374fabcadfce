"""Differential test: core task / object API basics.

Prints only from the driver; output must be deterministic.
"""
import numpy as np

import ray


def show(label, value):
    print(f"{label}: {value!r}")


ctx = ray.init(num_cpus=2)
show("init return type", type(ctx).__name__)
show("is_initialized", ray.is_initialized())


# --- remote functions -------------------------------------------------------
@ray.remote
def add(a, b):
    return a + b


@ray.remote(num_cpus=1, num_returns=2)
def split(x):
    return x, x * 2


def plain_mul(a, b):
    return a * b


show("bare remote", ray.get(add.remote(1, 2)))
r1, r2 = split.remote(5)
show("num_returns=2 types", (type(r1).__name__, type(r2).__name__))
show("num_returns=2 values", ray.get([r1, r2]))

mul = ray.remote(plain_mul)
show("ray.remote(func) as function", ray.get(mul.remote(6, 7)))
show("ray.remote(func) type", type(mul).__name__)

add2 = add.options(num_returns=2)
show("options returns new object", add2 is not add)
show("options result has .remote", hasattr(add2, "remote"))
show("original still single return", type(add.remote(1, 1)).__name__)
two = split.options(num_returns=1).remote(3)
show("split options num_returns=1", ray.get(two))


@ray.remote
def pair():
    return "a", "b"


refs = pair.options(num_returns=2).remote()
show("options(num_returns=2) on single-return func", ray.get(list(refs)))
show("original pair", ray.get(pair.remote()))

show("options num_cpus", ray.get(add.options(num_cpus=1).remote(10, 20)))

# --- put / get --------------------------------------------------------------
for value in [None, b"", "", 0, 1.5, [1, 2, 3], (1, "two"), {"a": 1, "b": [2, 3]}, {1, 2}]:
    got = ray.get(ray.put(value))
    show(f"put/get {type(value).__name__}", (got, got == value, type(got).__name__))

arr = np.arange(12, dtype=np.float32).reshape(3, 4)
got = ray.get(ray.put(arr))
show("numpy type", type(got).__name__)
show("numpy shape", got.shape)
show("numpy dtype", str(got.dtype))
show("numpy equal", bool((got == arr).all()))
show("numpy writeable", got.flags.writeable)

obj_arr = np.array(["x", None, 3], dtype=object)
got = ray.get(ray.put(obj_arr))
show("object array", (got.tolist(), str(got.dtype)))

ref = ray.put(42)
show("ObjectRef type", type(ref).__name__)
show("isinstance ray.ObjectRef", isinstance(ref, ray.ObjectRef))
show("get list", ray.get([ray.put(1), ray.put(2), add.remote(1, 2)]))
show("get empty list", ray.get([]))


# --- refs as arguments ------------------------------------------------------
@ray.remote
def inspect_nested(items):
    kinds = [type(x).__name__ for x in items]
    values = [ray.get(x) if isinstance(x, ray.ObjectRef) else x for x in items]
    return kinds, values


@ray.remote
def inspect_top(x):
    return type(x).__name__, x


@ray.remote
def inspect_dict(d):
    return {k: type(v).__name__ for k, v in sorted(d.items())}, ray.get(d["ref"])


show("nested refs in list", ray.get(inspect_nested.remote([ray.put("a"), 2, add.remote(3, 4)])))
show("top-level ref", ray.get(inspect_top.remote(ray.put("value"))))
show("top-level task ref", ray.get(inspect_top.remote(add.remote(2, 3))))
show("nested ref in dict", ray.get(inspect_dict.remote({"ref": ray.put(9), "plain": 1})))
show("kwarg ref", ray.get(inspect_top.remote(x=ray.put([1]))))


@ray.remote
def chain(n):
    if n == 0:
        return 0
    return ray.get(chain.remote(n - 1)) + 1


show("nested task submission", ray.get(chain.remote(3)))


# --- wait -------------------------------------------------------------------
@ray.remote
def sleepy(t):
    import time
    time.sleep(t)
    return t


fast = [ray.put(i) for i in range(3)]
ready, not_ready = ray.wait(fast)
show("wait default lengths", (len(ready), len(not_ready)))
ready, not_ready = ray.wait(fast, num_returns=3)
show("wait num_returns=3 lengths", (len(ready), len(not_ready)))
show("wait preserves order", ray.get(ready))
show("wait result types", (type(ready).__name__, type(not_ready).__name__))

slow = sleepy.remote(5)
ready, not_ready = ray.wait([slow], timeout=0.1)
show("wait timeout on slow", (len(ready), len(not_ready)))
ready, not_ready = ray.wait([slow, ray.put(1)], num_returns=2, timeout=0.1)
show("wait mixed timeout", (len(ready), len(not_ready)))
ready, not_ready = ray.wait([slow, ray.put(1)], num_returns=1, timeout=2)
show("wait mixed num_returns=1", (len(ready), len(not_ready), ray.get(ready)))
ready, not_ready = ray.wait([], timeout=0)
show("wait empty", (ready, not_ready))
ray.cancel(slow, force=True)

ray.shutdown()
show("is_initialized after shutdown", ray.is_initialized())
