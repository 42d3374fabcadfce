"""The actor manager's records: an actor's state and its queued and in-flight calls.

Plain data, guarded by :class:`~ray_adapter.core.embedded.actors.ActorManager`'s lock.
"""
import collections
import enum
import pickle

from ray_adapter.core import serialization
from ray_adapter.core.embedded.resources import to_units
from ray_adapter.core.embedded.task_support import retry_blob
from ray_adapter.core.interface import ActorInfo


class ActorState(enum.Enum):
    DEPENDENCIES_UNREADY = "DEPENDENCIES_UNREADY"
    PENDING_CREATION = "PENDING_CREATION"
    ALIVE = "ALIVE"
    RESTARTING = "RESTARTING"
    DEAD = "DEAD"


class ActorRecord:
    __slots__ = ("actor_id", "key", "args", "deps", "carried", "options", "units", "state",
                 "worker", "grant", "pending", "inflight", "restarts_left", "num_restarts",
                 "death", "kill_restart", "meta_blob", "env_blob", "scope", "unfinished")

    def __init__(self, actor_id, key, args, deps, carried, options):
        self.actor_id = actor_id
        self.key = key
        self.args = args
        self.deps = deps
        self.carried = carried
        self.options = options
        self.units = {k: to_units(v) for k, v in options.resources.items() if v}
        self.state = ActorState.DEPENDENCIES_UNREADY
        self.worker = None
        self.grant = None
        self.pending = collections.deque()
        self.inflight = {}
        self.restarts_left = options.max_restarts
        self.num_restarts = 0
        self.death = None
        self.kill_restart = False  # the next process exit is ray.kill(no_restart=False)
        # cloudpickle: method options (retry_exceptions) may name classes of the driver's __main__
        self.meta_blob = serialization.dumps_plain(options.handle_meta)
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


