"""The actor manager's records: an actor's state and its queued and in-flight calls.

Plain data, guarded by :class:`~ray_adapter.core.embedded.actors.ActorManager`'s lock.
"""
import collections
import enum
import pickle
import sys
import time

from ray_adapter.core import serialization
from ray_adapter.core.embedded.resources import to_units
from ray_adapter.core.embedded.task_support import retry_blob
from ray_adapter.core.interface import ActorInfo, SerializedMeta


class ActorState(enum.Enum):
    DEPENDENCIES_UNREADY = "DEPENDENCIES_UNREADY"
    PENDING_CREATION = "PENDING_CREATION"
    ALIVE = "ALIVE"
    RESTARTING = "RESTARTING"
    DEAD = "DEAD"


class PendingCalls:
    """An actor's queued calls in arrival order, and how many each caller has queued (so that a
    flush stops scanning once every caller with queued calls waits for arguments). A deque's
    methods; guarded by the actor manager's lock."""

    __slots__ = ("_calls", "_callers")

    def __init__(self):
        self._calls = collections.deque()
        self._callers = {}  # caller -> its calls in the queue

    def _count(self, call, step):
        left = self._callers.get(call.caller, 0) + step
        if left:
            self._callers[call.caller] = left
        else:
            self._callers.pop(call.caller, None)

    def append(self, call):
        self._calls.append(call)
        self._count(call, 1)

    def appendleft(self, call):
        self._calls.appendleft(call)
        self._count(call, 1)

    def popleft(self):
        call = self._calls.popleft()
        self._count(call, -1)
        return call

    def remove(self, call):
        self._calls.remove(call)
        self._count(call, -1)

    def clear(self):
        self._calls.clear()
        self._callers.clear()

    def put_back(self, calls):
        """``calls`` (taken with :meth:`popleft`) back at the front, in their order."""
        for call in reversed(calls):
            self.appendleft(call)

    def only_callers_in(self, callers):
        """True when every call in the queue is of one of ``callers`` (a set)."""
        return all(caller in callers for caller in self._callers)

    def __contains__(self, call):
        return call in self._calls

    def __iter__(self):
        return iter(self._calls)

    def __len__(self):
        return len(self._calls)


#: Calls sent ahead to one actor's worker at most (more when the actor runs more at once, see
#: :func:`call_window`); the rest wait in the driver's queue, so the worker's socket and its
#: own queue stay bounded while ``.remote()`` never blocks.
CALL_WINDOW = 512


def call_window(options):
    """How many calls one actor's worker is sent ahead: :data:`CALL_WINDOW`, or twice what it
    may run at once if that is more. Either way more than it can start before the calls ahead
    finish, so the window never holds back a call Ray would have started. An actor with
    concurrency groups has none: a call of one group queued behind a full window of another
    group's calls would wait, where Ray runs it on its own group's executor."""
    if options.concurrency_groups:
        return sys.maxsize
    at_once = options.max_concurrency or (1000 if options.is_async else 1)
    return max(CALL_WINDOW, 2 * at_once)


class ActorRecord:
    __slots__ = ("actor_id", "key", "args", "deps", "carried", "options", "units", "state",
                 "worker", "grant", "pending", "inflight", "restarts_left", "num_restarts",
                 "death", "kill_restart", "meta_blob", "env_blob", "scope", "unfinished", "window",
                 "last_process", "times")

    def __init__(self, actor_id, key, args, deps, carried, options):
        self.actor_id = actor_id
        self.key = key
        self.args = args
        self.deps = deps
        self.carried = carried
        self.options = options
        self.units = {k: to_units(v) for k, v in options.resources.items() if v}
        self.state = ActorState.DEPENDENCIES_UNREADY
        #: [registered, first alive, dead, last state change] (seconds since the epoch; None:
        #: not yet), for Ray's actor table (``ray._private.state.actors()``)
        now = time.time()
        self.times = [now, None, None, now]
        self.worker = None
        self.last_process = None  # (pid, node) of the process it had, once dead (State API)
        self.grant = None
        self.pending = PendingCalls()
        self.inflight = {}
        self.window = call_window(options)
        self.restarts_left = options.max_restarts
        self.num_restarts = 0
        self.death = None
        self.kill_restart = False  # the next process exit is ray.kill(no_restart=False)
        # cloudpickle: method options (retry_exceptions) may name classes of the driver's __main__
        meta = options.handle_meta  # a worker's creation: already serialized, never opened here
        self.meta_blob = bytes(meta) if isinstance(meta, SerializedMeta) else serialization.dumps_plain(meta)
        self.env_blob = pickle.dumps(options.runtime_env or {})
        self.scope = None
        self.unfinished = {}  # caller (a worker handle; None: the driver) -> its unfinished calls

    def info(self):
        o = self.options
        return ActorInfo(self.actor_id, o.name, o.namespace, o.class_name, o.handle_meta, self.state.value)


class CallRecord:
    __slots__ = ("task_id", "actor", "method", "args", "deps", "carried", "num_returns", "name",
                 "return_ids", "retries_left", "waiting", "streaming", "backpressure", "group",
                 "retry_blob", "caller", "counted", "cancel_requested")

    def __init__(self, task_id, actor, method, args, deps, carried, options, return_ids, caller):
        self.task_id = task_id
        self.actor = actor
        self.method = method
        self.args = args
        self.deps = deps
        self.carried = carried
        self.num_returns = options.num_returns
        self.name = options.name or method
        self.return_ids = return_ids
        if options.max_task_retries is not None:
            self.retries_left = options.max_task_retries
        else:
            self.retries_left = actor.options.max_task_retries if actor is not None else 0
        self.waiting = False  # a callback waits for its arguments (it heads the queue)
        self.streaming = options.generator == "streaming"
        self.backpressure = options.generator_backpressure
        self.group = options.concurrency_group or ""
        self.retry_blob = retry_blob(options.retry_exceptions)
        self.caller = caller      # who submitted it (max_pending_calls is per caller)
        self.counted = False      # counted in its actor's ``unfinished`` until it finishes
        self.cancel_requested = False  # a cancel was sent to the worker running it


