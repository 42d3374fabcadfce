"""The driver's side of a compiled graph on pipes: :meth:`GraphChannels.start` sets the pipes
up and starts the actors' loops (:mod:`._compiled_loop`) once; then :meth:`~GraphChannels.submit`
writes an execution's input to the pipes of the actors that read it and
:meth:`~GraphChannels.result` reads the graph's outputs -- on the calling thread, no runtime and
no other thread in between: a step costs the pipe hops along the graph and the methods' own
time.

Threads. ``_submit_lock`` is held by the thread writing an execution's input: the input pipes'
writers belong to it, and executions are numbered in the order they are written. ``_lock``
(with the condition ``_changed``) owns the received results, the counters and the state; it is
never held across a pipe read or write. An output pipe is read by one thread at a time, the one
that marked it ``busy`` under ``_lock``; the others wait on ``_changed`` for what it receives, so
every wait has an owner that wakes it, and a pipe's end (an actor died, the teardown) wakes all.

Results nobody will read. A ``CompiledDAGRef`` dropped unread (its ``__del__``, in any thread, at
any point: perhaps while that thread holds ``_lock``) only queues its output (:meth:`drop`, a
deque append); the queue is applied under ``_lock`` by the next submission or read: a result
already received is let go, one still to come is let go as it arrives, and an execution all of
whose outputs were dropped gives its place back -- as Ray's does, so a loop that never reads its
results keeps running: a submission that finds the graph full reads the oldest such
execution's outputs first.
"""
import collections
import threading
import time

from ray_adapter.core import pipes
from ray_adapter.core.execution import task_failure
from ray_adapter.ray._private.core_access import core as _ensure_core
from ray_adapter.ray._private.core_access import started
from ray_adapter.ray._private.core_access import translated
from ray_adapter.ray.dag._compiled_loop import FAILURE_FRAME, INPUT_FRAME, open_loop
from ray_adapter.ray.exceptions import RayCgraphCapacityExceeded, RayChannelError, RayChannelTimeoutError

#: How long (seconds) the driver asks an actor whether it is alive after a pipe ended.
_PROBE_S = 5.0


class _OutputPipe:
    """One pipe the driver reads outputs on: its reader, whether a thread is reading it, and
    how many frames of each node came (their executions' numbers)."""

    __slots__ = ("reader", "busy", "received", "orphaned")

    def __init__(self, reader, tags):
        self.reader = reader
        self.busy = False
        self.received = dict.fromkeys(tags, 0)
        self.orphaned = False  # torn down while a caller read it: that caller closes it


class GraphChannels:
    """A compiled graph running on pipes (see the module's docstring). Made by :meth:`start`."""

    def __init__(self, graph, writers, outputs, max_inflight, timeout_message):
        self._graph = graph
        self._writers = writers
        self._outputs = outputs  # node index -> its _OutputPipe
        self._wanted = {}  # node index -> how many of the graph's outputs it is
        for index in graph.outputs:
            self._wanted[index] = self._wanted.get(index, 0) + 1
        self._max_inflight = max_inflight
        self._timeout_message = timeout_message
        self._submit_lock = threading.Lock()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._submitted = 0
        self._results = {}  # (execution, node index) -> [frame kind, value, gets left]
        self._dropped = collections.deque()  # (execution, output position) dropped unread
        self._discard = {}  # (execution, node index) -> its outputs dropped before it came
        self._failure = None  # what ends every execution not received: a core error or exception
        self._closed = False

    # -- set-up ----------------------------------------------------------------------------
    @classmethod
    def start(cls, graph, max_inflight, timeout_message):
        """Set up ``graph`` (a :class:`~._compiled_plan.GraphPlan`): make its pipes, start each
        actor's loop, open the driver's ends. Returns the :class:`GraphChannels`, or None when
        the pipes cannot carry it (no FIFOs here, an actor on another machine, an async or
        generator method): the caller runs the graph on the classic path. Raises what
        ``ray.get`` of an actor call raises (a dead actor: ``ActorDiedError``)."""
        try:
            pipe_dir = pipes.PipeDir(graph.pipe_names())
        except OSError:
            return None
        opened = []
        try:
            proof = pipe_dir.proof()
            for plan in graph.actors.values():
                reads, writes = plan.pipes()
                plan.paths = {name: pipe_dir.paths[name] for name in reads + writes}
                plan.proof = proof
            calls = [graph.handles[actor_id].__ray_call__.remote(open_loop, plan)
                     for actor_id, plan in graph.actors.items()]
            core = _ensure_core()
            with translated:
                reasons = core.get([ref._id for ref in calls], None)
            if any(reasons):
                return None  # the loops that started see their pipes end at release()
            writers = [pipes.open_writer(pipe_dir.paths[name]) for name in graph.input_pipes]
            opened.extend(writers)
            by_pipe = {}
            for index, name in graph.output_pipes.items():
                by_pipe.setdefault(name, []).append(index)
            outputs = {}
            for name, tags in by_pipe.items():
                output = _OutputPipe(pipes.open_reader(pipe_dir.paths[name]), tags)
                opened.append(output.reader)
                outputs.update(dict.fromkeys(tags, output))
            opened.clear()
            return cls(graph, writers, outputs, max_inflight, timeout_message)
        finally:
            for end in opened:
                end.close()
            pipe_dir.release()

    # -- executions --------------------------------------------------------------------------
    def submit(self, args, kwargs, timeout=None):
        """Write one execution's input (never blocking: see ``pipes.FrameWriter``); returns its
        number. With ``max_inflight`` executions not yet received, first reads those of the
        oldest whose outputs were all dropped unread (waiting at most ``timeout`` seconds, None:
        forever). Raises ``RayChannelError`` once the graph ended, ``RayCgraphCapacityExceeded``
        with ``max_inflight`` executions not yet received that someone may still read,
        ``RayChannelTimeoutError`` when reading a dropped one runs out of time, and what
        pickling the input raises."""
        parts = pipes.encode((tuple(args), dict(kwargs)))
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._submit_lock:
            with self._lock:
                self._apply_drops()
                while True:
                    if self._closed or self._failure is not None:
                        raise RayChannelError("Channel closed.")
                    inflight = self._submitted - self._received()
                    if inflight < self._max_inflight:
                        break
                    if not self._release_oldest(deadline):
                        raise RayCgraphCapacityExceeded(
                            f"The compiled graph can't have more than {self._max_inflight} in-flight "
                            f"executions, and you currently have {inflight} in-flight executions. "
                            "Retrieve an output using ray.get before submitting more requests or "
                            "increase `_max_inflight_executions`. "
                            "`dag.experimental_compile(_max_inflight_executions=...)`")
                index = self._submitted
                self._submitted += 1  # a failed write below ends the graph: the number is spent
            try:
                for writer in self._writers:
                    writer.write(INPUT_FRAME, index & 0xFFFFFFFF, parts)
            except pipes.PipeClosed:
                self._ended()
                raise RayChannelError("Channel closed.") from None
            return index

    def _received(self):
        """How many executions all outputs came for (under ``_lock``)."""
        return min(pipe.received[tag] for tag, pipe in self._outputs.items())

    def drop(self, execution, position):
        """Output ``position`` of ``execution`` will never be read (its ref was dropped unread).
        Any thread, at any point (a ``__del__``): only queued, applied under ``_lock``."""
        self._dropped.append((execution, position))

    def _apply_drops(self):
        """Let go of the results dropped so far (under ``_lock``)."""
        while self._dropped:
            execution, position = self._dropped.popleft()
            tag = self._graph.outputs[position]
            key = (execution, tag)
            entry = self._results.get(key)
            if entry is not None:
                entry[2] -= 1
                if not entry[2]:
                    del self._results[key]
            elif self._outputs[tag].received[tag] <= execution:  # still to come
                self._discard[key] = self._discard.get(key, 0) + 1

    def _release_oldest(self, deadline):
        """Under ``_lock``: when every output of the oldest execution not yet received was
        dropped, read them (they are let go as they come) and return True; else False."""
        oldest = self._received()
        waiting = [tag for tag, pipe in self._outputs.items() if pipe.received[tag] <= oldest]
        if any(self._discard.get((oldest, tag), 0) < self._wanted[tag] for tag in waiting):
            return False
        for tag in waiting:
            failure = self._receive(tag, oldest, deadline, (
                "Releasing native buffers corresponding to a stale CompiledDAGRef is taking a "
                "long time. " + self._timeout_message))
            if failure is not None:
                raise failure
        return True

    def result(self, execution, position, timeout):
        """The value of output ``position`` of ``execution``, waiting at most ``timeout``
        seconds (None: forever). Raises what the node raised (``RayTaskError``), the actor's
        death (``ActorDiedError``), ``RayChannelTimeoutError`` when the wait runs out,
        ``RayChannelError`` when the graph ended before the output came."""
        tag = self._graph.outputs[position]
        key = (execution, tag)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._apply_drops()
            failure = self._receive(tag, execution, deadline, self._timeout_message)
            if failure is None:
                entry = self._results[key]
                entry[2] -= 1
                if not entry[2]:
                    del self._results[key]
        if failure is not None:
            raise failure
        if entry[0] == FAILURE_FRAME:
            with translated:
                raise entry[1]
        return entry[1]

    def _receive(self, tag, execution, deadline, timeout_message):
        """Under ``_lock``: until output node ``tag``'s frame of ``execution`` came, read its
        pipe (marking it busy, without ``_lock``) or wait for the thread reading it. Returns
        None, or the failure that ended the graph first; raises ``RayChannelTimeoutError``
        once ``deadline`` (monotonic seconds, None: never) passed."""
        pipe = self._outputs[tag]
        last_try = False  # once the time is up, what the pipe already holds is still taken
        while pipe.received[tag] <= execution:
            if self._failure is not None:
                return self._failure
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                if last_try or pipe.busy:
                    raise RayChannelTimeoutError(timeout_message)
                last_try, left = True, 0
            if pipe.busy:
                self._changed.wait(left)
                continue
            pipe.busy = True
            self._lock.release()
            try:
                frame = self._read(pipe, left)
            finally:
                self._lock.acquire()
                pipe.busy = False
                if pipe.orphaned:
                    pipe.reader.close()
                self._changed.notify_all()
            if frame is not None:
                kind, node, value = frame
                number = pipe.received[node]
                pipe.received[node] = number + 1
                self._apply_drops()  # a ref dropped while the frame was read
                wanted = self._wanted[node] - self._discard.pop((number, node), 0)
                if wanted > 0:
                    self._results[(number, node)] = [kind, value, wanted]
        return None

    def _read(self, pipe, timeout):
        """The next frame of ``pipe`` as ``(kind, node, value)``; None when none came in
        ``timeout`` seconds or the pipe ended (then ``_failure`` is set). Called by the thread
        that marked the pipe busy, without ``_lock``."""
        try:
            if not pipe.reader.wait(timeout):
                return None
            return pipe.reader.read()
        except pipes.FrameUndecodable as bad:
            return FAILURE_FRAME, bad.tag, task_failure(bad.cause, "CompiledDAG.get", None)
        except (pipes.PipeClosed, OSError):
            self._ended()
            return None

    def _ended(self):
        """A pipe ended: find why (an actor that died, asked through the runtime) and end every
        execution not yet received with it."""
        with self._lock:
            if self._failure is not None:
                return
            closing = self._closed
        failure = RayChannelError("Channel closed.")
        if not closing and started():  # after ray.shutdown() there is nothing to ask
            core = _ensure_core()
            for handle in self._graph.handles.values():
                try:
                    probe = handle.__ray_ready__.remote()  # held: its value must outlive the get
                    with translated:
                        core.get([probe._id], _PROBE_S)
                except Exception as exc:  # noqa: BLE001 - the actor's death, as Ray raises it
                    failure = exc
                    break
        with self._lock:
            if self._failure is None:
                self._failure = failure
            self._changed.notify_all()

    # -- the end -----------------------------------------------------------------------------
    def teardown(self, timeout):
        """End the actors' loops: close the input pipes and wait, at most ``timeout`` seconds,
        for the outputs to end after them; later executions raise ``RayChannelError``."""
        with self._submit_lock:
            with self._lock:
                self._closed = True
            for writer in self._writers:
                writer.close()
        deadline = time.monotonic() + timeout
        for pipe in set(self._outputs.values()):
            with self._lock:
                while pipe.busy and time.monotonic() < deadline:
                    self._changed.wait(max(0.0, deadline - time.monotonic()))
                if pipe.busy:
                    pipe.orphaned = True  # a caller still reads it: it closes it after
                    continue
                pipe.busy = True
            try:
                while True:  # what is still on its way is dropped, up to the pipe's end
                    left = deadline - time.monotonic()
                    if left <= 0 or not pipe.reader.wait(left):
                        break
                    try:
                        pipe.reader.read()
                    except pipes.FrameUndecodable:
                        pass
            except (pipes.PipeClosed, OSError):
                pass
            finally:
                pipe.reader.close()
                with self._lock:
                    if self._failure is None:
                        self._failure = RayChannelError("Channel closed.")
                    pipe.busy = False
                    self._changed.notify_all()

    def close_now(self):
        """Close the driver's ends without waiting (the graph object is gone): the loops end."""
        for writer in self._writers:
            writer.close()
        for pipe in set(self._outputs.values()):
            if not pipe.busy:
                pipe.reader.close()

