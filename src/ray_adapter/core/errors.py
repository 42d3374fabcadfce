"""Backend-neutral failures raised by the runtime core.

Backends raise only these, with a structured reason (an enum and the facts behind it: pid,
exit code, retries); they never write Ray's text. The proxy ``ray`` package
(:mod:`ray_adapter.ray._private.errors`) turns each into the Ray exception, with Ray's message,
that a Ray user expects.
"""
import collections
import enum


class CoreError(Exception):
    """Base of every runtime-core failure."""

    def __reduce__(self):
        # Constructors differ per class; rebuild from the instance state instead.
        return _rebuild, (type(self), self.args, dict(self.__dict__))


def _rebuild(cls, args, state):
    err = cls.__new__(cls)
    err.args = args
    err.__dict__.update(state)
    return err


class GetTimeout(CoreError):
    """``get`` did not find every object ready within ``timeout`` seconds."""

    def __init__(self, timeout=None):
        super().__init__(timeout)
        self.timeout = timeout


class TaskFailed(CoreError):
    """A task or actor method raised; ``cause`` is the user's exception (or None if it could
    not be transported, then ``cause_repr`` describes it and ``cause_lost`` says why:
    ``"pickle"``, it could not be pickled, or ``"rebuild"``, it pickled but could not be
    rebuilt from its pickle). With ``failed_argument`` the call did not run: ``cause`` is the
    core error of one of its arguments."""

    def __init__(self, cause, traceback_str, function_name, pid, ip, actor_repr=None, cause_repr=None,
                 cause_lost=None, actor_id=None, failed_argument=False):
        super().__init__(function_name, traceback_str)
        self.cause = cause
        self.cause_lost = cause_lost
        self.traceback_str = traceback_str
        self.function_name = function_name
        self.pid = pid
        self.ip = ip
        self.actor_repr = actor_repr
        self.actor_id = actor_id  # hex of the actor whose method raised, None for a task
        self.cause_repr = cause_repr if cause_repr is not None else repr(cause)
        #: The call never ran: an argument failed; ``cause`` is the root core error and
        #: ``argument_chain`` the argument failures between (see ``execution.argument_failure``).
        self.failed_argument = failed_argument
        self.argument_chain = []


class TaskCancelled(CoreError):
    """The task was cancelled (``cancel``) before or while running."""

    def __init__(self, task_id=None):
        super().__init__(task_id)
        self.task_id = task_id


class WorkerDeath(str, enum.Enum):
    """Why a task's worker process is gone."""

    CRASHED = "crashed"            # exited or was killed while running the task
    SPAWN_FAILED = "spawn_failed"  # no worker process could be started for it


class WorkerDied(CoreError):
    """The worker process running a task is gone and no retry was left.

    ``cause`` is a :class:`WorkerDeath`; ``pid``/``exit_code`` describe the process (None when
    unknown), ``max_retries`` the task's limit, ``detail`` a short technical note."""

    def __init__(self, task_name, cause, pid=None, exit_code=None, max_retries=None, detail=""):
        super().__init__(task_name, cause)
        self.task_name = task_name
        self.cause = WorkerDeath(cause)
        self.pid = pid
        self.exit_code = exit_code
        self.max_retries = max_retries
        self.detail = detail


class ActorDeath(str, enum.Enum):
    """Why an actor is dead."""

    KILLED = "killed"                  # ray.kill
    OUT_OF_SCOPE = "out_of_scope"      # every handle was dropped
    OWNER_DIED = "owner_died"          # the driver of its job ended (not detached)
    EXITED = "exited"                  # exit_actor()
    CRASHED = "crashed"                # its process died and no restart was left
    CREATION_FAILED = "creation_failed"  # its constructor raised (creation_error)
    ARGS_FAILED = "args_failed"        # a constructor argument's task failed (creation_error)
    SPAWN_FAILED = "spawn_failed"      # no worker process could be started for it
    UNKNOWN = "unknown"                # the runtime does not know the actor (shut down since)
    TERMINATED = "terminated"          # the backend reports it gone (yuanrong)
    NODE_DIED = "node_died"            # its node was removed and no restart was left (node_id)
    PLACEMENT_GROUP_REMOVED = "placement_group_removed"  # its group was removed (group_id)
    UNSCHEDULABLE = "unschedulable"    # it can never be placed (reason: an Unschedulable reason)
    ENV_SETUP_FAILED = "env_setup_failed"  # its runtime env could not start its process (detail)


#: The ``detail`` of a KILLED :class:`ActorDied` whose process was killed and found no restart
#: left (``ray.kill(no_restart=False)``): Ray words that death as its worker process's.
KILLED_PROCESS = "its process was killed"
#: ``ActorDied.detail`` of an ``EXITED`` actor that called ``exit_actor()`` (not ``sys.exit(0)``).
EXITED_BY_EXIT_ACTOR = "exit_actor() is called"
#: ``ActorDied.detail`` of a ``CRASHED`` actor whose code called ``sys.exit`` with a failure
#: code (not killed, not ``os._exit``, not a fault).
LEFT_BY_SYS_EXIT = "its code called sys.exit"


class OwnerExit(collections.namedtuple("OwnerExit", "worker_id ip intended by_runtime", defaults=(False,))):
    """How the owner of an ``OWNER_DIED`` actor ended: ``worker_id`` (hex, str), its node's
    ``ip``, ``intended``: it exited by choice (False: it crashed), and ``by_runtime``: the
    runtime ended it (its own actor was killed or went out of scope)."""

    __slots__ = ()


_NAME_KEPT_AFTER = frozenset((ActorDeath.CREATION_FAILED, ActorDeath.CRASHED, ActorDeath.EXITED))


class ActorDied(CoreError):
    """The actor is dead. ``cause`` is an :class:`ActorDeath`; ``creation_error`` is the
    :class:`TaskFailed` of a failed constructor or argument; ``pid``/``exit_code`` describe a
    crashed process; ``owner`` (an :class:`OwnerExit`) how an ``OWNER_DIED`` actor's owner
    ended; ``detail`` a short technical note."""

    def __init__(self, actor_id, cause, class_name=None, creation_error=None, pid=None,
                 exit_code=None, detail="", node_id=None, group_id=None, started=True, owner=None):
        super().__init__(actor_id, cause)
        self.actor_id = actor_id
        self.cause = ActorDeath(cause)
        self.class_name = class_name
        self.creation_error = creation_error
        self.pid = pid
        self.exit_code = exit_code
        self.detail = detail
        self.node_id = node_id      # NODE_DIED: the node (hex)
        self.group_id = group_id    # PLACEMENT_GROUP_REMOVED: the group (bytes)
        self.started = started      # PLACEMENT_GROUP_REMOVED: False if it was never placed
        self.owner = owner          # OWNER_DIED: an OwnerExit
        #: It died before its constructor first finished (Ray's ``never_started``: dependencies
        #: unready or creation pending; not while restarting). Set by the runtime at its death.
        self.never_ran = False
        self.name = self.namespace = self.ip = None  # where it lived: see located()

    def facts(self):
        """This death as plain data (the State API's actor records; the proxy writes Ray's
        ``death_cause`` from it): cause, class, pid, exit code, detail, node, group (hex),
        started, never_ran, name, namespace, ip, and a failed constructor's traceback text."""
        creation = self.creation_error
        return {"cause": self.cause.value, "class_name": self.class_name, "pid": self.pid,
                "exit_code": self.exit_code, "detail": self.detail, "node_id": self.node_id,
                "group_id": self.group_id.hex() if isinstance(self.group_id, bytes) else self.group_id,
                "started": self.started, "never_ran": self.never_ran, "name": self.name, "namespace": self.namespace,
                "ip": self.ip, "owner": tuple(self.owner) if self.owner is not None else None,
                "creation_error": getattr(creation, "traceback_str", None) if creation is not None else None}

    @property
    def keeps_name(self):
        """Whether a named, non-detached actor dead of this keeps its name while handles to it
        remain (``get_actor`` finds the dead actor, a new one cannot take the name), as Ray
        2.60's GCS keeps it until the actor is out of scope or killed (``ray.kill``): after a
        constructor that raised, a crash with no restart left, and ``exit_actor()`` (measured).
        A killed actor's name is free at its death, as a detached actor's always is."""
        return self.cause in _NAME_KEPT_AFTER

    def located(self, name, namespace, ip):
        """Record the dead actor's name (None: unnamed), namespace and node address (None:
        never placed), which Ray's text lists; fields already set are kept."""
        self.name = self.name or name or None
        self.namespace = self.namespace or namespace or None
        self.ip = self.ip or ip or None
        return self


class ActorUnavailable(CoreError):
    """A call was in flight when the actor's process died and the actor is restarting: the
    call may or may not have run. ``restarted_by_kill`` tells ``ray.kill(no_restart=False)``
    from a crash; ``while_restarting``: the call was made while the actor was restarting (and
    had no retries to wait for it); ``by_sys_exit``: the call itself raised ``SystemExit`` with
    ``exit_code`` in a concurrent actor, whose process leaves once the calls beside it end."""

    def __init__(self, actor_id, pid=None, exit_code=None, restarted_by_kill=False,
                 while_restarting=False, by_sys_exit=False):
        super().__init__(actor_id)
        self.actor_id = actor_id
        self.pid = pid
        self.exit_code = exit_code
        self.restarted_by_kill = restarted_by_kill
        self.while_restarting = while_restarting
        self.by_sys_exit = by_sys_exit


class PendingCallsLimit(CoreError):
    """A call was refused: the caller already has ``limit`` unfinished calls on the actor
    (``max_pending_calls``). ``method`` is the call's task name."""

    def __init__(self, actor_id, class_name, method, limit):
        super().__init__(actor_id, method, limit)
        self.actor_id = actor_id
        self.class_name = class_name
        self.method = method
        self.limit = limit


class NodeDied(CoreError):
    """The node running a task was removed (a node failure) and no retry was left."""

    def __init__(self, task_name, node_id, ip):
        super().__init__(task_name, node_id)
        self.task_name, self.node_id, self.ip = task_name, node_id, ip


class UnschedulableReason(str, enum.Enum):
    NODE_AFFINITY = "node_affinity"  # hard node affinity to a node that is gone or can never fit


class Unschedulable(CoreError):
    """A task can never be scheduled (``reason`` an :class:`UnschedulableReason`)."""

    def __init__(self, task_name, reason):
        super().__init__(task_name, reason)
        self.task_name = task_name
        self.reason = UnschedulableReason(reason)


class PlacementGroupRemoved(CoreError):
    """The placement group a task waited for (or ``ready()`` waited on) was removed."""

    def __init__(self, group_id):
        super().__init__(group_id)
        self.group_id = group_id


class PlacementGroupNameTaken(CoreError):
    """A live placement group already has that name in the namespace."""

    def __init__(self, group_id, name):
        super().__init__(group_id, name)
        self.group_id, self.name = group_id, name


class ActorNameTaken(CoreError):
    """An actor with that name already exists in the namespace."""

    def __init__(self, name, namespace):
        super().__init__(name, namespace)
        self.name, self.namespace = name, namespace


class ActorNotFound(CoreError):
    """No live actor has that name in the namespace."""

    def __init__(self, name, namespace):
        super().__init__(name, namespace)
        self.name, self.namespace = name, namespace


class ObjectFreed(CoreError):
    """The object's value is gone (freed, or its owner died)."""

    def __init__(self, object_id):
        super().__init__(object_id)
        self.object_id = object_id


class NotInitialized(CoreError):
    """A core call was made before the runtime was started (or after it was shut down)."""


class EnvSetupFailed(CoreError):
    """A runtime env could not be set up: ``detail`` says why."""

    def __init__(self, detail):
        super().__init__(detail)
        self.detail = detail


class StoreFull(CoreError):
    """No memory could be allocated to store a value's buffer of ``nbytes`` bytes; ``reason``
    is the system's error as text (e.g. ``OSError: [Errno 12] Cannot allocate memory``)."""

    def __init__(self, nbytes, reason):
        super().__init__(nbytes, reason)
        self.nbytes = nbytes
        self.reason = reason


class Undeserializable(CoreError):
    """A stored value could not be rebuilt where it was read (``ray.get``, a call's argument):
    ``error`` is the exception its unpickling raised, ``traceback`` that exception's traceback
    (text)."""

    def __init__(self, error, traceback):
        super().__init__(error, traceback)
        self.error = error
        self.traceback = traceback


class Unserializable(CoreError):
    """A value could not be serialized: ``what`` says which (``"argument"``, ``"put value"``),
    ``error`` is the serializer's exception as text, ``value_repr`` the value's repr."""

    def __init__(self, what, error, value_repr=None):
        super().__init__(what, error)
        self.what = what
        self.error = error
        self.value_repr = value_repr


def task_failure_text(function_name, traceback_str, pid, ip, actor_id=None, actor_repr=None,
                      proctitle=None):
    """Ray's text of a failed task or actor call (the ``str`` of its ``RayTaskError``, and what
    Ray's retry notice quotes): the call's name (``proctitle``, default ``ray::<function_name>``)
    in cyan -- colorama's codes, as Ray's, on a terminal or not -- where it ran, then the
    traceback without its ``Traceback (most recent call last):`` line."""
    where = f"pid={pid}, ip={ip}"
    if actor_id:
        where += f", actor_id={actor_id}"
    if actor_repr:
        where += f", repr={actor_repr}"
    lines = (traceback_str or "").rstrip("\n").split("\n")
    if lines and lines[0].startswith("Traceback"):
        lines = lines[1:]
    return "\n".join([f"\x1b[36m{proctitle or 'ray::' + str(function_name)}()\x1b[39m ({where})"] + lines)


#: Writes what Ray's worker logs when an actor's constructor raised ("Exception raised in
#: creation task: ..."), given the :class:`ActorDied` (``CREATION_FAILED``) it led to. Set by
#: the proxy (``ray._private.errors``, which words Ray's errors; every worker loads it): the
#: runtime core only says when. None: nothing is written.
creation_failure_reporter = None


def report_creation_failure(death):
    """Have the proxy write Ray's line for ``death`` (an :class:`ActorDied` whose constructor
    raised) on this process's stderr, which a worker's output forwarding brings to the driver
    as Ray's worker log does. Never raises."""
    reporter = creation_failure_reporter
    if reporter is not None:
        try:
            reporter(death)
        except Exception:  # noqa: BLE001 - a report must never break the actor's failure path
            pass


def reported_when_unread(error):
    """Whether an object holding ``error``, freed before anyone read it, is reported as an
    unhandled error (:attr:`InitOptions.on_unhandled_error`): as Ray 2.60, a task or call that
    raised, or whose worker died, is; a cancellation (also one that interrupted the call: a
    TaskFailed caused by TaskCancelled), a dead or unreachable actor, an unschedulable task, a
    removed placement group, a failed env set-up and a lost node are not."""
    if isinstance(error, TaskFailed):
        return not isinstance(error.cause, TaskCancelled)
    return isinstance(error, WorkerDied)  # Ray: only task failures and worker deaths
