"""The socket drivers attach to: a Unix socket in the runtime's private directory.

The directory is 0700 and the socket 0600, inside this user's registry directory
(:mod:`.local_runtimes`), so only this user's processes can connect; each connection's peer
credentials (``SO_PEERCRED``) are checked as well, and another user's is closed at once. No
network port is opened: a driver on another machine cannot attach (that is a Yuanrong
cluster's job).

Thread-safety: one accept thread (``ray-adapter-attach``) owns the listening socket while it
runs; :meth:`AttachServer.close` (any thread) shuts the socket down, which wakes it.
"""
import os
import socket
import struct
import threading

from ray_adapter.core.threads import blocking_signals

SOCKET_NAME = "attach.sock"


class AttachServer:
    """Listens at ``<directory>/attach.sock``; ``on_driver(connection, pid)`` is called in the
    accept thread for each process of this user that connects (it owns the connection)."""

    def __init__(self, *, directory, on_driver):
        self.path = os.path.join(directory, SOCKET_NAME)
        self._on_driver = on_driver
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self._thread = None
        self._closed = False

    def start(self):
        """Bind and listen (raises OSError when it cannot), then accept in a thread."""
        old = os.umask(0o177)
        try:
            self._sock.bind(self.path)
        finally:
            os.umask(old)
        self._sock.listen(64)
        self._thread = threading.Thread(target=self._serve, name="ray-adapter-attach", daemon=True)
        with blocking_signals():
            self._thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            if self._closed:
                conn.close()
                return
            pid, uid = _peer(conn)
            if uid != os.getuid():
                conn.close()
                continue
            try:
                self._on_driver(conn, pid)
            except Exception:  # noqa: BLE001 - a driver that cannot be taken on is refused
                conn.close()

    def close(self):
        """Stop accepting (drivers already attached keep their connections)."""
        self._closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def _peer(conn):
    """``(pid, uid)`` of the process at the other end."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", creds)
    return pid, uid
