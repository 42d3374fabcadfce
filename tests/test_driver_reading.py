"""A synchronous ``ray.get`` of one object reads its worker's reply on the calling thread
(embedded runtime, see ``driver_reading``), and nothing a user relies on changes: Ctrl-C still
interrupts the get (and only the get: the reply is not lost, the user's SIGINT handler is back
afterwards), a future's done-callback may call ``ray.get`` and never runs on the caller, an
object sealed by another thread ends the wait at once (many threads sharing one worker's
replies: ``test_sync_gets``)."""
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

pytestmark = pytest.mark.embedded_only("the driver's read role is the embedded runtime's")


def _borrowed_frames():
    from ray_adapter import core

    return sum(w.read_role.borrowed_frames for w in core.current().pool.live_workers())


def test_a_get_reads_its_reply_on_the_calling_thread(ray):
    @ray.remote
    def echo(x):
        return x

    @ray.remote
    class Echo:
        def echo(self, x):
            return x

    actor = Echo.remote()
    ray.get([echo.remote(0), actor.echo.remote(0)])
    before = _borrowed_frames()
    for i in range(40):
        assert ray.get(echo.remote(i)) == i
        assert ray.get(actor.echo.remote(i)) == i
    # The reader thread reads a reply that arrives before the caller took the role (on a
    # loaded machine, sometimes); most replies are the caller's.
    assert _borrowed_frames() - before >= 20


def _run(program, timeout=120):
    env = dict(os.environ, RAY_BACKEND="yuanrong")
    env.pop("RAY_ADAPTER_RUNTIME", None)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(program)], env=env, timeout=timeout,
                          capture_output=True, text=True)


def test_ctrl_c_and_a_raising_alarm_interrupt_the_get_and_lose_nothing():
    out = _run("""
        import os, signal, threading, time
        import ray

        ray.init(num_cpus=1)

        @ray.remote
        def slow(x):
            time.sleep(1.0)
            return x

        ray.get(slow.remote(0))
        ref = slow.remote(1)
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
        start = time.monotonic()
        try:
            ray.get(ref)
            print("not interrupted")
        except KeyboardInterrupt:
            print("interrupted", time.monotonic() - start < 0.9)
        print("value", ray.get(ref, timeout=30))
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

        seen = []
        def mine(signum, frame):  # a handler that does not raise: the get goes on
            seen.append(signum)
        signal.signal(signal.SIGINT, mine)
        ref = slow.remote(2)
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
        print("value", ray.get(ref), seen == [signal.SIGINT], signal.getsignal(signal.SIGINT) is mine)
        print("after", ray.get([slow.remote(3)]))

        # A timer whose handler raises (a timeout decorator's way) during a get: the get
        # raises it, the reply is not lost, the worker and the actor live on.
        class Late(Exception):
            pass

        def alarm(signum, frame):
            raise Late()

        @ray.remote
        class Echo:
            def echo(self, x, delay=0.0):
                time.sleep(delay)
                return x

        actor = Echo.remote()
        ray.get(actor.echo.remote(0))
        signal.signal(signal.SIGALRM, alarm)
        late = []
        for submit in (lambda: slow.remote(4), lambda: actor.echo.remote(5, 1.0)):
            ref = submit()
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            try:
                ray.get(ref)
            except Late:
                late.append(ray.get(ref, timeout=30))
        print("alarms", late, ray.get(actor.echo.remote("alive")))
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:5] == [
        "interrupted True", "value 1", "value 2 True True", "after [3]", "alarms [4, 5] alive"], out.stdout


def test_a_future_callback_may_get_and_never_runs_on_the_caller(ray):
    @ray.remote
    class Slow:
        def value(self, x, delay=0.0):
            time.sleep(delay)
            return x

    actor = Slow.remote()
    ready = actor.value.remote("ready")
    ray.get(ready)
    seen = []
    first = actor.value.remote("first", 0.2)
    # Sealed while the main thread reads the actor's replies for ``last``: the callback runs
    # on another thread, and its own get of a sealed object returns.
    first.future().add_done_callback(
        lambda f: seen.append((f.result(), ray.get(ready, timeout=10), threading.current_thread().name)))
    assert ray.get(actor.value.remote("last", 0.2), timeout=30) == "last"
    deadline = time.monotonic() + 10
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    assert seen and seen[0][:2] == ("first", "ready")
    assert seen[0][2] != threading.current_thread().name


def test_the_role_over_a_real_socket_wakes_its_borrower_for_either_way_an_object_is_sealed():
    """The read role with the object table, over a socket pair (no runtime): a frame that
    arrives while a caller waits is read and handled by that caller, not the reader thread;
    an object sealed by another thread (no frame at all) ends the caller's wait at once; a
    frame that arrives while nobody waits is the reader thread's."""
    import socket

    from ray_adapter.core.embedded.channel import Channel, ChannelClosed
    from ray_adapter.core.embedded.driver_reading import ReadRole
    from ray_adapter.core.embedded.objects import ObjectTable

    ours, peer = socket.socketpair()
    channel, sender = Channel(ours), Channel(peer)
    role, table, handled = ReadRole(channel), ObjectTable(), []

    def receive():
        body, _ = channel.recv()
        handled.append((bytes(body), threading.current_thread().name))
        table.seal(bytes(body), b"value", False)
        return True

    def serve():
        try:
            role.serve(receive)
        except ChannelClosed:
            pass

    reader = threading.Thread(target=serve, name="reader", daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 10
        while role._receive is None and time.monotonic() < deadline:
            time.sleep(0.01)
        me = threading.current_thread().name

        table.create([b"a"], 1, producer=b"t")
        threading.Timer(0.2, sender.send, (b"a",)).start()
        assert table.wait([b"a"], 1, 10, reader=role)
        assert handled == [(b"a", me)] and role.borrowed_frames == 1

        table.create([b"b"], 1, producer=b"t")
        threading.Timer(0.2, table.seal, (b"b", b"value", False)).start()
        start = time.monotonic()
        assert table.wait([b"b"], 1, 10, reader=role)
        assert time.monotonic() - start < 2 and role.borrowed_frames == 1

        table.create([b"c"], 1, producer=b"t")
        start = time.monotonic()
        assert not table.wait([b"c"], 1, 0.3, reader=role)  # the timeout holds
        assert 0.25 < time.monotonic() - start < 2

        sender.send(b"c")
        deadline = time.monotonic() + 10
        while len(handled) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert handled[1] == (b"c", "reader")
    finally:
        sender.close()
        reader.join(10)
        channel.close()
        role.close()
    assert not reader.is_alive() and role.closed


def test_a_slow_done_callback_holds_up_none_of_the_runtimes_own_work(ray):
    @ray.remote
    def quick():
        time.sleep(0.3)
        return 1

    @ray.remote
    def slow():
        time.sleep(1.0)
        return 2

    @ray.remote
    def plus(x):
        return x + 1

    ray.get([quick.remote(), slow.remote()])  # both workers started
    first = slow.remote()
    dependent = plus.remote(first)  # submitted when ``first`` is sealed
    short = quick.remote()
    short.future().add_done_callback(lambda f: time.sleep(3))  # the user's slow callback
    assert ray.get(short, timeout=30) == 1  # read here: the callback runs elsewhere
    assert ray.get(first, timeout=30) == 2  # read here: ``dependent`` is submitted at once
    start = time.monotonic()
    assert ray.get(dependent, timeout=30) == 3
    assert time.monotonic() - start < 1.5


def test_a_get_with_timeout_zero_does_not_wait(ray):
    @ray.remote
    def slow():
        time.sleep(2)
        return 1

    ray.get(slow.remote())  # its worker is known: a waiting get would read its replies
    ref = slow.remote()
    start = time.monotonic()
    for _ in range(200):  # each would take at least a millisecond if it waited
        with pytest.raises(ray.exceptions.GetTimeoutError):
            ray.get(ref, timeout=0)
    assert time.monotonic() - start < 0.15
    assert ray.get(ref, timeout=30) == 1


_STORM = """
    import os, signal, sys, threading, time
    import ray

    ray.init(address=sys.argv[1]) if sys.argv[1:] else ray.init(num_cpus=2)

    @ray.remote
    def f(x):
        return x

    assert ray.get(f.remote(1)) == 1
    stop = time.monotonic() + 2
    n = interrupted = 0

    def storm():  # Ctrl-C every 5 ms: some land while a call is being written
        while time.monotonic() < stop:
            time.sleep(0.005)
            os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=storm, daemon=True).start()
    while time.monotonic() < stop + 0.2:
        try:
            assert ray.get(f.remote(n), timeout=10) == n
            n += 1
        except KeyboardInterrupt:
            interrupted += 1
    after = [ray.get(f.remote(i), timeout=10) for i in range(20)]
    print(interrupted > 0, n > 0, after == list(range(20)))
"""


def test_ctrl_c_while_a_call_is_written_loses_no_frame():
    """A signal whose handler raises (Ctrl-C) while a frame is being written, or between
    queueing and posting it, is delivered after the write (``threads.SignalsDeferred``): before,
    a KeyboardInterrupt there left the channel's writer role taken or a frame half sent, and
    every later call on that worker never ran (GetTimeoutError, or a hang for an attached
    driver, whose timeouts the runtime keeps)."""
    out = _run(_STORM)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["True", "True", "True"], out.stderr[-3000:]
