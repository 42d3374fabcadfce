"""Worker process of the embedded backend: ``python -m ray_adapter.core.embedded.worker FD``.

Messages from the driver (one end of a socket pair, FD) are read by the *main thread* while it
is idle and by the *reader* (helper) thread while it runs work (:mod:`.worker_reading`), and
routed: tasks, actor creation and calls of a synchronous actor run in the main thread (so a
cancel can interrupt them with a signal); calls of a threaded actor go to its thread pool, of
an async actor to its event loop (:mod:`.executors`); replies to the requests the user's code
made (nested ``ray.get``...) to :class:`~.worker_core.WorkerCore`.

The worker is a child subreaper and leads its own process group: when the driver's end of the
socket closes, for whatever reason (even SIGKILL), the worker kills every process its tasks
started, then exits, so nothing is left behind.

A process a task forks (``os.fork``, multiprocessing's "fork" start method) is not the worker:
it loses the channel at the fork (:meth:`Worker.after_fork_in_child`), so only the worker ever
speaks to the driver. A child that comes back into the worker's code to report a result (its
task function returned or raised) exits there, quietly: status 0 after a return, 1 after an
exception. (Ray 2.60 lets such a child go on as a stray worker process whose result may reach
the caller first; here the caller always gets the worker's own result.)
"""
import contextlib
import os
import queue
import signal
import socket
import sys
import threading
import traceback

from ray_adapter.core import errors, shm
from ray_adapter.core.embedded import executors, protocol, results, streaming
from ray_adapter.core.embedded.arena import WorkerCodec
from ray_adapter.core.embedded.channel import Channel, ChannelClosed
from ray_adapter.core.embedded.posts import (flush_posted, flushes_before_blocking,
                                             reset_after_fork as reset_posts_after_fork,
                                             write_posts_at_once)
from ray_adapter.core.embedded.worker_core import WorkerCore, current_call, current_function
from ray_adapter.core.embedded.worker_reading import ReadRole
from ray_adapter.core.execution import (MAIN_MODULE_ENV, apply_env, argument_failure,
                                        cancelled_failure, exit_status,
                                        function_descriptor, restore_env, sync_torch_threads,
                                        task_failure, with_thread_default)
from ray_adapter.core.process_tree import become_subreaper
from ray_adapter.core.threads import start_daemon, unblock_signals


_MAIN_THREAD = threading.main_thread()


class Worker:
    """State and main loop of one worker process.

    Threads and what each owns (the fields are grouped so below):

    - *reading*: whichever thread holds the read role (:mod:`.worker_reading`: the main thread
      while idle, the reader thread while user code runs) routes messages; it is the only
      writer of the registration fields (``blobs``; ``functions`` and ``descriptors`` are
      filled by the thread that first loads a key, an idempotent cache) and of the identity
      fields, set by ``Init`` before any task is queued.
    - *start_lock* (a leaf lock) guards the fields a cancel or release, handled by the reading
      thread, races with the main thread starting and ending a task: ``running_task``,
      ``cancelled``, ``queued``, ``skip``; ``cancel_requested`` is set under it by the reading
      thread and cleared by the main thread once the task it names is over.
    - *main thread* (tasks and synchronous actor calls): ``interruptible``, ``sending``,
      ``assignment`` / ``assigned_resources`` / ``gpu_ids`` of the running task, ``budget``.
      The SIGUSR1 handler runs in the main thread too (between bytecodes): it only reads
      ``cancel_requested``, ``running_task``, ``sending`` and ``interruptible`` and clears
      ``cancel_requested`` when it raises the cancel.
    - *the actor*, once created: ``actor`` (executors.ActorHost) and the ``actor_*`` fields are
      set by ``CreateActor`` in the main thread before the actor is announced ready, read-only
      after; ``exit_actor_after_call`` is set by the call that asks to exit (any of the actor's
      threads) and read when that call ends.
    - ``forked_child`` is set in a forked child's only thread (:meth:`after_fork_in_child`).
    """

    def __init__(self, fd):
        # Not inherited by what its code runs (os.system, a subprocess keeping descriptors): a
        # program left running would hold the stream open after this process died, and the
        # runtime reads to the stream's end before it fails or restarts what ran here.
        os.set_inheritable(fd, False)
        self.channel = Channel(socket.socket(fileno=fd))  # its own locks (channel.py)
        self.role = ReadRole(self.channel.sock)
        self.core = WorkerCore(self)  # the user code's runtime core: its own state and locks
        self.channel.codec = WorkerCodec(self.core.block_released)
        self.exec_queue = queue.SimpleQueue()  # reading thread -> main thread (thread-safe)
        # -- registrations (reading thread) ---------------------------------------------------
        self.blobs = {}                 # key -> pickled function / class, as registered
        self.functions = {}             # key -> loaded function / class (a cache)
        self.descriptors = {}           # key -> its function's descriptor (get_task_function_name)
        # -- identity (set by Init, read-only after) ------------------------------------------
        self.job_id = self.node_id = self.worker_id = None
        self.id_salt = b""  # from Init: this process mints its actor calls' ids with it
        self.namespace = None
        self.node_ip = "127.0.0.1"
        self.address = ""               # the runtime's (gcs_address)
        self.runtime_env = None         # the env this process was started for (Init)
        # -- the actor (set by CreateActor in the main thread, read-only after) ---------------
        self.actor_id = None
        self.actor_name = None
        self.actor_class_name = None
        self.actor_label = None         # execution.ActorLabel of the actor (its calls' errors)
        self.actor_handle_meta = None
        self.actor = None               # executors.ActorHost once an actor is created
        self.actor_log_name = None      # repr(instance) when the actor's class defines __repr__
        self.restart_count = 0
        self.exit_actor_after_call = False  # set by the call asking to exit, read as it ends
        self.exit_call = None           # that call's task id (the call the actor ends after)
        self.exit_by_call = False       # ... and it called exit_actor() (not sys.exit(0))
        self.graceful_exit = False      # Exit(graceful): its actor went out of scope
        # -- the running task (main thread) ---------------------------------------------------
        self.assigned_resources = {}
        self.gpu_ids = []
        self.assignment = None          # protocol.Assignment of the running task / the actor
        self.interruptible = False      # the main thread is inside the running task's try block
        self.sending = False            # the main thread is writing a frame (see whole_frames)
        self.budget = streaming.Budget()  # backpressure of a streaming task's items
        # -- starting vs cancelling (under start_lock) ----------------------------------------
        self.start_lock = threading.Lock()  # a queued task starts, or is cancelled/released, never both
        self.running_task = None        # the task or call running in the main thread
        self.cancel_requested = None
        self.cancelled = set()          # cancelled before their RunTask arrived
        self.queued = set()             # tasks waiting in exec_queue (pipelined behind the running one)
        self.skip = set()               # queued tasks already answered (cancelled) or released
        # -- a forked child (its only thread) -------------------------------------------------
        self.forked_child = False       # this process is a fork of the worker (see the module notes)

    def after_fork_in_child(self):
        """Runs in a process forked from this worker (``os.register_at_fork``), in its only
        thread: the child gives up the channel (:meth:`.Channel.detach`), the posted frames and
        the output locks it inherited; it leaves when it next tries to send (:meth:`leave_fork`)."""
        self.forked_child = True
        self.channel.detach()
        reset_posts_after_fork()
        for stream in (sys.stdout, sys.stderr):
            if isinstance(stream, executors.PrefixWriter):
                stream.reset_after_fork()

    def leave_fork(self, message):
        """A forked child reached the point where the worker reports to the driver: it ends
        here (1 if it reports a failure, else 0), its output flushed, its result never sent."""
        failed = type(message) is protocol.TaskDone and not message.ok
        results.flush_std()
        os._exit(1 if failed else 0)

    def send(self, message, buffers=()):
        """Write ``message`` now (from the main thread, a cancel's signal cannot cut it)."""
        if self.forked_child:
            self.leave_fork(message)
        if threading.current_thread() is _MAIN_THREAD:
            with self.whole_frames():
                self.channel.send(protocol.encode(message), buffers)
        else:
            self.channel.send(protocol.encode(message), buffers)

    def post(self, message, buffers=()):
        """Queue ``message`` for the next batch (written before this process next blocks)."""
        if self.forked_child:
            self.leave_fork(message)
        self.channel.post(protocol.encode(message), buffers)

    # -- driver messages (whichever thread holds the read role) ------------------------------
    def route(self, message, buffers):
        """Act on one message from the driver; False for Exit (the process ends)."""
        kind = type(message)
        if kind is protocol.CallActor:
            self.actor.accept(message, buffers)
        elif kind is protocol.RunTask:
            if message.streaming:  # before any ack for it can arrive
                self.budget.open(message.task_id, message.backpressure)
            with self.start_lock:
                self.queued.add(message.task_id)
            self.exec_queue.put((message, buffers))
        elif kind is protocol.Release:
            self.on_release(message.task_id)
        elif kind is protocol.StreamAck:
            (self.actor.budget if self.actor is not None else self.budget).ack(
                message.task_id, message.consumed)
        elif kind is protocol.Reply or kind is protocol.GetReply:
            self.core.on_reply(message, buffers)
        elif kind is protocol.Function:
            self.blobs[message.key] = message.blob
        elif kind is protocol.CreateActor:
            # Calls go to a concurrent actor's executor now (they wait for the constructor).
            self.actor = executors.ActorHost(self, message)
            self.assignment = message.assignment
            self.exec_queue.put((message, buffers))
        elif kind is protocol.Cancel:
            self.on_cancel(message.task_id, message.force)
        elif kind is protocol.Init:
            self.on_init(message)
        elif kind is protocol.Exit:
            self.graceful_exit = message.graceful
            self.exec_queue.put(None)
            # A graceful end runs the actor's __ray_shutdown__, which may put, get or call:
            # the helper goes on reading their replies until the process leaves.
            return message.graceful
        return True

    def receive(self):
        """Read and act on the next message (the caller holds the read role); False after
        Exit. The driver gone: nobody can receive results any more, the process ends."""
        try:
            body, buffers = self.channel.recv()
            return self.route(protocol.worker_decoder.decode(body), buffers)
        except ChannelClosed:
            pass
        except BaseException:  # pragma: no cover - a reading thread must never die silently
            traceback.print_exc()
        executors.end_process(1)

    def reader(self):
        """The helper: reads while the main thread runs work (see :mod:`.worker_reading`)."""
        flushes_before_blocking()
        self.role.serve(self.channel, self.receive)

    def on_init(self, message):
        if message.version != protocol.VERSION:
            sys.stderr.write(f"ray-adapter worker: protocol version {message.version} from the "
                             f"driver, this worker speaks {protocol.VERSION}\n")
            executors.end_process(protocol.VERSION_MISMATCH_EXIT_CODE)
        self.job_id, self.node_id, self.worker_id = message.job_id, message.node_id, message.worker_id
        self.id_salt = message.id_salt
        if message.code_path:  # an attached driver's job: its code, as Ray's job workers get it
            sys.path[:0] = [p for p in message.code_path.split(os.pathsep) if p and p not in sys.path]
        if message.main_module:
            os.environ[MAIN_MODULE_ENV] = message.main_module
        self.namespace, self.node_ip = message.namespace, message.node_ip
        self.address = message.address
        if message.runtime_env:
            import pickle

            self.runtime_env = pickle.loads(message.runtime_env)
        if message.log_to_driver:
            relay = message.relay_output
            sys.stdout = executors.PrefixWriter(sys.stdout, self, 1 if relay else 0)
            sys.stderr = executors.PrefixWriter(sys.stderr, self, 2 if relay else 0)
        self.exec_queue.put((_SETUP_HOOK, None))  # ahead of every task: Init comes first
        self.send(protocol.Hello(protocol.VERSION, os.getpid()))

    def on_cancel(self, task_id, force):
        if self.actor is not None:  # actor calls are flagged, never interrupted (as in Ray)
            self.actor.cancel(task_id)
            return
        with self.start_lock:
            running = self.running_task == task_id
            queued = not running and task_id in self.queued
            if queued:  # pipelined behind the running task: answered now, never run
                self.queued.discard(task_id)
                self.skip.add(task_id)
            elif running:
                if force:  # under the lock: no next task starts in this dying process
                    executors.end_process(1)
                self.cancel_requested = task_id
            else:  # not arrived yet (cannot happen in order): answered when it comes up
                self.cancelled.add(task_id)
        if queued:
            self.answer_cancelled(task_id)
        elif running:
            signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)

    def on_release(self, task_id):
        """The driver takes back a task queued here (the running one blocked): dropped and
        answered with Released, unless it has started (then its TaskDone comes as usual)."""
        with self.start_lock:
            released = task_id in self.queued
            if released:
                self.queued.discard(task_id)
                self.skip.add(task_id)
        if released:
            self.budget.close(task_id)
            self.channel.send(protocol.encode(protocol.Released(task_id)))

    def _on_sigusr1(self, signum, frame):
        if self.cancel_requested is not None and self.cancel_requested == self.running_task:
            if self.sending or not self.interruptible:  # raised once the frame is written /
                # checked when the task's code starts
                return
            self.cancel_requested = None
            raise results.Cancelled()

    @contextlib.contextmanager
    def whole_frames(self):
        """Send from the main thread without a cancel's signal cutting a frame in two; a
        cancel that arrived meanwhile is raised after it."""
        self.sending = True
        try:
            yield
        finally:
            self.sending = False
        if self.cancel_requested is not None and self.cancel_requested == self.running_task:
            self.cancel_requested = None
            raise results.Cancelled()

    # -- main loop ---------------------------------------------------------------------------
    def run(self):
        signal.signal(signal.SIGUSR1, self._on_sigusr1)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        start_daemon(self.reader, "ray-adapter-reader")
        flushes_before_blocking()
        self.serve()
        flush_posted()
        results.flush_std()

    def serve(self):
        """The main loop: run the work queued for this thread, read the socket when idle."""
        queue_get, queue_empty = self.exec_queue.get, self.exec_queue.empty
        role = self.role
        while True:
            # The last result goes out before the next call runs (see worker_reading); idle, read.
            if queue_empty():
                idle = role.reclaim(wait=False)
                flush_posted()
                results.flush_std()  # a partial line of output shows when the work ends
                if idle or (idle is None and role.reclaim()):
                    while queue_empty():
                        if not self.receive():
                            return
                    # the helper reads while it runs (for good: a concurrent actor's calls)
                    role.start_work(self.channel.buffered(), self.actor is not None and self.actor.concurrent)
            flush_posted()
            self.channel.wait_written()  # also what the helper's flush took (the next call may exit)
            item = queue_get()
            if item is None:
                return
            message, buffers = item
            kind = type(message)
            if kind is protocol.RunTask:
                self.run_task(message, buffers)
            elif message is _SETUP_HOOK:
                self.run_setup_hook()
            elif kind is protocol.CallActor:
                self.actor.run_call(message, buffers, in_main_thread=True)
            elif kind is protocol.CreateActor:
                self.actor.create(message, buffers)
            del item, message, buffers

    @staticmethod
    def run_setup_hook():
        """The runtime env's ``worker_process_setup_hook``, once, before any task (as Ray's
        workers run it at start); a failing hook ends the worker, saying why."""
        from ray_adapter.core.runtime_env import run_setup_hook

        failure = run_setup_hook(os.environ)
        if failure is not None:
            sys.stderr.write(failure)
            executors.end_process(1)

    def load(self, key):
        fn = self.functions.get(key)
        if fn is None:
            blob = self.blobs.get(key)
            if blob is None:
                raise errors.CoreError(f"function {key.hex()} was never registered with this worker")
            fn = self.functions[key] = results.loads_plain(blob)
        return fn

    def run_task(self, message, buffers):
        task_id, name, num_returns = message.task_id, message.name, message.num_returns
        with self.start_lock:
            self.queued.discard(task_id)
            skipped = task_id in self.skip
            self.skip.discard(task_id)
            early = not skipped and task_id in self.cancelled
            self.cancelled.discard(task_id)
            if not skipped and not early:
                self.running_task = task_id  # a Cancel from now on interrupts it
        if skipped:  # cancelled or released while queued: already answered
            return
        if early:
            self.answer_cancelled(task_id)
            return
        self.assigned_resources, self.gpu_ids = message.resources, message.gpu_ids
        self.assignment = message.assignment
        saved_env = apply_env(with_thread_default(message.env, message.resources))
        sync_torch_threads()
        token = current_call.set((task_id, name, None))
        function_token = current_function.set(self.descriptors.get(message.key, ""))
        retryable = False
        try:
            try:
                self.interruptible = True
                if self.cancel_requested == task_id:  # arrived before the task's code began
                    raise results.Cancelled()
                fn = self.load(message.key)
                if message.key not in self.descriptors:
                    self.descriptors[message.key] = function_descriptor(fn)
                    current_function.set(self.descriptors[message.key])
                args, kwargs = results.resolve_args(message.args, message.deps, buffers)
                result = fn(*args, **kwargs)
                if message.streaming:  # its items go out as it yields (a cancel interrupts it)
                    reply = streaming.produce(self, task_id, name, result, self.budget)
            finally:
                self.interruptible = False
                with self.start_lock:  # from here a force cancel no longer kills: it ended
                    self.running_task = None
                self.cancel_requested = None
                if message.streaming:
                    self.budget.close(task_id)
            if not message.streaming:
                reply = results.pack_results(
                    result, num_returns, results.from_generator_function(result, fn), name)
        except (results.Cancelled, KeyboardInterrupt) as exc:
            # Interrupted while running: Ray reports RayTaskError(TaskCancelledError).
            reply = results.pack_error(cancelled_failure(task_id, name, exc=exc))
        except SystemExit as exc:
            # sys.exit() in a task ends its worker, as in Ray: the driver sees the worker die
            # and retries the task (WorkerCrashedError once retries run out).
            code = exit_status(exc)
            executors.leaving(self, code)
            executors.end_process(code)
        except results.ArgumentFailed as exc:
            # An argument that cannot be rebuilt: as in Ray, the task fails, not retried.
            reply = results.pack_error(argument_failure(exc.inner, name))
        except BaseException as exc:  # noqa: BLE001 - everything a task raises goes to the caller
            retryable = results.should_retry(exc, message.retry_exceptions)
            reply = results.pack_error(task_failure(exc, name, None))
        finally:
            current_function.reset(function_token)
            current_call.reset(token)
            restore_env(saved_env)
        self.send_done(task_id, reply, retryable)

    def answer_cancelled(self, task_id):
        """Task ``task_id`` never ran: it is answered as cancelled (from any thread)."""
        self.budget.close(task_id)
        self.send_done(task_id, results.pack_error(errors.TaskCancelled(task_id)))

    def send_done(self, task_id, reply, retryable=False):
        ok, results, buffers = reply
        self.post(protocol.TaskDone(task_id, ok, results, retryable), buffers)

    def exit_actor(self, task_id, reply):
        """``exit_actor()`` was called by call ``task_id``: tell the driver first (so no later
        call is sent here), answer the call, then leave."""
        self.post(protocol.ActorExiting(self.actor_id, by_exit_actor=self.exit_by_call))
        self.send_done(task_id, reply)
        self.leave()

    def leave(self):
        """End this actor's process gracefully (after ``exit_actor()``, ``__ray_terminate__``,
        or when it went out of scope): what was posted goes out, the actor's
        ``__ray_shutdown__`` and then the ``atexit`` handlers run, and the process exits with 0.
        Does not return."""
        flush_posted()
        if self.actor is not None:
            self.actor.shut_down()
        run_exit_handlers()
        executors.end_process(0)


_SETUP_HOOK = object()  # the exec-queue item that runs the setup hook


def run_exit_handlers():
    """Run the process's ``atexit`` handlers now: an actor that leaves gracefully
    (``exit_actor()``, ``__ray_terminate__``) runs them in Ray, whose worker then exits through
    Python's normal shutdown; ``ray.kill`` does not. A failing handler is reported on stderr by
    ``atexit`` itself and does not stop the exit."""
    import atexit

    try:
        atexit._run_exitfuncs()
    except Exception:  # noqa: BLE001 - the process leaves anyway
        pass
    results.flush_std()


def main(argv=None):
    unblock_signals()  # started (or its template) by any thread of the driver
    argv = sys.argv[1:] if argv is None else argv
    fd = int(argv[0])
    # Functions that reference ``ray`` unpickle here: the proxy, even where .pth files are skipped.
    os.environ["RAY_BACKEND"] = "yuanrong"
    from ray_adapter import hook
    from ray_adapter.core import set_current

    hook.install()
    become_subreaper()
    shm.raise_fd_limit()
    write_posts_at_once()
    worker = Worker(fd)
    os.register_at_fork(after_in_child=worker.after_fork_in_child)
    set_current(worker.core)
    import ray  # noqa: F401  - warm the proxy so the first task does not pay for it

    worker.run()
    if worker.graceful_exit:
        worker.leave()
    executors.end_process(0)


if __name__ == "__main__":
    main()
