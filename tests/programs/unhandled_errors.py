"""Errors nobody read: Ray logs "Unhandled error (suppress with 'RAY_IGNORE_UNHANDLED_ERRORS=1')"
on stderr when an object holding a task's error is freed before any get, wait or dependent
task saw it (a dropped ref, a fire-and-forget call), and nothing for an error that was read,
a cancellation, a call to a killed actor or a ref still held. The program catches its own
stderr (fd 2) and prints, per step, the last line of each report (the exception)."""
import os
import re
import sys
import tempfile
import time

import ray

# fd 2 becomes an append-only temporary file, read with pread: reading never moves the offset
# that the runtime's threads write at (a seek to the start, then a report written meanwhile,
# would overwrite the reports already there).
_capture = tempfile.TemporaryFile()
os.dup2(os.open(f"/proc/self/fd/{_capture.fileno()}", os.O_WRONLY | os.O_APPEND), 2)
_seen = 0
_PREFIX = re.compile(r"^(?:\x1b\[\d+m)?\([^)]*pid=\d+[^)]*\)(?:\x1b\[0m)? ?")


def reports():
    """The exception line of every report on stderr so far."""
    sys.stderr.flush()
    size = os.fstat(_capture.fileno()).st_size
    text = os.pread(_capture.fileno(), size, 0).decode("utf-8", "replace")
    lines = [_PREFIX.sub("", line.rstrip("\n")) for line in text.splitlines()]
    out, last = [], None  # a report: its line, then indented lines and exception lines
    for line in lines + [""]:
        exception_line = re.match(r"^[A-Za-z_][\w.]*(Error|Exception)\b", line)
        if last is not None and not (line.startswith(" ") or exception_line):
            out.append(last)  # the report ended: its last exception line is the error
            last = None
        if "Unhandled error (suppress with 'RAY_IGNORE_UNHANDLED_ERRORS=1')" in line:
            last = ""
        elif last is not None and exception_line:
            last = line
    return out


def step(label, expected):
    """Wait for ``expected`` new reports (at most 20 s; for none, 2 s), print them."""
    global _seen
    deadline = time.monotonic() + (20 if expected else 2)
    while True:
        found = reports()[_seen:]
        if len(found) >= expected and (expected or time.monotonic() > deadline) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    _seen += len(found)
    print(label, sorted(found))


@ray.remote
def fail(tag):
    raise ValueError(f"boom {tag}")


@ray.remote
def passthrough(x):
    return x


@ray.remote
def slow():
    time.sleep(5)  # cancelled at 0.5 s (yr-local cannot interrupt it: it ends by itself)


@ray.remote
def nested():
    fail.remote("nested")
    time.sleep(1)
    return "outer done"


@ray.remote
class Actor:
    def bad(self):
        raise KeyError("actor boom")

    def ok(self):
        return 1


def main():
    ray.init(num_cpus=2)
    ref = fail.remote("dropped")
    time.sleep(1.5)
    del ref
    step("dropped after it failed:", 1)

    fail.remote("fire and forget")
    step("fire and forget:", 1)

    ref = fail.remote("read")
    try:
        ray.get(ref)
    except ValueError as exc:
        print("get raised", type(exc).__name__)
    del ref
    step("read by get, then dropped:", 0)

    ref = fail.remote("waited")
    ray.wait([ref])
    del ref
    step("seen by wait, then dropped:", 0)

    actor = Actor.remote()
    actor.bad.remote()
    step("actor method, fire and forget:", 1)

    first = fail.remote("argument")
    second = passthrough.remote(first)
    time.sleep(1.5)
    del first
    step("argument of a task, dropped:", 0)
    del second
    step("the dependent task's result, dropped:", 1)

    ref = slow.remote()
    time.sleep(0.5)
    ray.cancel(ref)
    time.sleep(1)
    del ref
    step("cancelled, dropped:", 0)

    ray.get(actor.ok.remote())
    ray.kill(actor)
    time.sleep(0.5)
    actor.ok.remote()
    step("call on a killed actor:", 0)

    os.environ["RAY_IGNORE_UNHANDLED_ERRORS"] = "1"
    fail.remote("ignored")
    step("with RAY_IGNORE_UNHANDLED_ERRORS:", 0)
    del os.environ["RAY_IGNORE_UNHANDLED_ERRORS"]

    print("nested:", ray.get(nested.remote()))
    step("fire and forget inside a task:", 1)

    held = fail.remote("held")
    ray.wait([passthrough.remote(1)])
    time.sleep(1)
    step("still held:", 0)
    ray.shutdown()
    del held
    print("done")


if __name__ == "__main__":
    main()
