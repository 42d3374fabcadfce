"""The runtime core of a driver attached to another process's runtime on this machine.

``ray.init(address="auto")`` (or ``RAY_ADDRESS``, or a plain ``ray.init()`` while a
``ray start --head`` runtime runs) connects to that runtime's attach socket
(:mod:`.attach_server`) instead of starting a runtime. The driver then is, to the runtime, a
peer that speaks what a worker's nested calls speak (:mod:`.drivers`): this core *is* a
:class:`~.worker_core.WorkerCore` (requests, reference counting, borrows) over that
connection, with the driver's own identity (its job, namespace and runtime env, from
:class:`protocol.Attached`).

The runtime gone (its process ended or was killed): the connection ends, every request
waiting fails, and every later call raises at once, with
:class:`~ray_adapter.core.errors.NotInitialized` saying which runtime ended (Ray's driver
gets a ``RaySystemError`` too); nothing hangs. ``shutdown`` closes the connection, and the
runtime ends this driver's job (its non-detached actors and placement groups).

Thread-safety: the connection has a read role (:class:`.driver_reading.ReadRole`, as each
worker's channel in a runtime's own driver): a reader thread (``ray-adapter-attached``) sleeps
in ``epoll`` on it and reads what arrives, and a thread waiting for a reply (a ``ray.get``, a
query) borrows the role and reads that reply itself, so a round trip wakes one thread of this
process, not two. Frames are read in order, one thread at a time. A reply's callback
(:meth:`object_future`'s, which settles a future whose done-callbacks are user code) never runs
on a reading thread: it goes to one callbacks thread (``ray-adapter-callbacks``), so a
done-callback may itself call ``ray.get``. ``_gone`` is set once, by whichever of the reader and
``shutdown`` sees the end first, before the waiting requests are failed.
"""
import json
import os
import pickle
import socket
import sys
import threading
import uuid
import weakref

import msgspec

from ray_adapter.core import errors, ids, serialization
from ray_adapter.core.embedded import protocol
from ray_adapter.core.embedded.arena import WorkerCodec
from ray_adapter.core.embedded.channel import Channel, ChannelClosed
from ray_adapter.core.embedded.driver_reading import ReadRole
from ray_adapter.core.embedded.local_runtimes import JOB_RUNTIME_ENV_VAR, JOB_SUBMISSION_ID_VAR
from ray_adapter.core.embedded.pool import driver_code_path
from ray_adapter.core.embedded.protocol import from_payload, to_payload
from ray_adapter.core.embedded.worker_core import WorkerCore
from ray_adapter.core.execution import main_module_name
from ray_adapter.core.interface import CallContext
from ray_adapter.core.releases import DeferredReleases
from ray_adapter.core.threads import start_daemon


#: Longest ``ray.shutdown()`` of an attached driver waits for what it sent to be written
#: (a runtime that stopped reading must not hold the driver's exit).
DETACH_WRITE_S = 10.0


#: Every connection of this process. A child forked from a driver (multiprocessing) shares
#: its connection and its id salt: it must not talk to the runtime (its ids would be the
#: parent's), as a worker's forked child must not. One fork hook, registered once.
_LINKS = weakref.WeakSet()


def _mark_forked():
    for link in list(_LINKS):
        link.forked_child = True


os.register_at_fork(after_in_child=_mark_forked)


class _Link:
    """The driver's end of its connection, as :class:`WorkerCore` uses a worker: ``send``,
    ``post``, ``channel`` and the identity fields (``Attached``)."""

    forked_child = False      # set in a process forked from this driver (see AttachedCore)
    actor_id = None           # nor an actor
    assignment = None
    exit_actor_after_call = False

    def __init__(self, sock):
        self.channel = Channel(sock)
        self.job_id = self.node_id = self.worker_id = None
        self.id_salt = b""
        self.namespace = self.node_ip = self.address = ""
        self.runtime_env = {}

    def send(self, message, buffers=()):
        self.channel.send(protocol.encode(message), buffers)

    def post(self, message, buffers=()):
        self.channel.post(protocol.encode(message), buffers)


class _Failure:
    """What a request waiting when the runtime went gets in place of its reply: read as a
    failed :class:`protocol.Reply` and as a :class:`protocol.GetReply` with an error."""

    ok = False
    values = ()

    def __init__(self, payload):
        self.value = self.error = payload


def _run_callback(call):
    """On the callbacks thread: a reply's callback (``(callback, message, buffers)``)."""
    callback, message, buffers = call
    callback(message, buffers)


class AttachedCore(WorkerCore):
    """The core of a driver attached to a runtime another process started (see the module's
    notes). ``start(options)`` connects to ``options.attach`` (a :mod:`.local_runtimes`
    record); raises ``ConnectionError`` when that runtime cannot be reached."""

    backend_name = "embedded"

    def __init__(self):  # WorkerCore's own set-up runs once connected (start)
        self._gone = None
        self._reader = None
        self._reader_ident = None
        self._role = None
        self._callbacks = None
        self._task_id = None
        self._log_to_driver = True

    def start(self, options):
        record = options.attach
        if record.get("version") != protocol.VERSION:  # as Ray's version check at connect
            raise RuntimeError(
                f"Version mismatch: the Ray runtime at {record['address']} runs a ray-adapter "
                f"speaking protocol version {record.get('version')}, this driver's speaks "
                f"{protocol.VERSION}. Run the driver with the ray-adapter the runtime was started "
                "with (or restart the runtime with this one).")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            sock.connect(record["socket"])
        except OSError as exc:
            sock.close()
            raise ConnectionError(f"Could not connect to the Ray runtime at {record['address']} "
                                  f"({record['socket']}): {exc}. Is it still running "
                                  "(`ray status`)?") from None
        link = _Link(sock)
        _LINKS.add(link)
        WorkerCore.__init__(self, link)
        self._log_to_driver = options.log_to_driver
        self._on_unhandled_error = options.on_unhandled_error
        link.channel.codec = WorkerCodec(self.block_released)
        namespace = options.namespace or str(uuid.uuid4())
        # A submitted job's driver: the job's runtime env under its own ray.init's (jobs.py).
        job_env = json.loads(os.environ.get(JOB_RUNTIME_ENV_VAR) or "{}")
        runtime_env = dict(job_env, **(options.runtime_env or {}))
        try:
            answer = self._hello(link, record, namespace, runtime_env)
        except BaseException:
            link.channel.close()
            self.stop_ref_loop()  # the references thread WorkerCore started ends too
            raise
        link.job_id, link.node_id, link.worker_id = answer.job_id, answer.node_id, answer.worker_id
        link.namespace, link.node_ip, link.address = answer.namespace, answer.node_ip, answer.address
        link.runtime_env = pickle.loads(answer.runtime_env) if answer.runtime_env else {}
        link.id_salt = answer.id_salt
        self._task_id = ids.random_id(ids.TASK_ID_SIZE - ids.JOB_ID_SIZE) + answer.job_id
        self._callbacks = DeferredReleases(name="ray-adapter-callbacks")
        self._role = ReadRole(link.channel)
        self._reader = start_daemon(self._read, "ray-adapter-attached")
        return {"address": answer.address, "node_id": answer.node_id.hex(),
                "node_ip_address": answer.node_ip, "metrics_export_port": None}

    @staticmethod
    def _hello(link, record, namespace, runtime_env):
        """Say who this driver is and read the runtime's :class:`protocol.Attached`; raises
        ConnectionError when it refuses (its reason) or ends first."""
        try:
            link.send(protocol.AttachHello(protocol.VERSION, os.getpid(), namespace,
                                           pickle.dumps(runtime_env),
                                           bool(record.get("observer")),
                                           os.environ.get(JOB_SUBMISSION_ID_VAR, ""),
                                           driver_code_path(), main_module_name()))
            body, _ = link.channel.recv()
            answer = protocol.worker_decoder.decode(body)
        except ChannelClosed:
            raise ConnectionError(f"The Ray runtime at {record['address']} closed the connection "
                                  "before the driver could attach (it may be shutting down).") from None
        except msgspec.DecodeError as exc:
            raise ConnectionError(f"Could not attach to the Ray runtime at {record['address']}: "
                                  f"its answer is not one this ray-adapter reads ({exc}).") from None
        if type(answer) is not protocol.Attached or answer.error:
            why = answer.error if type(answer) is protocol.Attached else "an unexpected answer"
            raise ConnectionError(f"Could not attach to the Ray runtime at {record['address']}: {why}")
        return answer

    # -- the connection ----------------------------------------------------------------------
    def _read(self):
        self._reader_ident = threading.get_ident()
        try:
            self._role.serve(self._receive)
        except ChannelClosed:
            pass
        self._end(f"the Ray runtime this driver attached to ({self._worker.address}) has ended: "
                  "its process exited or was killed. Call ray.shutdown(), then ray.init() to "
                  "start or attach to another.")
        self._worker.channel.close()  # (nobody reads it any more)

    def _receive(self):
        """Read and handle one frame (on the reader thread, or a caller that borrowed the
        role); False at the runtime's ``Exit``."""
        body, buffers = self._worker.channel.recv()
        message = protocol.worker_decoder.decode(body)
        kind = type(message)
        if kind is protocol.Reply or kind is protocol.GetReply:
            self.on_reply(message, buffers)
        elif kind is protocol.Output:
            self._print(message)
        elif kind is protocol.UnreadError:
            self._report_unread(message, buffers)
        elif kind is protocol.Exit:
            return False
        return True

    def on_reply(self, message, buffers):
        slot = self._pending.get(message.req_id)
        if slot is not None and slot.callback is not None:  # user code: the callbacks thread
            if self._pending.pop(message.req_id, None) is not None:
                self._callbacks.put(_run_callback, (slot.callback, message, buffers))
            return
        WorkerCore.on_reply(self, message, buffers)

    def _await_reply(self, slot):
        """Read the reply on this thread while nobody else reads (see the module notes), then
        wait for it as before (the reader, or another borrower, may have read it)."""
        if threading.get_ident() != self._reader_ident and not slot.event.is_set():
            self._role.read_until(slot.event.is_set, None)
        slot.event.wait()

    def _report_unread(self, message, buffers):
        """An error this driver was lent was freed unread: the proxy's report, as Ray's owner
        makes it (reader thread; the report only writes to stderr)."""
        if self._on_unhandled_error is None:
            return
        try:
            error = serialization.loads(from_payload(message.error, buffers))
        except Exception:  # noqa: BLE001 - an error this driver cannot rebuild: nothing to show
            return
        if errors.reported_when_unread(error):
            self._on_unhandled_error(error)

    def _print(self, message):
        """Lines this job's tasks and actors printed, written as Ray's driver writes them (not
        with ``log_to_driver=False``)."""
        if not self._log_to_driver:
            return
        stream = sys.stdout if message.fd == 1 else sys.stderr
        try:
            stream.write(message.text)
            stream.flush()
        except (OSError, ValueError):  # the driver's output is gone (`| head`)
            pass

    def _end(self, why):
        """The connection is over: later calls raise ``why``; the waiting ones fail now
        (``_gone`` is set before the pass, so a request registered after it sees it:
        ``WorkerCore._call``)."""
        if self._gone is not None:
            return
        self._gone = errors.NotInitialized(why)
        # Ended both ways, not closed: the reader (and a caller reading for itself) sees the end
        # of the stream and leaves; the reader closes the socket as it goes. (A socket closed
        # under the reader's epoll leaves the set without waking it.)
        self._worker.channel.abort()
        self.stop_ref_loop()
        buffers = []
        payload = to_payload(serialization.dumps(self._gone), buffers)
        for req_id in list(self._pending):
            slot = self._pending.pop(req_id, None)
            if slot is None:
                continue
            if slot.callback is not None:
                slot.callback(_Failure(payload), buffers)
            else:
                slot.message, slot.buffers = _Failure(payload), buffers
                slot.event.set()

    # -- lifecycle ---------------------------------------------------------------------------
    def shutdown(self):
        """Detach: the runtime ends this driver's job, after what this driver sent (calls
        sent without waiting among them) is written (for at most :data:`DETACH_WRITE_S`).
        In a process forked from the driver it only lets go of its copy of the connection:
        the connection is the parent's (ending it would end the parent's job)."""
        if self._worker.forked_child:
            if self._gone is None:
                self._gone = errors.NotInitialized("ray.shutdown() was called")
            self._worker.channel.let_go()
            return
        if self._gone is None:
            self._worker.post(protocol.Exit())  # an intended exit (its actors: OWNER_DIED, intended)
            self._worker.channel.wait_written(DETACH_WRITE_S)
        self._end("ray.shutdown() was called: this driver is no longer attached")
        for thread in (self._reader, getattr(self, "_ref_thread", None)):
            if thread is not None and thread is not threading.current_thread():
                thread.join(5)
        if self._reader is None or not self._reader.is_alive():
            self._worker.channel.close()
            if self._role is not None:
                self._role.close()
        if self._callbacks is not None:
            self._callbacks.close()

    def context(self):
        link = self._worker
        return CallContext(job_id=link.job_id, node_id=link.node_id, worker_id=link.worker_id,
                           namespace=link.namespace, is_driver=True, task_id=self._task_id,
                           runtime_env=link.runtime_env, node_ip_address=link.node_ip,
                           gcs_address=link.address)

    def exit_current_actor(self):
        raise RuntimeError("exit_actor() can only be called inside an actor")
