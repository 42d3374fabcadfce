"""Worker processes forked from a template process that has already imported the worker's code.

Starting a Python interpreter and importing the worker (the runtime core, the ``ray`` proxy,
cloudpickle, msgspec...) costs about 150 ms of CPU per worker; forking a process that already
did costs a few milliseconds, so dozens of actors start at once (RL controllers start dozens).

The template (:func:`main`, ``python -m ray_adapter.core.embedded.zygote FD [SESSION_DIR
[MODULES]]``) is started by the driver with the workers' environment. It also imports the
heavy modules the driver had imported when it started (:func:`preload_modules`: torch),
so an actor of an RL worker group does not pay for ``import torch`` again (about a second
each); importing torch initializes neither CUDA nor its OpenMP pool, and each task or actor
applies its ``OMP_NUM_THREADS`` to it (``execution.sync_torch_threads``: torch read the
variable at import). Its Python code
stays single-threaded (forking is safe; the one native thread an import may start, numpy's
BLAS pool, is idle and re-initialised in the child by its own fork handler) and serves one
control socket: a spawn request carries the worker's end of its socket pair (SCM_RIGHTS)
and per-worker environment changes; the template forks, the child starts a new session and
becomes :func:`ray_adapter.core.embedded.worker.main`, and the template answers with the pid.
It reaps its children (SIGCHLD, through a self-pipe) and reports each exit code. When the
driver's end of the control socket closes (the driver is gone, however), it exits; the workers
end themselves when their own sockets close.

:class:`Zygote` is the driver's side: :meth:`Zygote.spawn` returns a :class:`ForkedProcess`
with the ``Popen`` methods the pool uses. Thread-safety: ``spawn`` may be called from any
thread; one reader thread takes the template's answers.
"""
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading

_LEN = struct.Struct("!I")
_NOSIGNAL = int(getattr(socket, "MSG_NOSIGNAL", 0))  # a dead peer is an error, never SIGPIPE


def _send(sock, obj, fd=None):
    data = json.dumps(obj).encode()
    frame = _LEN.pack(len(data)) + data
    if fd is None:
        sock.sendall(frame, _NOSIGNAL)
    else:
        sock.sendmsg([frame], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", fd))], _NOSIGNAL)


def _recv(sock, fds):
    """One framed JSON message; descriptors that came with it are appended to ``fds``."""
    head = _recv_exact(sock, _LEN.size, fds)
    return json.loads(_recv_exact(sock, _LEN.unpack(head)[0], fds))


def _recv_exact(sock, n, fds):
    out = bytearray()
    while len(out) < n:
        data, anc, _flags, _addr = sock.recvmsg(n - len(out), socket.CMSG_SPACE(4 * 4))
        if not data:
            raise EOFError("the peer closed the control socket")
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.extend(struct.unpack(f"{len(payload) // 4}i", payload[: len(payload) // 4 * 4]))
        out += data
    return bytes(out)


# ====================================================================== the template process
def main(argv=None):
    from ray_adapter.core.threads import unblock_signals

    unblock_signals()  # started by any thread of the driver: its children take signals
    argv = sys.argv[1:] if argv is None else argv
    ctl = socket.socket(fileno=int(argv[0]))
    os.environ["RAY_BACKEND"] = "yuanrong"
    from ray_adapter import hook

    hook.install()
    from ray_adapter.core.embedded import worker  # noqa: F401 - what every worker imports
    import ray  # noqa: F401

    import importlib

    for name in filter(None, (argv[2] if len(argv) > 2 else "").split(",")):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a worker imports it itself (and reports what fails)
            pass
    import gc

    gc.freeze()  # what is imported now is shared with every child, untouched by their GCs
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: _poke(wake_w))
    children = set()
    while True:
        try:
            readable, _, _ = select.select([ctl, wake_r], [], [])
        except InterruptedError:
            continue
        if wake_r in readable:
            os.read(wake_r, 4096)
            _reap(ctl, children, argv)
        if ctl in readable:
            fds = []
            try:
                request = _recv(ctl, fds)
            except (EOFError, OSError):
                # The driver is gone. Each worker sees its own socket close and ends itself and
                # what its tasks started (killing them here would leave those orphaned).
                _leave(argv)
            pid = os.fork()
            if pid == 0:
                _child(fds[0], request, ctl, wake_r, wake_w)
            os.close(fds[0])
            children.add(pid)
            _send_or_exit(ctl, {"id": request["id"], "pid": pid}, argv)


def _leave(argv):
    """The driver is gone: remove its session directory (``argv[1]``, when given: a driver
    killed by a signal could not) and exit."""
    if len(argv) > 1 and argv[1]:
        import shutil

        shutil.rmtree(argv[1], ignore_errors=True)
    os._exit(0)


def _send_or_exit(ctl, message, argv=()):
    """Send to the driver; if it is gone (its end closed), end quietly, as on EOF."""
    try:
        _send(ctl, message)
    except OSError:
        _leave(argv)


def _poke(fd):
    try:
        os.write(fd, b"x")
    except OSError:
        pass


def _reap(ctl, children, argv):
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        _send_or_exit(ctl, {"exit": pid, "code": os.waitstatus_to_exitcode(status)}, argv)


def _child(fd, request, ctl, wake_r, wake_w):
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for closing in (ctl.detach(), wake_r, wake_w):
        try:
            os.close(closing)
        except OSError:
            pass
    try:
        os.setsid()
        os.environ.update(request.get("env") or {})
        if request.get("cwd"):
            os.chdir(request["cwd"])
        for path in reversed(request.get("path") or []):
            sys.path.insert(0, path)
        from ray_adapter.core.embedded import worker

        worker.main([str(fd)])
    finally:
        os._exit(1)


# ====================================================================== the driver's side
class ForkedProcess:
    """A worker forked by the template: the ``Popen`` attributes the pool uses.

    Its exit code comes from the template (its parent), which reports each exit. A pidfd of
    the process (Linux >= 5.3) answers whether it ended even if that report never comes (the
    template stopped or lost it), so :meth:`wait` cannot hang on a dead worker."""

    #: Seconds :meth:`wait` gives the template to report an exit the pidfd has seen.
    REPORT_GRACE_S = 2.0

    def __init__(self, pid):
        self.pid = pid
        self.returncode = None
        self._exited = threading.Event()
        try:
            self._pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):  # older kernel, or it is gone already
            self._pidfd = None

    def _set_exit(self, code):
        self.returncode = code
        self._exited.set()

    def __del__(self):
        # Closed only here: a wait() in another thread may be selecting on it (a number closed
        # under it could be reused by an unrelated file).
        fd, self._pidfd = getattr(self, "_pidfd", None), None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def poll(self):
        return self.returncode

    def wait(self, timeout=None):
        if self._exited.is_set():
            return self.returncode
        fd = self._pidfd
        if fd is None:
            if not self._exited.wait(timeout):
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout)
            return self.returncode
        ended, _, _ = select.select([fd], [], [], timeout)
        if not ended:
            raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout)
        if not self._exited.wait(self.REPORT_GRACE_S):  # ended, but no report from the template
            self._set_exit(-signal.SIGKILL)
        return self.returncode

    def kill(self):
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


#: Modules the template imports when the driver has (see the module's docstring).
PRELOADED = ("torch",)
#: The environment variable naming the modules instead (comma-separated; empty: none).
PRELOAD_ENV = "RAY_ADAPTER_PRELOAD_MODULES"


def preload_modules():
    """The modules the template imports before it forks a worker: those :data:`PRELOAD_ENV`
    names when it is set, else those of :data:`PRELOADED` this process has imported. The
    first worker waits for them (``import torch``: about a second here), every later one
    starts with them imported."""
    named = os.environ.get(PRELOAD_ENV)
    if named is not None:
        return [name.strip() for name in named.split(",") if name.strip()]
    return [name for name in PRELOADED if name in sys.modules]


class Zygote:
    """The driver's handle on the template process; ``preload``: modules it imports before it
    forks anything (see :func:`preload_modules`)."""

    def __init__(self, env, stdout=None, stderr=None, cwd=None, remove_on_exit=None, preload=()):
        parent, child = socket.socketpair()
        extra = [remove_on_exit or "", ",".join(preload)]
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "ray_adapter.core.embedded.zygote", str(child.fileno()), *extra],
                pass_fds=(child.fileno(),), env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=stdout,
                stderr=stderr, start_new_session=True, close_fds=True)
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        self._sock = parent
        self._lock = threading.Lock()        # leaf: request ids and whole-frame sends
        self._next = 0
        self._spawning = {}                  # request id -> [Event, pid]
        self._procs = {}                     # pid -> ForkedProcess (its exit is reported after the pid)
        self.alive = True
        from ray_adapter.core.threads import start_daemon  # driver side (the template: stdlib)

        start_daemon(self._reader, "ray-adapter-zygote")

    def spawn(self, fd, env=None, cwd=None, path=None):
        """Fork a worker on ``fd`` (its end of a socket pair; the caller closes its copy after);
        returns its ForkedProcess. Raises OSError when the template is gone."""
        done = threading.Event()
        with self._lock:
            if not self.alive:
                raise OSError("the worker template process is gone")
            self._next += 1
            request_id = self._next
            slot = self._spawning[request_id] = [done, None]
            _send(self._sock, {"id": request_id, "env": env or {}, "cwd": cwd, "path": path or []}, fd)
        done.wait()
        if slot[1] is None:
            raise OSError("the worker template process is gone")
        return slot[1]

    def _reader(self):
        fds = []
        try:
            while True:
                message = _recv(self._sock, fds)
                if "pid" in message:
                    proc = ForkedProcess(message["pid"])
                    with self._lock:
                        self._procs[proc.pid] = proc
                        slot = self._spawning.pop(message["id"], None)
                    if slot is not None:
                        slot[1] = proc
                        slot[0].set()
                elif "exit" in message:
                    with self._lock:
                        proc = self._procs.pop(message["exit"], None)
                    if proc is not None:
                        proc._set_exit(message["code"])
        except (EOFError, OSError, ValueError):
            pass
        with self._lock:
            self.alive = False
            waiting = list(self._spawning.values())
            self._spawning.clear()
            procs = list(self._procs.values())
            self._procs.clear()
        for slot in waiting:
            slot[0].set()
        for proc in procs:  # no more exit reports: whoever waits learns it now
            if proc.returncode is None:
                proc._set_exit(-signal.SIGKILL)

    def close(self):
        """Stop the template (its workers are stopped by the pool)."""
        try:
            # shutdown() first: a plain close() leaves the socket open in the kernel while the
            # reader thread is blocked in recvmsg on it, so the template would never see EOF.
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self._sock.close()
        except OSError:
            pass
        try:
            self._proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


if __name__ == "__main__":
    main()
