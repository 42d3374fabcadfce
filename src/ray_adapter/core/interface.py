"""The runtime-core interface: the one contract between the proxy ``ray`` package and a backend.

The proxy modules call only these methods; a backend (``embedded``, ``yuanrong``, or a third one
registered under the ``ray_adapter.backends`` entry-point group) implements them. Nothing here
mentions Ray's public classes: values are plain Python objects, ids are ``bytes``, failures are
:mod:`ray_adapter.core.errors`.

Units: CPU and GPU amounts are (fractional) counts, ``memory`` is bytes, timeouts are float
seconds (``None`` = wait forever).
"""
import abc
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Union


class ArgRef:
    """Marks a top-level task argument that is an object id: the backend resolves it to the
    object's value before the task runs (nested ids are passed through untouched)."""

    __slots__ = ("object_id",)

    def __init__(self, object_id):
        self.object_id = object_id

    def __reduce__(self):
        return ArgRef, (self.object_id,)


@dataclass
class TaskOptions:
    """Options of one task or actor-method invocation."""

    name: str = ""
    num_returns: int = 1
    resources: Dict[str, float] = field(default_factory=dict)  # {"CPU": 1.0, "GPU": 0.5, ...}
    max_retries: int = 3            # retries on worker death; -1 = forever
    max_calls: int = 0              # a worker runs at most this many calls of the function; 0 = no limit
    retry_exceptions: Any = False   # False, True, or a tuple of exception classes
    runtime_env: Optional[dict] = None
    scheduling: Optional[dict] = None
    # Streaming generators: "streaming" makes the call return one id (its completion) and its
    # items stream as it yields (see RuntimeCore.stream_next); ``generator_backpressure``: the
    # producer pauses while that many items are unconsumed (-1: never).
    generator: Optional[str] = None
    generator_backpressure: int = -1
    # Actor calls only: the concurrency group the call runs in (None: the default group), and
    # a per-method override of the actor's max_task_retries (None: the actor's).
    concurrency_group: Optional[str] = None
    max_task_retries: Optional[int] = None
    # Actor calls only: the actor bounds its pending calls (max_pending_calls), so a call over
    # the bound must be refused by the submission itself (PendingCallsLimit); a core that
    # sends calls without waiting for their acceptance waits for this one's.
    refused_at_submit: bool = False


class SerializedMeta(bytes):
    """An actor's handle metadata still serialized by the process that created the actor (a
    worker): the core passes it on unopened; the proxy that rebuilds a handle from it loads
    it (``ActorInfo.handle_meta`` / ``ActorOptions.handle_meta`` may be one)."""


@dataclass
class ActorOptions:
    """Options of one actor creation."""

    class_name: str = ""
    resources: Dict[str, float] = field(default_factory=dict)
    max_restarts: int = 0           # -1 = forever
    max_task_retries: int = 0       # -1 = forever
    max_concurrency: Optional[int] = None  # None: 1 for sync actors, 1000 for async actors
    is_async: bool = False
    name: Optional[str] = None
    namespace: Optional[str] = None
    get_if_exists: bool = False
    detached: bool = False
    runtime_env: Optional[dict] = None
    scheduling: Optional[dict] = None
    handle_meta: Any = None         # opaque to the core: what a caller needs to rebuild a handle
    #                                 (a SerializedMeta when a worker created the actor)
    concurrency_groups: Dict[str, int] = field(default_factory=dict)  # {group: max concurrent calls}
    max_pending_calls: int = -1     # calls a caller may have unfinished at once; -1 = no limit
    generator_backpressure: int = -1  # unconsumed stream items of all its calls before they pause
    owner_job: Optional[bytes] = None  # the attached driver's job it ends with (None: the runtime's)
    #: The worker process that created it (None: a driver): as Ray's owned actors, it dies
    #: with that process, whoever else holds a handle to it.
    owner_worker: Optional[bytes] = None
    #: What each of its method calls reports as required (the State API; not reserved): Ray's
    #: 1 CPU for an actor naming no resource, none for one that names any.
    method_resources: Dict[str, float] = field(default_factory=dict)


@dataclass
class InitOptions:
    """Options of ``start``."""

    num_cpus: Optional[float] = None
    num_gpus: Optional[float] = None
    memory: Optional[int] = None
    object_store_memory: Optional[int] = None
    resources: Dict[str, float] = field(default_factory=dict)
    namespace: Optional[str] = None
    runtime_env: Optional[dict] = None
    log_to_driver: bool = True
    address: Optional[str] = None
    labels: Dict[str, str] = field(default_factory=dict)
    #: Extra (virtual) nodes to start beside the head node (``ray.cluster_utils.Cluster``).
    nodes: List["NodeSpec"] = field(default_factory=list)
    #: The head node's id (hex), when the caller chose it (None: random).
    node_id: Optional[str] = None
    #: The loopback port application metrics are served at (None: a free one).
    metrics_export_port: Optional[int] = None
    #: Called with the error (a :class:`~ray_adapter.core.errors.CoreError` or the user's
    #: exception) of an object freed before any ``get``, ``wait``, future or dependent call
    #: read it -- a failed call whose result was dropped unread (Ray's "Unhandled error"
    #: report) -- task failures and worker deaths only (``errors.reported_when_unread``).
    #: Runs on a thread of the core's, never under a lock of the core's; None: no report.
    on_unhandled_error: Optional[Callable[[BaseException], None]] = None
    #: A runtime to attach to instead of starting one (the record ``core.runtimes.find_runtime``
    #: gave: another process's runtime on this machine); the driver gets a job of its own there.
    attach: Optional[dict] = None
    #: Start a headless runtime (``ray start --head``): no driver of its own; drivers attach
    #: to ``127.0.0.1:<head_port>`` (the address ``ray.init()`` finds), and ``ray.init()``
    #: with no address attaches to it.
    head_port: Optional[int] = None


@dataclass
class NodeSpec:
    """One node of the runtime (``add_node``): its resources (CPU/GPU counts, ``memory`` and
    ``object_store_memory`` in bytes, custom resources) and labels. ``None``: the default."""

    num_cpus: Optional[float] = None
    num_gpus: Optional[float] = None
    memory: Optional[int] = None
    object_store_memory: Optional[int] = None
    resources: Dict[str, float] = field(default_factory=dict)
    labels: Dict[str, str] = field(default_factory=dict)
    node_id: Optional[str] = None   # hex; None: random
    ip: Optional[str] = None        # its IP label; None: the next free 127.0.0.x


@dataclass
class CallContext:
    """Who is calling the core: the driver, or a task / actor call in a worker.

    ``task_id``/``actor_id`` are None where there is none (the driver has neither);
    ``assigned_resources`` is ``{name: amount}``; ``gpu_ids`` are device indexes (ints),
    or, where ``CUDA_VISIBLE_DEVICES`` was set when the runtime started, that variable's
    entries (strs), as Ray's ``get_gpu_ids()`` returns them."""

    job_id: bytes
    node_id: bytes
    worker_id: bytes
    namespace: str
    is_driver: bool = True
    task_id: Optional[bytes] = None
    actor_id: Optional[bytes] = None
    task_name: str = ""
    actor_name: Optional[str] = None
    assigned_resources: Dict[str, float] = field(default_factory=dict)
    gpu_ids: List[Union[int, str]] = field(default_factory=list)
    was_restarted: bool = False
    actor_handle_meta: Any = None
    runtime_env: Dict[str, Any] = field(default_factory=dict)
    node_ip_address: str = "127.0.0.1"
    #: The placement group the call runs in (None: none), and whether the tasks it submits
    #: are captured into that group (``placement_group_capture_child_tasks``).
    placement_group_id: Optional[bytes] = None
    capture_child_tasks: bool = False
    #: Device ids assigned per accelerator kind (``{"GPU": [0], "NPU": [1]}``).
    accelerator_ids: Dict[str, List[Union[int, str]]] = field(default_factory=dict)
    #: The runtime's address (what ``ray.init`` returned as ``gcs_address``).
    gcs_address: str = ""
    is_canceled: bool = False       # the running call was cancelled (it was not interrupted)
    #: The running call's function as Ray describes it (``module.function``,
    #: ``module.Class.method``); "" in the driver.
    function_name: str = ""
    actor_is_async: bool = False

    @property
    def worker_mode(self):
        return "driver" if self.is_driver else "worker"


@dataclass
class ActorInfo:
    """What the core knows of a live actor (returned by named lookups)."""

    actor_id: bytes
    name: Optional[str]
    namespace: Optional[str]
    class_name: str
    handle_meta: Any
    state: str = "ALIVE"


class RuntimeCore(abc.ABC):
    """One runtime (driver side or inside a worker). All methods are thread-safe."""

    backend_name = "abstract"

    # -- lifecycle ---------------------------------------------------------------------------
    @abc.abstractmethod
    def start(self, options: InitOptions) -> Dict[str, Any]:
        """Start (or connect to) the runtime; returns address info (``address``, ``node_id``...)."""

    @abc.abstractmethod
    def shutdown(self) -> None:
        """Stop every worker this driver started and free every object; idempotent."""

    # -- objects -----------------------------------------------------------------------------
    @abc.abstractmethod
    def put(self, value) -> bytes:
        """Store ``value``; returns its new object id (the caller owns one reference)."""

    @abc.abstractmethod
    def get(self, object_ids: List[bytes], timeout: Optional[float]) -> List[Any]:
        """Values of ``object_ids`` in order. Raises GetTimeout, TaskFailed, TaskCancelled,
        WorkerDied, ActorDied or ObjectFreed (the first failed object's error)."""

    @abc.abstractmethod
    def wait(self, object_ids: List[bytes], num_returns: int, timeout: Optional[float]):
        """``(ready_ids, not_ready_ids)``: the first ``num_returns`` ready ids, in input order."""

    @abc.abstractmethod
    def object_future(self, object_id: bytes):
        """A ``concurrent.futures.Future`` set to the object's value (or failed with its core
        error) once it is ready; no thread is started for it."""

    @abc.abstractmethod
    def add_local_reference(self, object_id: bytes) -> None:
        """The caller holds one more handle to ``object_id``."""

    @abc.abstractmethod
    def remove_local_reference(self, object_id: bytes) -> None:
        """The caller dropped a handle; the object may be freed when none remains."""

    @abc.abstractmethod
    def object_escaped(self, object_id: bytes) -> None:
        """The id was serialized into a value that may reach another process."""

    # -- tasks -------------------------------------------------------------------------------
    @abc.abstractmethod
    def submit_task(self, function, function_key: bytes, args: tuple, kwargs: dict,
                    options: TaskOptions) -> List[bytes]:
        """Run ``function(*args, **kwargs)`` on a worker; returns ``num_returns`` object ids, each
        with one local reference owned by the caller (as ``put``).
        ``function_key`` identifies the function so it is shipped to each worker once."""

    @abc.abstractmethod
    def cancel(self, object_id: bytes, force: bool, recursive: bool) -> None:
        """Cancel the task producing ``object_id`` (pending: dropped; running: interrupted, or
        its worker killed when ``force``)."""

    # -- actors ------------------------------------------------------------------------------
    @abc.abstractmethod
    def create_actor(self, cls, class_key: bytes, args: tuple, kwargs: dict,
                     options: ActorOptions) -> ActorInfo:
        """Create an actor; returns its info. Raises ActorNameTaken for a duplicate name
        (unless ``get_if_exists``, which returns the existing actor)."""

    @abc.abstractmethod
    def submit_actor_task(self, actor_id: bytes, method_name: str, args: tuple, kwargs: dict,
                          options: TaskOptions) -> List[bytes]:
        """Call a method; calls from one caller run in submission order. Returns ids owned by
        the caller, as ``submit_task``."""

    @abc.abstractmethod
    def add_actor_handle(self, actor_id: bytes) -> None:
        """The caller holds one more handle to the actor."""

    @abc.abstractmethod
    def remove_actor_handle(self, actor_id: bytes) -> None:
        """The caller dropped a handle; a non-detached actor with no handle left (none in this
        process and none serialized elsewhere) ends once its queued calls are done."""

    @abc.abstractmethod
    def actor_handle_escaped(self, actor_id: bytes) -> None:
        """A handle was serialized and may live in another process: never end it for scope."""

    @abc.abstractmethod
    def kill_actor(self, actor_id: bytes, no_restart: bool) -> None:
        """Kill the actor's process now; pending calls fail with ActorDied."""

    @abc.abstractmethod
    def get_named_actor(self, name: str, namespace: Optional[str]) -> ActorInfo:
        """The live actor called ``name``; raises ActorNotFound."""

    @abc.abstractmethod
    def list_named_actors(self, all_namespaces: bool) -> List[Dict[str, str]]:
        """``[{"name": ..., "namespace": ...}]`` of live named actors."""

    @abc.abstractmethod
    def exit_current_actor(self) -> bool:
        """Called inside an actor: end it without restart, after the current call. Raises
        ``SystemExit`` to unwind the call, or returns True in an asyncio actor, whose caller
        unwinds it with an ``Exception`` (Ray's ``AsyncioActorExit``): a ``SystemExit`` raised
        in an asyncio task would stop the actor's event loop. ``RuntimeError`` outside an actor."""

    # -- cluster state -----------------------------------------------------------------------
    @abc.abstractmethod
    def nodes(self) -> List[Dict[str, Any]]:
        """One dict per node: ``node_id`` (hex), ``alive``, ``address``, ``hostname``,
        ``resources_total`` and ``labels``."""

    @abc.abstractmethod
    def cluster_resources(self) -> Dict[str, float]:
        """Total resources of the cluster."""

    @abc.abstractmethod
    def available_resources(self) -> Dict[str, float]:
        """Free resources now (resources with nothing free are omitted)."""

    @abc.abstractmethod
    def context(self) -> CallContext:
        """The caller's :class:`CallContext` (driver, or the task / actor call running in
        this thread or coroutine)."""

    # -- streaming generators ----------------------------------------------------------------
    # A call submitted with ``TaskOptions.generator="streaming"`` returns one id, its
    # *completion*: sealed with None when the generator finished, or with the error that ended
    # it (worker death, cancellation). Its items are objects of their own, taken in order.
    # Backends that cannot stream raise NotImplementedError and the matrix says so.
    def stream_next(self, generator_id: bytes, timeout: Optional[float]) -> Optional[bytes]:
        """The id of the stream's next item (the caller owns one reference to it), waiting up
        to ``timeout`` seconds; None once the stream ended and every item was taken. Taking an
        item acknowledges it to a producer paused by backpressure. Raises GetTimeout."""
        raise NotImplementedError(f"streaming generators are not provided by the {self.backend_name} backend")

    def stream_peek(self, generator_id: bytes):
        """``(object_id, finished)``: the id of an object that is ready once the stream's next
        item exists or the stream ended (for ``wait``; taking the item needs
        :meth:`stream_next`), and whether the stream ended with every item taken."""
        raise NotImplementedError(f"streaming generators are not provided by the {self.backend_name} backend")

    def stream_close(self, generator_id: bytes) -> None:
        """The consumer dropped the stream: untaken items are freed, later ones dropped, and
        the producer never pauses again. Safe to call from finalizers."""
        raise NotImplementedError(f"streaming generators are not provided by the {self.backend_name} backend")

    def record_metric(self, kind: str, name: str, description: str, tag_keys: tuple,
                      boundaries: tuple, tags: Dict[str, str], value: float) -> None:
        """Record one application metric value (``ray.util.metrics``; the arguments are
        described in :mod:`ray_adapter.core.metrics`). The driver's runtime exports every
        record, from any of its processes, at its metrics endpoint."""
        raise NotImplementedError(f"application metrics are not provided by the {self.backend_name} backend")

    def relay(self, topic: str, data: Any) -> None:
        """Hand ``data`` (plain values, msgpack-able) to the handler the driver's process
        registered for ``topic`` (:mod:`ray_adapter.core.relays`); from a worker it is posted,
        in order with the worker's other messages, never answered."""
        from ray_adapter.core import relays

        relays.deliver(topic, data)  # the driver's own process (and threads of it)

    def object_store_stats(self) -> Dict[str, int]:
        """``{"num_objects", "bytes_used", "bytes_avail"}`` of the object store (bytes); a
        backend that cannot tell a figure reports 0 for it."""
        raise NotImplementedError(f"object store stats are not provided by the {self.backend_name} backend")

    # -- placement groups (resource groups) --------------------------------------------------
    # A backend that does not provide them raises NotImplementedError and the compat matrix
    # marks them ``gap``.
    def create_placement_group(self, bundles: List[Dict[str, float]], strategy: str,
                               name: str, lifetime: Optional[str],
                               label_selectors: Optional[List[tuple]] = None) -> bytes:
        """Reserve ``bundles`` (``{resource: amount}`` each) with ``strategy`` (PACK, SPREAD,
        STRICT_PACK, STRICT_SPREAD); returns the group id at once (placement is asynchronous:
        an infeasible group stays pending). ``label_selectors``: per bundle, a tuple of
        :class:`~ray_adapter.core.scheduling.LabelMatch` its node must satisfy. Raises
        PlacementGroupNameTaken."""
        raise NotImplementedError(f"placement groups are not provided by the {self.backend_name} backend")

    def remove_placement_group(self, placement_group_id: bytes) -> None:
        """Release the group's bundles; actors and tasks placed in it are killed, queued ones fail."""
        raise NotImplementedError(f"placement groups are not provided by the {self.backend_name} backend")

    def placement_group_table(self, placement_group_id: Optional[bytes]) -> List[Dict[str, Any]]:
        """Records of one group (a one-item list; empty if unknown) or of every group when
        ``placement_group_id`` is None: ``placement_group_id`` (bytes), ``name``, ``namespace``,
        ``bundles`` (list of dicts), ``bundle_nodes`` (node id hex or None per bundle),
        ``strategy``, ``state`` (PENDING, CREATED, REMOVED, RESCHEDULING), ``detached``,
        ``creator_job_id`` (bytes), ``stats`` (dict)."""
        raise NotImplementedError(f"placement groups are not provided by the {self.backend_name} backend")

    def wait_placement_group(self, placement_group_id: bytes, timeout: Optional[float]) -> bool:
        """Block until the group is placed (True) or ``timeout`` seconds passed (False).
        Raises PlacementGroupRemoved if it was removed."""
        raise NotImplementedError(f"placement groups are not provided by the {self.backend_name} backend")

    def placement_group_ready(self, placement_group_id: bytes, value) -> bytes:
        """An object id (owned by the caller, as ``put``) that becomes ``value`` once the group
        is placed, or fails with PlacementGroupRemoved when it is removed first."""
        raise NotImplementedError(f"placement groups are not provided by the {self.backend_name} backend")

    def captured_placement_group(self):
        """``(group_id, bundle_index)`` the caller's new tasks are captured into (a task or
        actor placed with ``capture``), else None. Cheap: called on every submission."""
        return None

    def resources_per_node(self, which: str) -> Dict[str, Dict[str, float]]:
        """``{node id hex: {resource: amount}}`` of live nodes; ``which``: "total" or
        "available" (a resource with nothing free is omitted). Placement-group bundles appear
        under Ray's names (``CPU_group_<index>_<group id hex>``...)."""
        raise NotImplementedError(f"per-node resources are not provided by the {self.backend_name} backend")

    # -- nodes -------------------------------------------------------------------------------
    def add_node(self, spec: "NodeSpec") -> Dict[str, Any]:
        """Add a (virtual) node; returns its record as :meth:`nodes` gives it."""
        raise NotImplementedError(f"adding nodes is not provided by the {self.backend_name} backend")

    def remove_node(self, node_id: str) -> None:
        """Remove node ``node_id`` (hex) as a node failure would: what runs there dies (actors
        restart elsewhere if they can, tasks are retried), its resources leave the cluster."""
        raise NotImplementedError(f"removing nodes is not provided by the {self.backend_name} backend")

    # -- state (the State API, timeline) -----------------------------------------------------
    def state(self, kind: str) -> List[Dict[str, Any]]:
        """Snapshot records of ``kind``: "actors", "tasks", "workers", "nodes",
        "placement_groups" or "objects" (field names as Ray's State API; ids are hex). Tasks
        include finished ones (a bounded history) with ``start_time_ms`` / ``end_time_ms``;
        objects are those the runtime holds, one record each (``object_size`` in bytes, -1
        when not known). References this process dropped before the call are not listed
        (Ray's owner applies a ``del`` at once).""" 
        raise NotImplementedError(f"the state API is not provided by the {self.backend_name} backend")
