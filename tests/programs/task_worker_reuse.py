"""Which tasks get a fresh worker: a function declared with GPUs gets one per task (Ray's
default ``max_calls=1`` for them, unless the function sets ``max_calls``; ``.options(num_gpus=)``
keeps the function's own), and an actor created by a task whose worker then exits for
``max_calls`` lives on, as do the tasks it submitted (Ray keeps the worker that owns them until
they are done or out of scope)."""
import inspect
import os
import time

import ray

ray.init(num_cpus=2, num_gpus=1)


@ray.remote(num_gpus=0.5)
def gpu_pid():
    return os.getpid()


@ray.remote(num_gpus=0.5, max_calls=0)
def gpu_pid_reusable():
    return os.getpid()


@ray.remote
def cpu_pid():
    return os.getpid()


def distinct(fn, n=3):
    return len({ray.get(fn.remote()) for _ in range(n)})


print("num_gpus=0.5: distinct workers for 3 tasks:", distinct(gpu_pid))
print("num_gpus=0.5, max_calls=0: distinct workers:", distinct(gpu_pid_reusable))
print("a CPU function given num_gpus by .options() reuses its worker:",
      distinct(cpu_pid.options(num_gpus=0.5)) < 3)


@ray.remote
class Counter:
    def __init__(self):
        self.n = 0

    def incr(self):
        self.n += 1
        return self.n


@ray.remote(max_calls=1)
def make_counter():
    counter = Counter.remote()
    ray.get(counter.incr.remote())
    return [counter]  # a handle, in a list: the actor outlives the call that made it


@ray.remote(num_gpus=0.5)
def make_counter_on_gpu():
    counter = Counter.remote()
    return [counter]


for label, maker in (("max_calls=1", make_counter), ("num_gpus=0.5", make_counter_on_gpu)):
    [counter] = ray.get(maker.remote())
    time.sleep(1)  # the maker's worker has exited by now here (max_calls); Ray keeps it
    print("an actor made by a task with", label, "->",
          [ray.get(counter.incr.remote(), timeout=30) for _ in range(2)])
print("a remote function has no __name__, as in Ray:", not hasattr(gpu_pid, "__name__"))


@ray.remote
def documented(a, b=2):
    """Adds b."""
    return a + b


print("its .remote wears the function's name, doc and signature:", documented.remote.__name__,
      documented.remote.__doc__, inspect.signature(documented.remote))


@ray.remote
def inner(x):
    time.sleep(1)
    return x * 2


@ray.remote(num_gpus=0.5)
def gpu_outer():
    return [inner.remote(21)]  # still running when this task's worker exits (max_calls)


[inner_ref] = ray.get(gpu_outer.remote())
print("a task a GPU task submitted runs on after its worker exits:", ray.get(inner_ref, timeout=30))
