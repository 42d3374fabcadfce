"""``core.locks.OwnedRLock``: a re-entrant lock that tells its holder it holds it."""
import threading

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
