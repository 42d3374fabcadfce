"""``core.locks.OwnedRLock``: a re-entrant lock that tells its holder it holds it."""
import subprocess
import sys
import threading

import pytest

from ray_adapter.core.locks import OwnedRLock


def test_only_the_holder_is_told_it_holds_the_lock_at_every_depth():
    lock = OwnedRLock()
    assert not lock.held_by_me()
    seen_elsewhere = []
    with lock:
        with lock:  # re-entrant
            assert lock.held_by_me()
        assert lock.held_by_me()  # still held once
        other = threading.Thread(target=lambda: seen_elsewhere.append(
            (lock.held_by_me(), lock.acquire(False))))
        other.start()
        other.join()
    assert seen_elsewhere == [(False, False)]  # another thread neither holds nor gets it
    assert not lock.held_by_me()
    assert lock.acquire(timeout=1) and lock.held_by_me()
    lock.release()
    assert not lock.held_by_me()


_STORM = r'''
import signal, sys, threading, time
from ray_adapter.core.locks import OwnedRLock

class Tick(Exception):
    pass

armed = [False]

def handler(signum, frame):
    if armed[0]:  # only inside the loop's try below
        armed[0] = False
        raise Tick()

lock = OwnedRLock()
signal.signal(signal.SIGALRM, handler)
signal.setitimer(signal.ITIMER_REAL, 0.00002, 0.00002)  # an alarm every 20 us
ticks, stuck = 0, False
deadline = time.monotonic() + 2.0
while time.monotonic() < deadline and not stuck:
    try:
        armed[0] = True
        with lock:
            pass
        armed[0] = False
    except Tick:
        ticks += 1
    stuck = lock.held_by_me()  # the with is over: nobody may hold it
signal.setitimer(signal.ITIMER_REAL, 0, 0)
got = []
other = threading.Thread(target=lambda: got.append(lock.acquire(timeout=1)))
other.start()
other.join()
print(ticks, stuck, got[0])
'''


@pytest.mark.skipif(sys.version_info < (3, 10), reason=(
    "Python 3.9's with statement itself can be cut by a signal between __enter__ and its block "
    "(bpo-29988, fixed in 3.10): there even a with of a plain threading.Lock can be left held"))
def test_a_handler_raising_around_the_lock_never_leaves_it_held():
    """A signal handler that raises while ``with lock:`` takes or gives back the lock (Ctrl-C's
    KeyboardInterrupt, a timeout's alarm) leaves it free: an alarm every 20 us raises in a loop of
    ``with lock: pass`` for 2 s, and another thread then takes it. (The lock that recorded its
    owner in Python, after taking it, was left held within a few alarms.)"""
    out = subprocess.run([sys.executable, "-c", _STORM], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    ticks, stuck, other_got_it = out.stdout.split()
    assert int(ticks) > 50, out.stdout  # the alarms did land inside the loop
    assert (stuck, other_got_it) == ("False", "True"), out.stdout
