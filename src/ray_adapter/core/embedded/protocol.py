"""The wire protocol between the embedded driver and its worker processes.

One named, typed message per kind (msgspec Structs, msgpack-encoded with a type tag), versioned
by :data:`VERSION`: a worker checks it in :class:`Init` and answers with :class:`Hello`.

User values never appear as Python objects here: a :class:`Payload` is the sender's pickle
stream (opaque bytes) plus the indexes of its out-of-band buffers among the frame's buffers
(:mod:`.channel`). Dependencies travel as explicit lists of object ids (``deps``), and the ids
of object refs and actor handles pickled *inside* a value travel beside it (``refs`` /
``handles``), so the driver never unpickles user arguments to find them.

Data flow::

    driver                                              worker
      Init, Function, RunTask, CreateActor,   ------>   (reader thread -> executor)
      CallActor, Cancel, Reply, GetReply,
      StreamAck, Exit, Release, Attached, Output
      (reader thread per worker)              <------   Hello, AttachHello, TaskDone, Released,
                                                        StreamItem, ActorReady, ActorFailed, ActorExiting, RefUpdate,
                                                        FunctionReq, SubmitTaskReq,
                                                        CreateActorReq, CallActorReq, PutReq,
                                                        GetReq, WaitReq, StreamNextReq,
                                                        MetricRecord, Relay, Output, and one message
                                                        per query (CancelQuery, StateQuery, ...)

An attached driver (a ``ray.init`` in another process, :mod:`.drivers`) speaks the same
protocol as a worker's nested calls: it sends :class:`AttachHello` first and gets
:class:`Attached` (its job), then only requests and reference updates, and gets replies.

Streaming generators: a call run with ``streaming`` sends one :class:`StreamItem` per yielded
value, in order (an exception the generator raises is its last item, not ok), then its
:class:`TaskDone`, which ends the stream and seals the call's completion object. With
``backpressure`` > 0 the worker pauses the generator while that many items are unconsumed;
the driver reports consumption with :class:`StreamAck`.

Pipelined tasks: the driver may send a task worker its next :class:`RunTask` while one runs
(both under the same lease); the worker runs them in order. A :class:`Cancel` of one still
queued there is answered at once (its TaskDone, cancelled); :class:`Release` takes one back.
"""
from typing import Any, Dict, List, Optional, Union

import msgspec

from ray_adapter.core.scheduling import Placement
from ray_adapter.core.serialization import Serialized

VERSION = 16
#: A worker's exit code when the driver's ``Init`` speaks another protocol version (its
#: interpreter, a ``py_executable``, has another ray-adapter installed).
VERSION_MISMATCH_EXIT_CODE = 97


class Payload(msgspec.Struct, array_like=True, gc=False):
    """A serialized value: pickle ``data``; its out-of-band buffers are the frame's buffers
    ``first .. first+count-1``; ``refs`` / ``handles``: ids of object refs and actor handles
    pickled inside it."""

    data: bytes
    first: int = 0
    count: int = 0
    refs: List[bytes] = []
    handles: List[bytes] = []


class Dep(msgspec.Struct, array_like=True, gc=False):
    """A resolved top-level argument: object ``object_id`` and its value; ``failed``: the
    value is the argument's error (an actor call then fails itself, quoting it, in the actor)."""

    object_id: bytes
    value: Payload
    failed: bool = False


class _Msg(msgspec.Struct, array_like=True, tag=True, gc=False):
    """Base of every message. ``gc=False`` (all structs here): a message only holds plain
    data, never itself, so the cyclic GC need not track the thousands in flight."""


class Assignment(msgspec.Struct, array_like=True, gc=False):
    """Where a task or actor was placed: the device ids it holds per kind, and the placement
    group bundle it runs in (``group_id`` empty: none; ``capture``: its child tasks join it)."""

    accelerators: Dict[str, List[Union[int, str]]] = {}  # str: entries of *_VISIBLE_DEVICES
    group_id: bytes = b""
    bundle_index: int = -1
    capture: bool = False


# ==================================================================== driver -> worker
class Init(_Msg):
    """The first message to a worker. ``runtime_env``: the pickled runtime env (a dict) the
    process was started for; a setup hook it names runs before the first task."""

    version: int
    job_id: bytes
    node_id: bytes
    worker_id: bytes
    namespace: str
    log_to_driver: bool
    node_ip: str
    runtime_env: bytes = b""
    #: The worker serves an attached driver's job: its output lines travel as :class:`Output`
    #: messages (the runtime hands them to that driver) instead of to the inherited streams.
    relay_output: bool = False
    #: That driver's code folders, put first on ``sys.path`` (as Ray gives a job's workers its
    #: driver's), and its script's module name (``execution.MAIN_MODULE_ENV``).
    code_path: str = ""
    main_module: str = ""
    #: The salt this process mints its tasks' and actor calls' ids with (``ids.caller_task_id``).
    id_salt: bytes = b""
    #: The runtime's address (``host:port``; the worker's ``gcs_address``).
    address: str = ""


class Function(_Msg):
    """A function or class, registered before its first use on this channel."""

    key: bytes
    blob: bytes


class RunTask(_Msg, kw_only=True):
    task_id: bytes
    key: bytes
    args: Payload
    deps: List[Dep]
    num_returns: int
    name: str
    env: Dict[str, str]
    resources: Dict[str, float]
    gpu_ids: List[Union[int, str]]  # str: an entry of CUDA_VISIBLE_DEVICES set at start
    retry_exceptions: bytes = b""  # task_support.retry_blob's form (b"": none)
    assignment: Optional[Assignment] = None
    streaming: bool = False        # the function's generator streams its items (StreamItem)
    backpressure: int = -1         # streaming: unconsumed items before the generator pauses


class CreateActor(_Msg, kw_only=True):
    actor_id: bytes
    key: bytes
    args: Payload
    deps: List[Dep]
    name: Optional[str]
    class_name: str
    is_async: bool
    max_concurrency: Optional[int]
    restart_count: int
    env: Dict[str, str]
    resources: Dict[str, float]
    gpu_ids: List[Union[int, str]]  # str: an entry of CUDA_VISIBLE_DEVICES set at start
    handle_meta: bytes     # pickled, opaque to the core
    runtime_env: bytes     # pickled dict
    assignment: Optional[Assignment] = None
    concurrency_groups: Dict[str, int] = {}  # group -> max concurrent calls
    backpressure: int = -1  # unconsumed stream items of all calls before they pause


class CallActor(_Msg, kw_only=True):
    task_id: bytes
    method: str
    args: Payload
    deps: List[Dep]
    num_returns: int
    name: str
    group: str = ""                # concurrency group; "": the default one
    streaming: bool = False
    backpressure: int = -1
    retry_exceptions: bytes = b""  # as in RunTask


class Cancel(_Msg):
    task_id: bytes
    force: bool


class Reply(_Msg):
    """The answer to a request: ``value`` is the pickled result, or the error when not ok."""

    req_id: int
    ok: bool
    value: Payload


class GetReply(_Msg):
    """The answer to :class:`GetReq`: the objects' values, or ``error`` (a pickled core error)."""

    req_id: int
    values: List[Payload]
    error: Optional[Payload] = None


class StreamAck(_Msg):
    """The consumer of stream ``task_id`` has taken ``consumed`` items in all."""

    task_id: bytes
    consumed: int


class Exit(_Msg):
    """To a worker: exit now. From an attached driver: it is detaching by choice
    (``ray.shutdown()``, interpreter exit), so its job's actors die of an intended owner exit.
    ``graceful`` (to a worker whose actor went out of scope): the actor's ``__ray_shutdown__``
    and the process's ``atexit`` handlers run first, as Ray ends such an actor."""

    graceful: bool = False


class Release(_Msg):
    """Give back task ``task_id``, queued behind the running one (its task blocked): if it has
    not started, the worker drops it and answers :class:`Released`; else nothing (its TaskDone
    follows)."""

    task_id: bytes


class Output(_Msg):
    """Lines a worker of an attached job printed (``fd`` 1 stdout, 2 stderr), prefixed as Ray
    prints them; the runtime passes them on to that job's driver, which writes them. Posted (both ways)."""

    fd: int
    text: str


class UnreadError(_Msg):
    """An error object an attached driver was lent (its task's or call's result) was freed
    unread: the driver reports it as Ray's owner does ("Unhandled error")."""

    error: Payload


class Attached(_Msg):
    """The runtime's answer to an attaching driver's :class:`AttachHello`: the identity it has
    there (its own job), the runtime's namespace default and address."""

    job_id: bytes
    node_id: bytes
    worker_id: bytes
    namespace: str
    node_ip: str
    address: str
    runtime_env: bytes = b""  # the pickled job runtime env, packaged
    error: str = ""           # why the driver cannot attach (then nothing else is set)
    id_salt: bytes = b""      # as Init's


ToWorker = Union[Init, Function, RunTask, CreateActor, CallActor, Cancel, Reply, GetReply,
                 StreamAck, Exit, Release, Attached, Output, UnreadError]


# ==================================================================== worker -> driver
class Hello(_Msg):
    version: int
    pid: int


class AttachHello(_Msg):
    """The first message of a driver attaching to a running runtime (``ray.init(address=...)``
    in another process): its protocol version, its namespace (the one it was given, or the
    random one it made) and its job's runtime env (pickled JSON-like dict, as ``ray.init``
    checked it)."""

    version: int
    pid: int
    namespace: str
    runtime_env: bytes = b""
    observer: bool = False  # a tool (``ray status``, ``ray list``): no job of its own
    submission_id: str = ""  # the submitted job (``ray job submit``) whose entrypoint it runs in
    code_path: str = ""      # its own code folders (os.pathsep-joined), for its job's workers
    main_module: str = ""    # the module name its script's functions have in workers


class TaskDone(_Msg):
    """A task or actor call finished: ``results`` (one per return), or when not ``ok`` one
    pickled core error for every return, after the values of the first returns when a
    generator gave only those (its last result is the error then). ``retryable``: the error is
    one the task's ``retry_exceptions`` names (the worker decided; the driver never unpickles it)."""

    task_id: bytes
    ok: bool
    results: List[Payload]
    retryable: bool = False


class Released(_Msg):
    """Task ``task_id`` was dropped unstarted, as :class:`Release` asked: the driver runs it
    elsewhere."""

    task_id: bytes


class StreamItem(_Msg):
    """Item ``index`` (0, 1, ...) of the stream of call ``task_id``: its value, or when not
    ``ok`` the pickled core error the generator raised (its last item)."""

    task_id: bytes
    index: int
    ok: bool
    value: Payload


class ActorReady(_Msg):
    actor_id: bytes


class ActorFailed(_Msg):
    actor_id: bytes
    error: Payload


class ActorExiting(_Msg):
    """``exit_actor()`` (``by_exit_actor``) or ``sys.exit(0)`` was called, in a method or the
    constructor: the process exit that follows is intended. ``draining``: the calls already
    running go on and are answered before it exits (a concurrent actor; ``task_id``: the call
    that asked to exit); else no call sent before this one is answered."""

    actor_id: bytes
    draining: bool = False
    task_id: bytes = b""
    by_exit_actor: bool = False


class Leaving(_Msg):
    """The worker's Python code raised ``SystemExit`` (``sys.exit(code)``) in a task or a
    method that ends the process: it exits next with ``exit_code``. A process that ends
    without it crashed (killed, ``os._exit``, a fault): Ray words the two differently."""

    exit_code: int


class RefUpdate(_Msg):
    """Reference events of this worker, in the order they happened: objects it took a first
    ObjectRef to without owning one yet (``ref_borrow``, sent before anything it does with
    them), objects it dropped its last ObjectRef to (``decref``: its puts and submissions, and
    its borrows), refs it pickled where they cannot be tracked (``pin``), actor handles it took
    (``borrow``), dropped (``unborrow``) or pickled where they cannot be tracked (``escape``)."""

    decref: List[bytes] = []
    pin: List[bytes] = []
    borrow: List[bytes] = []
    unborrow: List[bytes] = []
    escape: List[bytes] = []
    unpin: List[List[int]] = []  # arena blocks (segment id, offset) whose views are all gone
    ref_borrow: List[bytes] = []


class FunctionReq(_Msg):
    """A function or class this worker registers, sent before the submission that uses it."""

    key: bytes
    blob: bytes


class TaskOptionsWire(msgspec.Struct, array_like=True, gc=False):
    name: str
    num_returns: int
    resources: Dict[str, float]
    max_retries: int
    max_calls: int
    retry_exceptions: bytes  # task_support.retry_blob's form (b"": none); the driver never opens it
    runtime_env: Optional[Dict[str, Any]] = None  # JSON-like, as Ray's (None: the submitter's)
    scheduling: Optional[Placement] = None        # None: the default
    generator: str = ""      # "streaming" or ""
    backpressure: int = -1


class ActorOptionsWire(msgspec.Struct, array_like=True, gc=False, kw_only=True):
    """``interface.ActorOptions`` of an actor a worker creates, field for field; the handle
    metadata (method names and options, which may name the user's classes) is the creator's
    pickle, passed on unopened to the actor's worker and to whoever rebuilds a handle."""

    class_name: str
    resources: Dict[str, float]
    max_restarts: int
    max_task_retries: int
    max_concurrency: Optional[int]
    is_async: bool
    name: Optional[str]
    namespace: Optional[str]
    get_if_exists: bool
    detached: bool
    runtime_env: Optional[Dict[str, Any]]
    scheduling: Optional[Placement]
    handle_meta: bytes
    concurrency_groups: Dict[str, int]
    max_pending_calls: int
    generator_backpressure: int
    method_resources: Dict[str, float] = {}


class SubmitTaskReq(_Msg):
    req_id: int
    key: bytes
    args: Payload
    deps: List[bytes]
    options: TaskOptionsWire
    parent: bytes = b""    # the task id of the call that submits it (b"": none; see cancel)
    task_id: bytes = b""   # minted by the caller: as CallActorReq's


class CreateActorReq(_Msg):
    req_id: int
    key: bytes
    args: Payload
    deps: List[bytes]
    options: ActorOptionsWire


class CallActorReq(_Msg):
    req_id: int
    actor_id: bytes
    method: str
    args: Payload
    deps: List[bytes]
    name: str
    num_returns: int
    generator: str = ""
    backpressure: int = -1
    group: str = ""
    max_task_retries: int = -2  # -2: the actor's
    retry_exceptions: bytes = b""
    #: Minted by the caller (``ids.caller_task_id``): nothing is answered; the return ids are
    #: the caller's (lent), and a refusal fails them instead of being raised. Empty: the
    #: runtime mints it and replies with the return ids.
    task_id: bytes = b""


class PutReq(_Msg):
    req_id: int
    value: Payload


class GetReq(_Msg):
    req_id: int
    ids: List[bytes]
    timeout: Optional[float]


class WaitReq(_Msg):
    req_id: int
    ids: List[bytes]
    num_returns: int
    timeout: Optional[float]


class StreamNextReq(_Msg):
    """``stream_next`` from a worker: answered by a Reply with the next item's id or None."""

    req_id: int
    generator_id: bytes
    timeout: Optional[float]


class _Query(_Msg):
    """Base of the requests a worker's runtime core answers from driver state (cancel, kill,
    named actors, placement groups, cluster state): one message per query, its arguments typed
    fields; answered by a :class:`Reply` with the value (``req_id`` 0: posted, no reply)."""

    req_id: int


class CancelQuery(_Query, kw_only=True):
    object_id: bytes
    force: bool
    recursive: bool


class KillActorQuery(_Query, kw_only=True):
    actor_id: bytes
    no_restart: bool


class GetNamedActorQuery(_Query, kw_only=True):
    name: str
    namespace: Optional[str]


class ListNamedActorsQuery(_Query, kw_only=True):
    all_namespaces: bool
    namespace: Optional[str] = None  # None: the asker's job's


class NodesQuery(_Query):
    pass


class ClusterResourcesQuery(_Query):
    pass


class AvailableResourcesQuery(_Query):
    pass


class ResourcesPerNodeQuery(_Query, kw_only=True):
    which: str  # "available" or "total"


class CreatePlacementGroupQuery(_Query, kw_only=True):
    bundles: List[Dict[str, float]]
    strategy: str
    name: str
    lifetime: Optional[str]
    label_selectors: Optional[List[Dict[str, str]]]
    creator_actor: Optional[bytes]  # the actor the asking worker hosts (the group dies with it)
    namespace: Optional[str] = None  # None: the asker's job's


class RemovePlacementGroupQuery(_Query, kw_only=True):
    placement_group_id: bytes


class PlacementGroupTableQuery(_Query, kw_only=True):
    placement_group_id: Optional[bytes]  # None: every group


class PlacementGroupReadyQuery(_Query, kw_only=True):
    """A new object that becomes ``value`` once the group is placed; its one reference is
    the asking worker's."""

    placement_group_id: bytes
    value: Payload


class StateQuery(_Query, kw_only=True):
    kind: str  # "actors", "tasks", "workers", "nodes", "placement_groups", "objects"


class StreamPeekQuery(_Query, kw_only=True):
    generator_id: bytes


class StreamCloseQuery(_Query, kw_only=True):
    generator_id: bytes


class ObjectStoreStatsQuery(_Query):
    pass


QUERIES = (CancelQuery, KillActorQuery, GetNamedActorQuery, ListNamedActorsQuery, NodesQuery,
           ClusterResourcesQuery, AvailableResourcesQuery, ResourcesPerNodeQuery,
           CreatePlacementGroupQuery, RemovePlacementGroupQuery, PlacementGroupTableQuery,
           PlacementGroupReadyQuery, StateQuery, StreamPeekQuery, StreamCloseQuery,
           ObjectStoreStatsQuery)


class MetricRecord(_Msg):
    """One ``ray.util.metrics`` record made in a worker, for the driver's metrics endpoint
    (fields as in :mod:`ray_adapter.core.metrics`). Posted, never answered."""

    kind: str
    name: str
    description: str
    tag_keys: List[str]
    boundaries: List[float]
    tags: Dict[str, str]
    value: float


class Relay(_Msg):
    """``relay(topic, data)`` from a worker (see :mod:`ray_adapter.core.relays`). Posted."""

    topic: str
    data: msgspec.Raw


ToDriver = Union[(Hello, AttachHello, TaskDone, Released, StreamItem, ActorReady, ActorFailed, ActorExiting, Leaving,
                  RefUpdate, FunctionReq, SubmitTaskReq, CreateActorReq, CallActorReq, PutReq,
                  GetReq, WaitReq, StreamNextReq, MetricRecord, Relay, Output, Exit) + QUERIES]

_encoder = msgspec.msgpack.Encoder()
encode = _encoder.encode
worker_decoder = msgspec.msgpack.Decoder(ToWorker)   # used in workers
driver_decoder = msgspec.msgpack.Decoder(ToDriver)   # used in the driver


def to_payload(serialized, buffers):
    """The :class:`Payload` of a Serialized value; appends its buffers to ``buffers``."""
    first = len(buffers)
    buffers.extend(serialized.buffers)
    return Payload(serialized.data, first, len(serialized.buffers), serialized.refs, serialized.handles)


def from_payload(payload, buffers):
    """The Serialized value a received :class:`Payload` describes."""
    return Serialized(payload.data, buffers[payload.first:payload.first + payload.count],
                      payload.refs, payload.handles)
