"""Deferred writes on the driver's channels (``channel.post``): a frame posted in a burst is
written soon by whoever is due to flush, never left waiting on a thread that may stay busy
(embedded runtime's wire; no runtime needed)."""
import socket
import threading

from ray_adapter.core.embedded import channel as ch
from ray_adapter.core.embedded import posts


def _pair():
    a, b = socket.socketpair()
    received = {}
    arrived = threading.Condition()
    peer = ch.Channel(b)

    def read():
        try:
            while True:
                body, _ = peer.recv()
                with arrived:
                    received[bytes(body)] = True
                    arrived.notify_all()
        except ch.ChannelClosed:
            pass

    threading.Thread(target=read, daemon=True).start()
    return ch.Channel(a), received, arrived


def test_a_users_post_is_not_left_to_a_busy_reader_thread():
    # A driver reader thread (it flushes only before it blocks) posts, then stays busy (a
    # user's done-callback runs there); a user thread posts to the same channel meanwhile and
    # blocks in nothing of Ray's (asyncio's await): its frame must still go out at once.
    sender, received, arrived = _pair()
    posted, release = threading.Event(), threading.Event()

    def busy_reader():
        posts.flushes_before_blocking()
        sender.post(b"from the reader")
        posted.set()
        release.wait(10)  # busy until the user's frame arrived (or 10 s)
        posts.flush_posted()  # what it does before its next recv

    thread = threading.Thread(target=busy_reader, daemon=True)
    thread.start()
    posted.wait(5)
    sender.post(b"from a user thread")
    with arrived:
        ok = arrived.wait_for(lambda: b"from a user thread" in received, timeout=5)
    release.set()
    thread.join(10)
    assert ok, "the user thread's frame waited for the busy reader thread"
    with arrived:
        assert arrived.wait_for(lambda: b"from the reader" in received, timeout=5)
    sender.close()


def test_a_burst_from_one_thread_is_written():
    sender, received, arrived = _pair()
    frames = [b"frame %d" % i for i in range(500)]
    for frame in frames:
        sender.post(frame)
    with arrived:
        assert arrived.wait_for(lambda: all(f in received for f in frames), timeout=10)
    sender.close()
