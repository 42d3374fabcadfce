"""The actor's side of a compiled graph: :func:`open_loop` runs in the actor (through
``__ray_call__``, once, at compile time), opens the actor's pipes and starts a thread that runs
the actor's nodes of the graph for every execution until its input ends.

Per execution the thread runs the actor's steps in graph order: it reads the execution's input
when a step first needs it, and a result of another actor's node when a step first needs it
(frames of other nodes met meanwhile on the same pipe are kept for the steps that need them),
calls the method, and writes the result to each pipe it goes to. A method that raises sends
its failure instead -- Ray's ``RayTaskError`` of the task ``<Class>.__ray_call__``, as Ray's
compiled graphs report it -- and the steps that take it pass that failure on without running,
so the driver's ``ray.get`` raises it; the next execution runs as usual.

End: when a pipe it reads ends (the driver's ``teardown``, the driver gone, or an upstream
actor died) the thread closes its own pipes, so the end travels downstream to the driver, and
returns. Threads: one per compiled graph per actor, named ``ray-adapter-cgraph``; like Ray's
compiled-graph loop it runs beside the actor's other calls, which keep working meanwhile.
"""
import inspect
import threading

from ray_adapter.core import pipes, serialization, shm
from ray_adapter.core.execution import actor_method, task_failure
from ray_adapter.ray.dag._compiled_plan import ATTRIBUTE, CONST, INPUT, NODE

#: Frame kinds: an execution's input ``(args, kwargs)``, a node's result, a node's failure
#: (a core ``TaskFailed``).
INPUT_FRAME, RESULT_FRAME, FAILURE_FRAME = range(3)


class Failed:
    """A node's failure on its way through the graph: ``error`` is the core error."""

    __slots__ = ("error",)

    def __init__(self, error):
        self.error = error


def failure_parts(error):
    """The frame parts of a core error (a user exception that cannot travel replaced by its
    text, as on the classic path)."""
    ser = serialization.dumps_error(error)
    return ser.data, [shm.as_buffer(b) for b in ser.buffers]


def _unsupported(method):
    fn = inspect.unwrap(getattr(method, "__func__", method))
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        return "an async method"
    if inspect.isgeneratorfunction(fn):
        return "a generator method"
    return None


def open_loop(instance, plan):
    """Run in the actor by ``__ray_call__``: open the pipes of ``plan`` (an
    :class:`~._compiled_plan.ActorPlan`) and start its thread. Returns None, or why this actor
    cannot take part (another machine, an async or generator method): the driver then runs the
    graph on the classic path."""
    if not pipes.same_machine(plan.proof):
        return "the actor runs on another machine"
    methods = {}
    for step in plan.steps:
        try:
            method = actor_method(instance, step[1])
        except AttributeError:
            return f"the actor has no method {step[1]!r}"
        reason = _unsupported(method)
        if reason is not None:
            return f"{step[1]!r} is {reason}"
        methods[step[1]] = method
    reads, writes = plan.pipes()
    opened = []
    try:
        readers = {}
        for name in reads:
            readers[name] = pipes.open_reader(plan.paths[name])
            opened.append(readers[name])
        writers = {}
        for name in writes:
            writers[name] = pipes.open_writer(plan.paths[name])
            opened.append(writers[name])
    except OSError as exc:
        for end in opened:
            end.close()
        return f"its pipes could not be opened ({exc})"
    loop = _ActorLoop(plan, methods, readers, writers)
    threading.Thread(target=loop.run, name="ray-adapter-cgraph", daemon=True).start()
    return None


_UNREAD = object()


class _ActorLoop:
    """One actor's part of one compiled graph; all its state belongs to its thread."""

    def __init__(self, plan, methods, readers, writers):
        self._ends = list(readers.values()) + list(writers.values())
        # Each step with its method bound and its pipes' writers at hand: the loop looks
        # nothing up per execution.
        self._steps = [(index, methods[name], args, kwargs, [writers[p] for p in sends])
                       for index, name, args, kwargs, sends in plan.steps]
        self._input = readers.get(plan.input_pipe)
        self._sources = {index: readers[pipe] for index, pipe in plan.sources.items()}
        self._values = {}  # node index -> result (or Failed), the running execution's
        self._given = _UNREAD  # the running execution's ``(args, kwargs)``, read when first needed
        # Ray's compiled graphs report a failure as one of ``__ray_call__`` (the call that
        # runs the loop), its header without the actor's id and repr.
        self._name = f"{plan.class_name}.__ray_call__"

    def run(self):
        try:
            while True:
                self._execute_once()
        except pipes.PipeClosed:
            pass
        finally:
            for end in self._ends:
                end.close()

    def _execute_once(self):
        self._values = values = {}
        self._given = _UNREAD
        value_of = self._value
        for index, method, arg_sources, kwarg_sources, writers in self._steps:
            failed = None
            try:
                args = [value_of(src) for src in arg_sources]
                kwargs = {k: value_of(src) for k, src in kwarg_sources.items()} if kwarg_sources else {}
            except pipes.PipeClosed:
                raise
            except Exception as exc:  # noqa: BLE001 - an input attribute that is not there
                failed = Failed(task_failure(exc, self._name))
            else:
                for value in args:
                    if type(value) is Failed:
                        failed = value
                        break
                else:
                    for value in kwargs.values():
                        if type(value) is Failed:
                            failed = value
                            break
            if failed is None:
                try:
                    values[index] = result = method(*args, **kwargs)
                except Exception as exc:  # noqa: BLE001 - the user's failure goes to the driver
                    values[index] = result = Failed(task_failure(exc, self._name))
            else:
                values[index] = result = failed
            if writers:
                self._send(index, result, writers)

    def _value(self, src):
        """The value of one argument source (see :mod:`._compiled_plan`) in this execution."""
        kind = src[0]
        if kind == NODE:
            index = src[1]
            values = self._values
            while index not in values:
                kind_read, tag, value = self._read(self._sources[index])
                values[tag] = value if kind_read == RESULT_FRAME else Failed(value)
            return values[index]
        if kind == CONST:
            return src[1]
        if self._given is _UNREAD:
            kind_read, _, given = self._read(self._input)
            self._given = given if kind_read == INPUT_FRAME else Failed(given)
        if type(self._given) is Failed:
            return self._given
        args, kwargs = self._given  # as Ray's compiled graphs read the input (checked by execute)
        if kind == INPUT:
            return args[0]
        return args[src[1]] if isinstance(src[1], int) else kwargs[src[1]]

    def _read(self, reader):
        """The next frame of ``reader``; one that cannot be unpickled here comes as the failure
        of its node."""
        try:
            return reader.read()
        except pipes.FrameUndecodable as bad:
            return FAILURE_FRAME, bad.tag, task_failure(bad.cause, self._name)

    def _send(self, index, value, writers):
        if type(value) is Failed:
            kind, parts = FAILURE_FRAME, failure_parts(value.error)
        else:
            try:
                kind, parts = RESULT_FRAME, pipes.encode(value)
            except Exception as exc:  # noqa: BLE001 - a result that does not pickle
                kind, parts = FAILURE_FRAME, failure_parts(task_failure(exc, self._name))
        for writer in writers:
            writer.write(kind, index, parts)
