"""Results sent straight from a worker to the attached driver that made the call.

An attached driver (:mod:`.attached`) reaches the runtime through the runtime's process (the
*head*): its submissions, its gets and every result pass through it, which costs a round trip
two wake-ups of the head. For a result that the driver itself waits for, one of them is not
needed: the worker that produced it can also send it straight to the driver, as Ray's workers
return results to the caller that owns them. So:

- the driver binds a Unix datagram socket (:class:`DirectResults`) in the runtime's private
  directory (0700, the socket 0600: nobody but this OS user can send to it) and names it in
  its :class:`protocol.AttachHello`; the runtime gives the path to the workers of the driver's
  job (``Init.results_path``), and flags the calls the driver submitted (``RunTask.direct``,
  ``CallActor.direct``; not a task sent to a busy worker ahead of time, nor a stream);
- the worker (:class:`ResultSender`) answers a flagged call as any other, with its
  ``TaskDone`` to the runtime, and once that is written (not merely queued) sends the same
  results as one :class:`protocol.DirectResult` datagram, without waiting, when they are
  ``ok``, small (:data:`MAX_BYTES`) and inline (no shared-memory buffers, no refs or actor
  handles pickled inside: those need the runtime's bookkeeping);
- the runtime records, seals and answers as before; the driver completes its get from
  whichever comes first, the datagram or the runtime's answer, and keeps what came straight
  while it holds refs to it (a later get of it returns at once).

**One value per object.** The driver may use a datagram before the runtime has read the
``TaskDone`` it follows, so the runtime must never record anything else for that call: the
``TaskDone`` was written first, and the runtime reads a worker's frames in order up to its
end before it fails what the worker left unanswered (a crash, a retry); an actor killed
(``ray.kill``, its owner's end) keeps its calls in flight until its process's stream ends
(``ActorManager.die``), so one it answered before it died is answered, as in Ray, where the
reply the caller got stands. A worker that dies between its ``TaskDone`` and the datagram, a
datagram that finds the driver's socket full: the runtime's answer completes the get.

Threads: the worker's sender is written once (``Init``, the main thread) and used by whichever
thread answers a call (a datagram is sent whole by one ``send``); ``calls`` is a set (its
``add`` by the reading thread, ``discard`` by the answering one are atomic). The driver's
:class:`DirectResults` is read by any thread (a datagram is received whole by one ``recv``):
its reader thread when nobody waits, or the caller of ``ray.get`` that borrowed the
connection's read role (:mod:`.driver_reading`); its tables are guarded by its own leaf lock,
and the requests it completes are completed after the lock is let go.
"""
import errno
import os
import secrets
import socket
import threading

import msgspec

from ray_adapter.core import ids
from ray_adapter.core.embedded import protocol

#: Largest result (bytes of pickles, all returns of one call) sent straight to the driver.
MAX_BYTES = 1 << 16
_RECV_BYTES = MAX_BYTES + (1 << 12)  # one datagram: the results and the message around them
_FLAGS = socket.MSG_DONTWAIT | getattr(socket, "MSG_NOSIGNAL", 0)



class ResultSender:
    """A worker's end (see the module notes): sends a direct call's results to its job's
    attached driver. ``path``: ``Init.results_path``; an unreachable path sends nothing."""

    def __init__(self, path):
        self.calls = set()  # ids of the calls received flagged ``direct`` and not answered yet
        self._sock = None
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        except OSError:
            return
        try:
            sock.connect(path)
        except OSError:  # the driver is gone already: every result goes by the runtime
            sock.close()
            return
        self._sock = sock

    def takes(self, task_id, ok, results, buffers):
        """True when call ``task_id``'s reply (``ok``, its result payloads and buffers) is to go
        straight to the driver too (the call was flagged, the reply may go that way): send it
        with :meth:`send` once its ``TaskDone`` is written. Forgets the call either way."""
        if task_id not in self.calls:
            return False
        self.calls.discard(task_id)
        if self._sock is None or not ok or buffers or not results:
            return False
        size = 0
        for payload in results:
            if payload.refs or payload.handles or payload.count:
                return False
            size += len(payload.data)
        return size <= MAX_BYTES

    def send(self, task_id, results):
        """Send call ``task_id``'s results straight to the driver. Never blocks: a driver that
        is not reading (its socket full) or is gone gets nothing (the runtime answers it)."""
        sock = self._sock
        if sock is None:
            return
        try:
            sock.send(protocol.encode(protocol.DirectResult(task_id, results)), _FLAGS)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EWOULDBLOCK, errno.ENOBUFS):
                self._sock = None  # the driver ended (ECONNREFUSED): it takes nothing more


class DirectResults:
    """An attached driver's end (see the module notes): its datagram socket in ``directory``
    (the runtime's private one), and what came through it.

    ``complete(req_id, payloads)`` is called (outside the lock, by the thread that received the
    last datagram a request waited for) when a request registered with :meth:`await_request`
    has all its objects."""

    def __init__(self, directory, complete):
        self.path = os.path.join(directory, f"d-{os.getpid()}-{secrets.token_hex(4)}.sock")
        sock = socket.socket(socket.AF_UNIX,
                             socket.SOCK_DGRAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK)
        old = os.umask(0o177)  # 0600 from the start (the directory is 0700 already)
        try:
            sock.bind(self.path)
        except OSError:
            sock.close()
            raise
        finally:
            os.umask(old)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        except OSError:
            pass
        self._sock = sock
        self.fd = sock.fileno()
        self._complete = complete
        self._lock = threading.Lock()
        self._expected = set()  # results of this driver's calls it holds refs to, not come yet
        self._stash = {}        # object id -> the Payload that came straight
        self._waiting = {}      # req_id -> its object ids (a GetReq the datagrams may complete)
        self._by_object = {}    # object id -> the req_ids waiting for it
        self._doomed = set()    # forgotten while waited for: dropped when no request waits
        self.received = 0       # datagrams received (for tests; written under the lock)
        self.completed = 0      # requests completed from them (for tests; under the lock)

    # -- what the driver made and holds ------------------------------------------------------
    def expect(self, object_ids):
        """``object_ids`` are the returns of a call this driver just submitted (owned here)."""
        with self._lock:
            self._expected.update(object_ids)

    def forget(self, object_id):
        """This driver dropped its last ref to ``object_id``: nothing of it is kept here."""
        with self._lock:
            self._expected.discard(object_id)
            if object_id in self._by_object:  # a request counts on it: kept while it waits
                self._doomed.add(object_id)
            else:
                self._stash.pop(object_id, None)

    def take(self, object_ids):
        """The payloads of ``object_ids`` if all came straight; else None."""
        with self._lock:
            stash = self._stash
            try:
                return [stash[oid] for oid in object_ids]
            except KeyError:
                return None

    # -- requests ----------------------------------------------------------------------------
    def await_request(self, req_id, object_ids):
        """Request ``req_id`` (a GetReq about to be sent) asks for ``object_ids``: True when
        each came straight or may still (the request is then completed once all are here, at
        once, from this thread, if they are already, unless the runtime's answer came first:
        :meth:`end_request`); False: only the runtime answers it (nothing is registered)."""
        with self._lock:
            expected, stash = self._expected, self._stash
            if not all(oid in stash or oid in expected for oid in object_ids):
                return False
            if all(oid in stash for oid in object_ids):
                payloads = [stash[oid] for oid in object_ids]
                self.completed += 1
            else:
                payloads = None
                self._waiting[req_id] = object_ids
                for oid in object_ids:
                    self._by_object.setdefault(oid, set()).add(req_id)
        if payloads is not None:
            self._complete(req_id, payloads)
        return True

    def end_request(self, req_id):
        """Request ``req_id`` is over (answered by the runtime, timed out, or completed)."""
        with self._lock:
            self._unregister_locked(req_id)

    def _unregister_locked(self, req_id):
        object_ids = self._waiting.pop(req_id, None)
        for oid in object_ids or ():
            waiting = self._by_object.get(oid)
            if waiting is not None:
                waiting.discard(req_id)
                if not waiting:
                    del self._by_object[oid]
                    if oid in self._doomed:
                        self._doomed.discard(oid)
                        self._stash.pop(oid, None)

    # -- receiving ---------------------------------------------------------------------------
    def drain(self):
        """Receive every datagram waiting (any thread; never blocks) and complete the requests
        they finish. Returns the number received."""
        received, done = 0, []
        decode = protocol.direct_decoder.decode
        while True:
            try:
                data = self._sock.recv(_RECV_BYTES)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:  # closed (shutdown)
                break
            received += 1
            try:
                message = decode(data)
            except msgspec.DecodeError:
                continue  # (only this user's processes can send here: a bug, not an attack)
            object_ids = ids.IdFactory.returns(message.task_id, len(message.results))
            with self._lock:
                expected, stash, by_object = self._expected, self._stash, self._by_object
                touched = set()
                for oid, payload in zip(object_ids, message.results):
                    waiting = by_object.get(oid)
                    if oid in expected or waiting:  # (else its last ref went: not kept)
                        expected.discard(oid)
                        stash[oid] = payload
                        if waiting:
                            touched.update(waiting)
                for req_id in touched:
                    wanted = self._waiting[req_id]
                    if all(oid in stash for oid in wanted):
                        self.completed += 1
                        done.append((req_id, [stash[oid] for oid in wanted]))
                        self._unregister_locked(req_id)
        if received:
            with self._lock:
                self.received += received
        for req_id, payloads in done:
            self._complete(req_id, payloads)
        return received

    def close(self):
        """Stop receiving and remove the socket's file (the driver detaches)."""
        try:
            self._sock.close()
        finally:
            try:
                os.unlink(self.path)
            except OSError:
                pass


def takes_direct(caller, job_id):
    """True when ``caller`` (the runtime's handle of whoever submitted a call: a worker, or an
    attached driver's :class:`.drivers.DriverPeer`) is the attached driver of job ``job_id``
    and takes its results straight (the runtime's side; see the module notes)."""
    return bool(getattr(caller, "results_path", "")) and caller.job_id == job_id
