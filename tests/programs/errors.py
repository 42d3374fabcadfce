"""Differential test: error semantics.

Prints only from the driver; output must be deterministic.
"""
import os
import time

import ray


def show(label, value):
    print(f"{label}: {value!r}")


ray.init(num_cpus=2)


# --- task raising a builtin exception ---------------------------------------
@ray.remote
def boom_value():
    raise ValueError("original message 123")


try:
    ray.get(boom_value.remote())
except Exception as e:
    show("ValueError isinstance RayTaskError", isinstance(e, ray.exceptions.RayTaskError))
    show("ValueError isinstance ValueError", isinstance(e, ValueError))
    show("ValueError isinstance RayError", isinstance(e, ray.exceptions.RayError))
    show("ValueError type name", type(e).__name__)
    show("ValueError cause type", type(e.cause).__name__)
    show("ValueError cause args", e.cause.args)
    show("ValueError str has message", "original message 123" in str(e))
    show("ValueError str has function name", "boom_value" in str(e))
    show("ValueError args types", [type(a).__name__ for a in e.args])
    show("ValueError as_instanceof_cause type", type(e.as_instanceof_cause()).__name__)


# error propagates through a dependent task
@ray.remote
def consume(x):
    return x


try:
    ray.get(consume.remote(boom_value.remote()))
except Exception as e:
    show("propagated type", type(e).__name__)
    show("propagated isinstance ValueError", isinstance(e, ValueError))


# --- custom exception with attributes ---------------------------------------
class MyError(Exception):
    def __init__(self, code, detail):
        super().__init__(code, detail)
        self.code = code
        self.detail = detail


@ray.remote
def boom_custom():
    raise MyError(418, "teapot")


try:
    ray.get(boom_custom.remote())
except MyError as e:
    show("custom caught as MyError", True)
    show("custom type name", type(e).__name__)
    show("custom code", e.code)
    show("custom detail", e.detail)
    show("custom isinstance RayTaskError", isinstance(e, ray.exceptions.RayTaskError))
    show("custom cause type", type(e.cause).__name__)
    show("custom cause code", e.cause.code)


# exception raised by ray.get inside a task is re-wrapped
@ray.remote
def outer():
    return ray.get(boom_value.remote())


try:
    ray.get(outer.remote())
except Exception as e:
    show("nested type", type(e).__name__)
    show("nested isinstance ValueError", isinstance(e, ValueError))
    show("nested str has both names", "outer" in str(e) and "boom_value" in str(e))


# --- timeouts ---------------------------------------------------------------
@ray.remote
def slow(t=10):
    time.sleep(t)
    return "done"


slow_ref = slow.remote()
try:
    ray.get(slow_ref, timeout=0.1)
except Exception as e:
    show("get timeout type", type(e).__name__)
    show("get timeout isinstance TimeoutError", isinstance(e, TimeoutError))
    show("get timeout isinstance RayError", isinstance(e, ray.exceptions.RayError))
    show("get timeout isinstance GetTimeoutError", isinstance(e, ray.exceptions.GetTimeoutError))
try:
    ray.get([ray.put(1), slow_ref], timeout=0.1)
except Exception as e:
    show("get list timeout type", type(e).__name__)
ray.cancel(slow_ref, force=True)

# --- wait argument errors ---------------------------------------------------
r = ray.put(1)
try:
    ray.wait(r)
except Exception as e:
    show("wait(single ref)", type(e).__name__)
try:
    ray.wait([r, r])
except Exception as e:
    show("wait duplicate refs", type(e).__name__)
try:
    ray.wait([r], num_returns=2)
except Exception as e:
    show("wait num_returns > len", type(e).__name__)
try:
    ray.wait([1, 2])
except Exception as e:
    show("wait non-refs", type(e).__name__)

# --- get / put misuse -------------------------------------------------------
try:
    ray.get(123)
except Exception as e:
    show("get(non-ref)", type(e).__name__)
try:
    ray.get([r, 123])
except Exception as e:
    show("get([ref, non-ref])", type(e).__name__)
try:
    ray.put(r)
except Exception as e:
    show("put(ref)", type(e).__name__)


# --- direct calls -----------------------------------------------------------
def undecorated():
    return 1


try:
    undecorated.remote()
except AttributeError as e:
    show("undecorated .remote", str(e))

try:
    boom_value()
except Exception as e:
    show("calling remote function directly", type(e).__name__)


@ray.remote
class Act:
    def ping(self):
        return "pong"


try:
    Act()
except Exception as e:
    show("instantiating actor class directly", type(e).__name__)
try:
    a = Act.remote()
    a.ping()
except Exception as e:
    show("calling actor method directly", type(e).__name__)
try:
    a.no_such_method.remote()
except Exception as e:
    show("missing actor method", type(e).__name__)


# --- worker crash -----------------------------------------------------------
@ray.remote(max_retries=0)
def crash():
    os._exit(1)


try:
    ray.get(crash.remote())
except Exception as e:
    show("worker crash type", type(e).__name__)
    show("worker crash isinstance RayError", isinstance(e, ray.exceptions.RayError))
    show("worker crash isinstance WorkerCrashedError",
         isinstance(e, ray.exceptions.WorkerCrashedError))


@ray.remote(max_restarts=0)
class Crasher:
    def die(self):
        os._exit(1)

    def ping(self):
        return "pong"


cr = Crasher.remote()
show("crasher ping", ray.get(cr.ping.remote()))
try:
    ray.get(cr.die.remote())
except Exception as e:
    show("actor crash type", type(e).__name__)
    show("actor crash isinstance RayActorError", isinstance(e, ray.exceptions.RayActorError))
try:
    ray.get(cr.ping.remote())
except Exception as e:
    show("call after actor crash type", type(e).__name__)


# --- cancellation -----------------------------------------------------------
# Tasks signal "started" by creating a marker file, so the driver knows the
# task is running without relying on sleeps.
import atexit
import shutil
import tempfile

marker_dir = tempfile.mkdtemp(prefix="ray_cancel_test_")
atexit.register(shutil.rmtree, marker_dir, True)  # leave nothing in the temp dir


def wait_for_marker(name, limit=10.0):
    path = os.path.join(marker_dir, name)
    deadline = time.time() + limit
    while not os.path.exists(path) and time.time() < deadline:
        time.sleep(0.05)
    return os.path.exists(path)


def nap(t):
    # Sleep in small steps: a non-force cancel is only delivered between
    # Python bytecodes, so one long time.sleep() would delay it until the end.
    end = time.time() + t
    while time.time() < end:
        time.sleep(0.05)


@ray.remote(num_cpus=2)
def hog(marker_dir, t):
    open(os.path.join(marker_dir, "hog"), "w").close()
    nap(t)
    return "hog done"


@ray.remote
def marked_sleep(marker_dir, name, t):
    open(os.path.join(marker_dir, name), "w").close()
    nap(t)
    return "slept"


@ray.remote
def blocked():
    return "should not run"


hogger = hog.remote(marker_dir, 30)
show("hog started", wait_for_marker("hog"))
pending = blocked.remote()  # cannot be scheduled while hog holds both CPUs
ray.cancel(pending)
try:
    ray.get(pending, timeout=10)
    show("cancel pending", "no error")
except Exception as e:
    show("cancel pending type", type(e).__name__)
    show("cancel pending isinstance TaskCancelledError",
         isinstance(e, ray.exceptions.TaskCancelledError))
ray.cancel(hogger)  # running, non-force: interrupts the task
try:
    ray.get(hogger, timeout=10)
    show("cancel running", "no error")
except Exception as e:
    show("cancel running type", type(e).__name__)
    show("cancel running isinstance TaskCancelledError",
         isinstance(e, ray.exceptions.TaskCancelledError))

running = marked_sleep.remote(marker_dir, "forced", 30)
show("forced started", wait_for_marker("forced"))
ray.cancel(running, force=True)  # running, force: kills the worker
try:
    ray.get(running, timeout=10)
    show("force cancel", "no error")
except Exception as e:
    show("force cancel type", type(e).__name__)
    show("force cancel isinstance TaskCancelledError",
         isinstance(e, ray.exceptions.TaskCancelledError))

try:
    ray.cancel(ray.put(1))
    show("cancel finished object", "no error")
except Exception as e:
    show("cancel finished object", type(e).__name__)

# --- an actor's death, as Ray words it --------------------------------------
def death_text(err):
    """The ActorDiedError text, its actor id, pid, namespace and ip lines kept without values."""
    lines = []
    for line in str(err).splitlines():
        key, sep, _ = line.strip().partition(": ")
        lines.append(f"\t{key}: <{key}>" if sep and key in ("actor_id", "pid", "namespace", "ip") else line)
    return lines


@ray.remote
class Leaver:
    def leave(self, code):
        import sys

        sys.exit(code)

    def ready(self):
        return True


leaver = Leaver.options(name="leaver").remote()
ray.get(leaver.ready.remote())
try:
    ray.get(leaver.leave.remote(3))
except ray.exceptions.ActorDiedError as e:
    show("actor sys.exit(3) death", death_text(e))
killed = Leaver.remote()
ray.get(killed.ready.remote())
ray.kill(killed)
death = None
for _ in range(100):  # ray.kill is asynchronous in Ray: a call right after it may still run
    try:
        ray.get(killed.ready.remote())
        time.sleep(0.1)
    except ray.exceptions.ActorDiedError as e:
        death = e
        break
show("killed actor death", death_text(death))

ray.shutdown()

# --- auto-init --------------------------------------------------------------
show("initialized after shutdown", ray.is_initialized())


@ray.remote
def after():
    return "auto"


ref = after.remote()
show("initialized after .remote()", ray.is_initialized())
show("auto-init result", ray.get(ref))
ray.shutdown()
