"""Where a task's microseconds go on the embedded runtime, next to this machine's floors.

Prints one JSON object (microseconds, medians):

- ``floor_pipe_rt``: a 60-byte ping-pong between two processes over a socket pair, the least a
  round trip to a worker can cost here; ``floor_pipe_rt_2_hops``: the same with a reader
  thread handing each message to another thread on both sides (our driver and workers each do
  one such hand-off);
- the Python work on the path, measured in a loop: ``dumps_args`` (the arguments of a task
  without any), ``encode_run_task`` / ``decode_run_task`` (the wire message),
  ``seal_and_wake`` (an object sealed, its waiter woken), ``submit_path`` (``f.remote()`` up to
  the message queued, in the driver);
- ``task_rt`` / ``actor_rt``: the real round trips, and ``unexplained_task``: what the round
  trip costs beyond the floor with hops and the pieces above (interpreter overhead of the
  rest, lock and GIL hand-offs, scheduling).

    python benchmarks/task_profile.py
"""
import json
import os
import socket
import statistics
import threading
import time

os.environ.setdefault("RAY_BACKEND", "yuanrong")
import ray_adapter.auto  # noqa: E402,F401 - the adapter's ray in this process


def per_op_us(fn, n=2000, rounds=5):
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - start) / n * 1e6)
    return round(statistics.median(samples), 2)


def pipe_rt(hops, n=3000):
    """Round trip of a 60-byte message to a child process and back (``hops``: through a
    reader thread and a queue on both sides, as the runtime's driver and workers do)."""
    import queue

    a, b = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        a.close()
        inbox = queue.SimpleQueue()
        if hops:
            threading.Thread(target=lambda: [inbox.put(b.recv(65536)) for _ in range(n)],
                             daemon=True).start()
        for _ in range(n):
            b.send(inbox.get() if hops else b.recv(65536))
        os._exit(0)
    b.close()
    inbox = queue.SimpleQueue()
    if hops:
        threading.Thread(target=lambda: [inbox.put(a.recv(65536)) for _ in range(n)],
                         daemon=True).start()
    msg = b"x" * 60
    start = time.perf_counter()
    for _ in range(n):
        a.send(msg)
        inbox.get() if hops else a.recv(65536)
    elapsed = (time.perf_counter() - start) / n * 1e6
    os.waitpid(pid, 0)
    a.close()
    return round(elapsed, 1)


def main():
    import ray
    from ray_adapter.core import serialization
    from ray_adapter.core.embedded import protocol
    from ray_adapter.core.embedded.objects import ObjectTable
    from ray_adapter.core.embedded.protocol import to_payload

    out = {"floor_pipe_rt": pipe_rt(False), "floor_pipe_rt_2_hops": pipe_rt(True)}
    out["dumps_args"] = per_op_us(lambda: serialization.dumps(((), {})))
    message = protocol.RunTask(task_id=b"t" * 24, key=b"k" * 16,
                               args=to_payload(serialization.dumps(((), {})), []), deps=[],
                               num_returns=1, name="noop", env={}, resources={"CPU": 1.0},
                               gpu_ids=[])
    body = protocol.encode(message)
    out["encode_run_task"] = per_op_us(lambda: protocol.encode(message))
    out["decode_run_task"] = per_op_us(lambda: protocol.worker_decoder.decode(body))
    table = ObjectTable()
    ser = serialization.dumps(None)
    counter = iter(range(10 ** 9))

    def seal_and_wake():
        oid = next(counter).to_bytes(28, "little")
        table.create([oid], 0, b"")
        signal = threading.Lock()
        signal.acquire()
        table.when_ready([oid], lambda ok: signal.release())
        table.seal(oid, ser, False)
        signal.acquire()

    out["seal_and_wake"] = per_op_us(seal_and_wake)

    ray.init(num_cpus=2)

    @ray.remote
    def noop():
        return None

    @ray.remote
    class Actor:
        def noop(self):
            return None

    actor = Actor.remote()
    ray.get([noop.remote() for _ in range(50)] + [actor.noop.remote() for _ in range(50)])
    out["task_rt"] = per_op_us(lambda: ray.get(noop.remote()), n=300)
    out["actor_rt"] = per_op_us(lambda: ray.get(actor.noop.remote()), n=300)
    out["submit_path"] = per_op_us(lambda: noop.remote(), n=300, rounds=3)
    ray.get(noop.remote())
    ray.shutdown()
    known = (out["floor_pipe_rt_2_hops"] + out["dumps_args"] + out["encode_run_task"]
             + out["decode_run_task"] + out["seal_and_wake"])
    out["unexplained_task"] = round(out["task_rt"] - known, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
