"""What the task manager keeps per task: its state (:class:`TaskState`), what its options mean
to the runtime (:class:`TaskShape`, worked out once per options object) and its record
(:class:`TaskRecord`). Records are changed under ``TaskManager._lock`` only."""
import enum

from ray_adapter.core.embedded.resources import to_units
from ray_adapter.core.embedded.task_support import retry_blob


class TaskState(enum.Enum):
    WAITING = "waiting"    # for its arguments
    QUEUED = "queued"      # for resources
    STARTING = "starting"  # granted; a worker is being found
    RUNNING = "running"
    PREFETCHED = "prefetched"  # sent behind a running task on its worker (see task_pipeline)
    FINISHED = "finished"


class TaskShape:
    """What a task's options mean to the runtime, worked out once per options object (remote
    functions keep theirs): resource units, the scheduler's shape key, the amounts a worker
    reports, the retry classes as the worker reads them, the env vars."""

    __slots__ = ("units", "shape", "amounts", "retry_blob", "env")

    def __init__(self, options):
        self.units = {k: to_units(v) for k, v in options.resources.items() if v}
        self.shape = tuple(sorted(self.units.items()))
        self.amounts = {k: float(v) for k, v in options.resources.items() if v}
        self.retry_blob = retry_blob(options.retry_exceptions)
        self.env = dict((options.runtime_env or {}).get("env_vars") or {})

    @staticmethod
    def of(options):
        shape = getattr(options, "_embedded_shape", None)
        if shape is None:
            shape = TaskShape(options)
            options._embedded_shape = shape
        return shape


class TaskRecord:
    __slots__ = ("task_id", "key", "args", "deps", "carried", "options", "return_ids",
                 "retries_left", "units", "state", "cancelled", "demand", "grant", "worker",
                 "waiter", "retry_blob", "shape", "streaming", "owner", "parent", "started",
                 "cancel_children", "evicted")

    def __init__(self, task_id, key, args, deps, carried, options, return_ids):
        self.task_id = task_id
        self.key = key
        self.args = args                # Serialized (top-level refs as ArgRef placeholders)
        self.deps = deps                # ids of the top-level ref arguments, in order
        self.carried = carried          # ids of actors whose handles travel in the arguments
        self.options = options
        self.return_ids = return_ids
        self.retries_left = options.max_retries
        self.shape = TaskShape.of(options)
        self.units = self.shape.units
        self.state = TaskState.WAITING
        self.cancelled = False
        self.demand = None
        self.grant = None
        self.worker = None
        self.waiter = None
        self.retry_blob = self.shape.retry_blob
        self.streaming = options.generator == "streaming"
        self.owner = None               # the worker that submitted it (None: the driver)
        self.parent = None              # the id of the task that submitted it (None: none known)
        self.cancel_children = False    # cancelled recursively: a task it submits now is too
        self.evicted = False            # its placement group was removed while it ran
        self.started = 0.0              # time.monotonic() it was sent to run (or passed a lease)
