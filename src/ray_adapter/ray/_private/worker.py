"""The core Ray API (``ray.init``, ``ray.get``, ``ray.put``, ``ray.wait``, ...), as
``ray._private.worker``.

Each function checks its arguments the way Ray 2.x does, then calls the runtime core
(:mod:`ray_adapter.core`); core failures are turned into :mod:`ray.exceptions` classes. ``init``
checks its arguments and hands the session (:mod:`.session`, which holds what it started and
``shutdown``) the core's options. The top layer of the proxy: it may import every
implementation module, and none imports it (``init`` is registered with :mod:`.core_access` as
what starts the runtime on a first call without ``ray.init()``).
"""
import logging
import os

from ray_adapter import RAY_API_VERSION
from ray_adapter import core as _core
from ray_adapter import gaps
from ray_adapter.core import ids
from ray_adapter.core import relays as _relays
from ray_adapter.ray._private import core_access as _core_access
from ray_adapter.ray._private import local_clusters as _local_clusters
from ray_adapter.ray._private import log_setup as _log_setup
from ray_adapter.ray._private import options as _options
from ray_adapter.ray._private import session as _session
from ray_adapter.ray._private.core_access import context_if_started, ray_error, stored_error, translated
from ray_adapter.ray._private.core_access import core as _ensure_core
from ray_adapter.ray._private.global_worker import SCRIPT_MODE, WORKER_MODE, global_worker  # noqa: F401
from ray_adapter.ray._private.session import RayContext, is_initialized, shutdown  # noqa: F401
from ray_adapter.ray._private.object_refs import UNKNOWN_OWNER_ADVICE, ObjectRef, from_old_sessions, put_object

LOCAL_MODE = 2
logger = logging.getLogger("ray._private.worker")  # Ray's name: records go to the "ray" logger


def __getattr__(name):
    # Ray's module-level ``_global_node``: this process's node while connected, else None
    # (``ray.util.get_node_ip_address`` reads it through the module, as Ray's does); the
    # session's context, read through the module as it changes.
    if name == "_global_node":
        return global_worker.node
    if name == "_context":
        return _session._context
    return _module_gap(name)


_module_gap = gaps.module_getattr("ray._private.worker")


def _override_resources(num_cpus, num_gpus, memory, object_store_memory, resources):
    """The node's resources after ``RAY_OVERRIDE_RESOURCES`` (a JSON dict), as Ray applies
    it when it starts a node: its ``CPU`` / ``GPU`` / ``memory`` / ``object_store_memory``
    replace those arguments, its other keys are merged over ``resources`` (winning, with
    Ray's warning when they change a given value). Raises the JSON error for a bad value."""
    import json

    text = os.environ.get("RAY_OVERRIDE_RESOURCES")
    if not text:
        return num_cpus, num_gpus, memory, object_store_memory, resources
    try:
        env = dict(json.loads(text))
    except Exception:
        logger.exception(f"Failed to load {text}")
        raise
    merged = dict(resources or {})
    for key, value in env.items():
        if key in ("CPU", "GPU", "memory", "object_store_memory"):
            continue
        if key in merged and merged[key] != value:
            logger.warning(f"Autoscaler is overriding your resource: {key}: {merged[key]} with {value}.")
        merged[key] = value
    return (env.get("CPU", num_cpus), env.get("GPU", num_gpus), env.get("memory", memory),
            env.get("object_store_memory", object_store_memory), merged)


#: The private keywords Ray 2.60's ``init`` takes (any other extra keyword is refused); what
#: each does here is in the compat matrix (``compat_matrix/options.toml``).
_PRIVATE_INIT_KEYWORDS = frozenset((
    "_enable_object_reconstruction", "_plasma_directory", "_node_ip_address",
    "_driver_object_store_memory", "_memory", "_redis_password", "_redis_username", "_temp_dir",
    "_metrics_export_port", "_system_config", "_node_name", "_skip_env_hook",
    "_tracing_startup_hook"))


def _refuse_as_ray(kwargs, local_mode):
    """Ray 2.60's RuntimeErrors for ``init`` keywords it no longer takes, in its order:
    ``allow_multiple`` (Ray Client only), ``storage`` (removed after 2.47), any unknown
    keyword, then ``local_mode=True``."""
    if kwargs.get("allow_multiple"):
        raise RuntimeError(
            "`allow_multiple` argument is passed to `ray.init` when the ray client is not used "
            f"(https://docs.ray.io/en/releases-{RAY_API_VERSION}/cluster/running-applications/"
            "job-submission/ray-client.html#connect-to-multiple-ray-clusters-experimental). "
            "Do not pass the `allow_multiple` to `ray.init` to fix the issue.")
    if kwargs.get("storage"):
        raise RuntimeError("Cluster-wide storage configuration has been removed. The last Ray "
                           "version supporting the `storage` argument is `ray==2.47`.")
    unknown = [key for key in kwargs if key not in _PRIVATE_INIT_KEYWORDS]
    if unknown:
        raise RuntimeError(f"Unknown keyword argument(s): {', '.join(unknown)}")
    if local_mode:
        raise RuntimeError("`local_mode` is no longer supported. For interactive debugging "
                           "consider using the Ray distributed debugger.")


def init(address=None, *, num_cpus=None, num_gpus=None, resources=None, labels=None,
         object_store_memory=None, local_mode=False, ignore_reinit_error=False,
         include_dashboard=None, dashboard_host="127.0.0.1", dashboard_port=None, job_config=None,
         configure_logging=True, logging_level=_log_setup.LOGGER_LEVEL, logging_format=None,
         logging_config=None,
         log_to_driver=None, namespace=None, runtime_env=None, enable_resource_isolation=False,
         cgroup_path=None, system_reserved_cpu=None, system_reserved_memory=None,
         proxy_server_url=None, **kwargs):
    """Start the runtime (mirrors ``ray.init``); returns a :class:`RayContext`.

    Without ``address`` (or with ``"local"``) the embedded single-machine runtime starts with
    ``num_cpus`` CPUs (default: the machine's), ``num_gpus`` GPUs, ``resources`` custom
    resources and ``object_store_memory`` bytes. Raises ``RuntimeError`` when called twice
    unless ``ignore_reinit_error=True``; an option the adapter cannot honour raises
    :class:`ray_adapter.gaps.RayAdapterOptionError`.
    """
    given = {k: v for k, v in dict(
        address=address, num_cpus=num_cpus, num_gpus=num_gpus, resources=resources, labels=labels,
        object_store_memory=object_store_memory, local_mode=local_mode or None,
        include_dashboard=include_dashboard, dashboard_port=dashboard_port, job_config=job_config,
        logging_format=logging_format, logging_config=logging_config, namespace=namespace,
        runtime_env=runtime_env, enable_resource_isolation=enable_resource_isolation or None,
        cgroup_path=cgroup_path, system_reserved_cpu=system_reserved_cpu,
        system_reserved_memory=system_reserved_memory, proxy_server_url=proxy_server_url,
        **kwargs).items() if v is not None}
    # The `ray` command's status and list attach as an observer (no job of their own); not Ray's.
    observer = bool(given.pop("_ray_adapter_observer", None))
    kwargs.pop("_ray_adapter_observer", None)
    _refuse_as_ray(kwargs, local_mode)
    joined = []  # make_options ran: [the address of the runtime joined, or None: a new one]

    def make_options():  # after the re-init check, under the session's lock, as in Ray
        nonlocal address, object_store_memory, num_cpus, num_gpus, resources
        if address in (None, "auto"):  # as Ray: RAY_ADDRESS names the runtime "auto" finds
            env_address = os.environ.get("RAY_ADDRESS") or None
            if env_address is not None and (address is None or env_address != "auto"):
                address = given["address"] = env_address
        cluster = _cluster_nodes(address, num_cpus, num_gpus, resources=resources, labels=labels,
                                 object_store_memory=object_store_memory,
                                 _system_config=kwargs.get("_system_config") or None)
        cluster_address = None
        if cluster is not None:
            cluster_address, address = address, None
            given["address"] = None
        attach = None if cluster is not None else _running_runtime(
            address, num_cpus, num_gpus, resources=resources, labels=labels,
            object_store_memory=object_store_memory)
        if isinstance(object_store_memory, float) and object_store_memory.is_integer():
            # Ray's init takes a float byte count (object_store_memory=700e6, as Ray's tests do).
            object_store_memory = given["object_store_memory"] = int(object_store_memory)
        _options.check("init", given)
        if attach is None:
            _check_address(address)
        if namespace is not None and (not isinstance(namespace, str) or not namespace):
            raise TypeError("namespace must be None or a non-empty string.")
        for key, value in (("num_cpus", num_cpus), ("num_gpus", num_gpus), ("resources", resources),
                           ("object_store_memory", object_store_memory), ("runtime_env", runtime_env)):
            _options._check_value(key, value)
        if runtime_env is not None and not isinstance(runtime_env, dict):
            raise TypeError("runtime_env must be a dict or a ray.runtime_env.RuntimeEnv.")
        _log_setup.configure_at_init(configure_logging, logging_level, logging_format)
        num_cpus, num_gpus, memory, object_store_memory, resources = _override_resources(
            num_cpus, num_gpus, kwargs.get("_memory"), object_store_memory, resources)
        from ray_adapter.core.interface import InitOptions  # (its dataclasses: not at ``import ray``)

        opts = InitOptions(
            num_cpus=num_cpus, num_gpus=num_gpus, memory=memory,
            object_store_memory=object_store_memory, resources=dict(resources or {}),
            namespace=namespace, runtime_env=_job_env(runtime_env),
            log_to_driver=True if log_to_driver is None else bool(log_to_driver),
            address=None if address in (None, "local", "auto") else address,
            labels=dict(labels or {}), metrics_export_port=_metrics_port_option(kwargs),
            on_unhandled_error=_report_unhandled_error, attach=attach)
        if attach is not None:
            opts.address = None
            if observer:
                opts.attach = dict(attach, observer=True)
        if cluster is not None:
            head, opts.nodes = cluster
            opts.num_cpus, opts.num_gpus, opts.memory = head.num_cpus, head.num_gpus, head.memory
            opts.object_store_memory, opts.node_id = head.object_store_memory, head.node_id
            opts.resources, opts.labels = dict(head.resources), dict(head.labels)
        _relays.register("tqdm_ray", _tqdm_state)  # bars of tasks and actors, drawn here
        joined.append(_joined_address(attach, cluster_address, opts.address))
        if joined[0] is not None and not observer:  # Ray's INFO lines, on the "ray" logger
            logger.info("Connecting to existing Ray cluster at address: %s...", joined[0])
        return opts

    context = _session.start(make_options, ignore_reinit_error)
    if observer:
        return context
    if joined:
        logger.info("Started a local Ray instance." if joined[0] is None else "Connected to Ray cluster.")
    elif _driver():  # it ran already (ignore_reinit_error): Ray says so, in a driver
        logger.info("Calling ray.init() again after it has already been called.")
    return context


def _joined_address(attach, cluster_address, address):
    """The address of the running runtime ``init`` joins (Ray logs it), or None when it starts
    one: a runtime of this machine it attaches to (``attach``), a ``ray.cluster_utils.Cluster``
    (``cluster_address``), a Yuanrong cluster (``address``, or ``YR_SERVER_ADDRESS`` when the
    yuanrong backend is chosen without one; not yr's local mode)."""
    if attach is not None:
        return attach["address"]
    if cluster_address is not None:
        return cluster_address
    if address is not None:
        return address
    if os.environ.get("RAY_ADAPTER_RUNTIME", "").strip().lower() == "yr-local":
        return None
    return os.environ.get("YR_SERVER_ADDRESS") or None


def _driver():
    """True in a driver (not in a task or actor of a worker process)."""
    context = context_if_started()
    return context is None or context.is_driver


def _report_unhandled_error(error):
    """The runtime's report of a failed call whose result was freed unread (Ray's worker logs
    it the same way, on the ``ray`` logger): the Ray exception, as ``ray.get`` would raise it.
    Nothing when ``RAY_IGNORE_UNHANDLED_ERRORS`` is set (to anything, as in Ray)."""
    if "RAY_IGNORE_UNHANDLED_ERRORS" in os.environ:
        return
    if isinstance(error, _core.errors.CoreError):
        error = ray_error(error)
    logger.error(f"Unhandled error (suppress with 'RAY_IGNORE_UNHANDLED_ERRORS=1'): {error}")


def _tqdm_state(state):
    """A tqdm_ray bar's state relayed by a worker (the module is loaded on the first)."""
    from ray_adapter.ray.experimental import tqdm_ray

    tqdm_ray._from_worker(state)


def _metrics_port_option(kwargs):
    """``_metrics_export_port``: the loopback port application metrics are served at (Ray's
    metrics export port; None: a free one, reported by ``ray.nodes()``)."""
    port = kwargs.get("_metrics_export_port")
    if port is not None and (not isinstance(port, int) or isinstance(port, bool) or not 0 <= port < 65536):
        raise ValueError(f"_metrics_export_port must be a port number, got {port!r}")
    return port


def _cluster_nodes(address, num_cpus, num_gpus, **node_options):
    """The nodes of the ``ray.cluster_utils.Cluster`` at ``address`` (None if it is not one).
    As Ray, ValueError for what describes the node being joined (``num_cpus``, ``num_gpus``,
    ``resources``, ``labels``, ``object_store_memory``, ``_system_config``): the cluster's
    nodes have theirs."""
    if not address:
        return None
    found = _local_clusters.init_options_for(address)
    if found is None:
        return None
    _refuse_node_options(num_cpus, num_gpus, node_options)
    if _core.select_backend(None) != "embedded":
        raise gaps.attribute_gap_error("ray.cluster_utils", "Cluster")
    return found


def _refuse_node_options(num_cpus, num_gpus, node_options):
    """As Ray: what describes a node to start is a ValueError when joining a running one."""
    if num_cpus is not None or num_gpus is not None:
        raise ValueError("When connecting to an existing cluster, num_cpus and num_gpus must "
                         "not be provided.")
    for name, value in node_options.items():
        if value is not None:
            raise ValueError(f"When connecting to an existing cluster, {name} must not be provided.")


def _running_runtime(address, num_cpus, num_gpus, **node_options):
    """The runtime of this machine ``ray.init(address)`` attaches to, as Ray finds one (see
    ``core.runtimes.find_runtime``), or None. Only the embedded runtime is attachable: with
    ``RAY_ADAPTER_RUNTIME=yr-local`` an ``"auto"`` address is a ConnectionError saying so (a
    yr local-mode runtime lives in its driver's process); a Yuanrong cluster
    (``YR_SERVER_ADDRESS``) is reached by the yuanrong backend."""
    backend = _core.select_backend(None)
    if backend != "embedded":
        if address == "auto" and os.environ.get("RAY_ADAPTER_RUNTIME", "").strip().lower() == "yr-local":
            raise ConnectionError(
                "Could not find any running Ray instance: RAY_ADAPTER_RUNTIME=yr-local runs yr's "
                "local mode inside the driver's process, which no other driver can attach to. "
                "Start one with `ray start --head` (the embedded runtime) and unset "
                "RAY_ADAPTER_RUNTIME, or give a Yuanrong cluster's address.")
        return None
    if address is not None and address.startswith("ray://"):
        return None
    # Loaded here, not with `import ray`: a worker process imports ray and never attaches.
    from ray_adapter.core import runtimes as _runtimes

    found = _runtimes.find_runtime(address)
    if found is not None:
        _refuse_node_options(num_cpus, num_gpus, node_options)
    elif address not in (None, "local") and not os.environ.get("YR_SERVER_ADDRESS") \
            and address.rpartition(":")[0].split("://")[-1] in ("127.0.0.1", "localhost"):
        # The address `ray start` prints, with nothing running there: say so (a Yuanrong cluster
        # on this machine is named by YR_SERVER_ADDRESS).
        raise ConnectionError(
            f"Could not find any running Ray instance at {address}: no runtime of this machine "
            "has that address (`ray status` shows the running one; `ray start --head` starts "
            "one). A Yuanrong cluster on this machine is reached with YR_SERVER_ADDRESS.")
    return found


def _job_env(runtime_env):
    """``ray.init``'s runtime_env as the core takes it (checked and merged as Ray does)."""
    from ray_adapter.ray._private.runtime_env.validation import for_job

    return for_job(runtime_env)


def _check_address(address):
    """Ray Client (``ray://``) cannot be served; ``auto`` needs a cluster to attach to."""
    if address and address.startswith("ray://"):
        raise gaps.option_gap_error(
            "ray.init", f"address={address!r}",
            "Ray Client addresses need a Ray cluster; give a Yuanrong cluster address "
            "(host:port, or set YR_SERVER_ADDRESS) to use the yuanrong backend.")
    if address == "auto" and not os.environ.get("YR_SERVER_ADDRESS") \
            and _core.select_backend(None) == "embedded":
        raise ConnectionError(
            "Could not find any running Ray instance. ray.init(address='auto') attaches to an "
            "existing cluster: set YR_SERVER_ADDRESS to a Yuanrong cluster, or call ray.init() "
            "to start the embedded runtime.")


def _check_refs(object_refs):
    if isinstance(object_refs, ObjectRef):
        return [object_refs], True
    if isinstance(object_refs, list):
        for ref in object_refs:
            if not isinstance(ref, ObjectRef):
                raise TypeError(
                    f"Attempting to call `get` on the value {ref!r}, which is not an ray.ObjectRef.")
        return list(object_refs), False
    raise ValueError(
        f"Invalid type of object refs, {type(object_refs)}, is given. 'object_refs' must either "
        "be an ObjectRef or a list of ObjectRefs. ")


def get(object_refs, *, timeout=None, _use_object_store=False):
    """Values of one ObjectRef or a list of them (mirrors ``ray.get``).

    ``object_refs``: an ObjectRef or a list (a tuple raises ValueError, as in Ray); ``timeout``
    in seconds (None or negative: wait forever; 0: do not wait). Raises ``GetTimeoutError``
    (also a ``TimeoutError``) when not ready in time, the task's ``RayTaskError`` (also an
    instance of the user's exception class) when it raised, ``RayActorError``/``ActorDiedError``
    for a dead actor, ``TaskCancelledError``, ``WorkerCrashedError`` and ``ObjectLostError``.

    Unknown objects, as in Ray 2.60: a ref whose object the runtime does not hold (rebuilt with
    ``ray.ObjectRef(bytes.fromhex(h))`` after the object was freed, or a made-up id) is never
    ready: ``GetTimeoutError`` after ``timeout``, and without one the call waits for ever (until
    ``ray.shutdown()``). A ref made in an earlier session (before ``ray.shutdown()``) raises
    ``ValueError`` ('You are trying to access Ray objects whose owner is unknown...'). In a
    task or actor of the embedded backend an unknown object raises ``ObjectFreedError`` at once
    instead (compat matrix)."""
    if type(object_refs) is not ObjectRef:
        if type(object_refs).__name__ == "CompiledDAGRef":  # a compiled graph's step: at once
            from ray_adapter.ray.dag.compiled_dag_node import get_compiled_refs

            return get_compiled_refs(object_refs, timeout)
        if _is_generator(object_refs):
            return object_refs  # as Ray: a generator is returned as it is (iterate it for refs)
    try:
        refs, single = _check_refs(object_refs)
    except (TypeError, ValueError) as exc:
        refs, not_refs = None, exc
    if refs is None:
        # Not ObjectRefs: a compiled graph's results (ray.dag), or a mistake to report. Read
        # outside the handler, so that what a compiled result raises is not chained to it.
        from ray_adapter.ray.dag.compiled_dag_node import NOT_COMPILED, get_compiled_refs

        values = get_compiled_refs(object_refs, timeout)
        if values is NOT_COMPILED:
            _ensure_core()  # as Ray's auto-init: a bad argument still leaves it started
            raise not_refs
        return values
    core = _ensure_core()  # before the timeout is checked, as Ray's auto-init
    if _warn_blocking_get is not False:
        _blocking_get_warning()
    if timeout is not None:
        int(timeout * 1000)  # as Ray converts it: "x" raises ValueError, [1] TypeError
    if timeout is not None and timeout < 0:
        timeout = None  # as Ray: a negative timeout waits for ever
    stale = from_old_sessions(refs)
    if stale:
        raise ValueError(_UNKNOWN_OWNER_GET + "".join(f"{r.hex()}, " for r in stale) + "].")
    with translated:
        values = core.get([r._id for r in refs], timeout)
    for value in values:
        if isinstance(value, BaseException):  # (cheap test first: a value rarely is one)
            raised = stored_error(value)
            if raised is not None:
                raise raised
    return values[0] if single else values


#: Whether this process may still have to warn that a blocking ``ray.get`` stalls an async
#: actor's event loop (as Ray does, once per process): None until known, then False (warned,
#: or not an async actor's process: a process hosts one actor at most, and none after it ran
#: tasks, so what the first get finds stays true).
_warn_blocking_get = None


def _blocking_get_warning():
    global _warn_blocking_get
    ctx = context_if_started()
    if ctx is None:
        return
    if ctx.actor_is_async and os.environ.get("RAY_WARN_BLOCKING_GET_INSIDE_ASYNC", "1").lower() not in (
            "0", "false"):
        logger.warning("Using blocking ray.get inside async actor. This blocks the event loop. "
                       "Please use `await` on object ref with asyncio.gather if you want to "
                       "yield execution to the event loop instead.")
    _warn_blocking_get = False


def put(value, *, _owner=None, _tensor_transport=None):
    """Store ``value`` in the object store; returns its ObjectRef (mirrors ``ray.put``).
    Raises ``TypeError`` for an ObjectRef (wrap it in a list to store it)."""
    _ensure_core()  # first, as Ray's auto-init: a bad argument still leaves it started
    if isinstance(value, ObjectRef):
        raise TypeError(
            "Calling 'put' on an ray.ObjectRef is not allowed. If you really want to do this, "
            "you can wrap the ray.ObjectRef in a list and call 'put' on it.")
    return put_object(value)


def wait(ray_waitables, *, num_returns=1, timeout=None, fetch_local=True):
    """``(ready, not_ready)`` lists of the given refs, in input order (mirrors ``ray.wait``).

    Returns once ``num_returns`` refs are ready or ``timeout`` seconds passed; an
    ObjectRefGenerator is ready once its next ref is (or its stream ended). Raises
    ``TypeError`` for a single ref or non-refs, ``ValueError`` for duplicates or a bad count.
    ``fetch_local`` changes nothing here (every object is local to this machine).

    Unknown objects, as in Ray 2.60: a ref whose object the runtime does not hold (rebuilt
    from the hex of a freed object, or a made-up id) is never ready: it stays in ``not_ready``
    (the call returns after ``timeout``; without one, only once ``num_returns`` other refs
    are ready). A ref made in an earlier session raises ``ValueError`` ('An application is
    trying to access a Ray object whose owner is unknown(...)') unless the other refs are
    ready enough at once. In a task or actor of the embedded backend an unknown object counts
    as ready instead (compat matrix).
    """
    if isinstance(ray_waitables, ObjectRef) or _is_generator(ray_waitables):
        raise TypeError(
            "wait() expected a list of ray.ObjectRef or ray.ObjectRefGenerator, got a single "
            f"ray.ObjectRef or ray.ObjectRefGenerator {ray_waitables!r}")
    if not isinstance(ray_waitables, list):
        raise TypeError(
            "wait() expected a list of ray.ObjectRef or ray.ObjectRefGenerator, got "
            f"{type(ray_waitables)}")
    for ref in ray_waitables:
        if not isinstance(ref, ObjectRef) and not _is_generator(ref):
            raise TypeError(
                "wait() expected a list of ray.ObjectRef or ray.ObjectRefGenerator, got list "
                f"containing {type(ref)}")
    if timeout is not None and timeout < 0:
        raise ValueError(f"The 'timeout' argument must be nonnegative. Received {timeout}")
    if not ray_waitables:
        return [], []
    if len(set(ray_waitables)) != len(ray_waitables):
        raise ValueError("Wait requires a list of unique ray_waitables.")
    if num_returns <= 0:
        raise ValueError(f"Invalid number of objects to return {num_returns}.")
    if num_returns > len(ray_waitables):
        raise ValueError("num_returns cannot be greater than the number of ray_waitables "
                         "provided to ray.wait.")
    core = _ensure_core()
    by_id, ended = {}, set()
    with translated:
        for r in ray_waitables:
            if _is_generator(r):
                # A generator waits on the entry of its next item (ready once it exists);
                # one whose stream ended with every item taken is ready as it is.
                peek, finished = core.stream_peek(r._generator_ref._id)
                if finished:
                    ended.add(r)
                else:
                    by_id[peek] = r
            else:
                by_id[r._id] = r
        stale = from_old_sessions([r for r in by_id.values() if type(r) is ObjectRef])
        needed = num_returns - len(ended)
        if by_id and (needed > 0 or stale):
            # As Ray: a ref of an earlier session fails the wait unless the others answer it.
            found, _ = core.wait(list(by_id), max(1, min(needed, len(by_id))), 0 if stale else timeout)
            if stale and len(found) < needed:
                raise ValueError(_UNKNOWN_OWNER_WAIT.format(stale[0].hex()))
        elif by_id:
            found, _ = core.wait(list(by_id), 1, 0)
        else:
            found = []
    found = {by_id[i] for i in found}
    ready, not_ready = [], []
    for r in ray_waitables:  # in input order, at most num_returns ready
        (ready if (r in ended or r in found) and len(ready) < num_returns else not_ready).append(r)
    return ready, not_ready


# Ray 2.60's errors for an ObjectRef made in an earlier session (before ray.shutdown()): its
# owner is gone. A ref of this session whose object is unknown (freed, or an id made up) is
# never ready instead (see ``wait``).
# (ray.wait words the id with a space before its parenthesis, a task argument's error without.)
_UNKNOWN_OWNER_WAIT = ("An application is trying to access a Ray object whose owner is unknown({} "
                       "). " + UNKNOWN_OWNER_ADVICE.replace("{", "{{").replace("}", "}}"))
_UNKNOWN_OWNER_GET = ("You are trying to access Ray objects whose owner is unknown. "
                      + UNKNOWN_OWNER_ADVICE + ". Owners not found for objects [")


def _is_generator(value):
    from ray_adapter.ray._private.object_ref_generator import ObjectRefGenerator

    return isinstance(value, ObjectRefGenerator)


def cancel(ray_waitable, *, force=False, recursive=True):
    """Cancel the task that produces ``ray_waitable`` (mirrors ``ray.cancel``); ``ray.get``
    on it then raises ``TaskCancelledError``. ``force=True`` kills the worker running it.
    An ObjectRefGenerator's stream ends with the cancellation as its last item."""
    if _is_generator(ray_waitable):
        ray_waitable = ray_waitable.completed()
    if not isinstance(ray_waitable, ObjectRef):
        raise TypeError("ray.cancel() only supported for object refs. For actors, try ray.kill(). "
                        f"Got: {type(ray_waitable)}.")
    core = _ensure_core()
    with translated:
        if force and ids.names_actor(ray_waitable._id):  # as Ray, refused unless the call ended
            if not core.wait([ray_waitable._id], 1, 0)[0]:
                raise ValueError("force=True is not supported for actor tasks.")
        else:
            core.cancel(ray_waitable._id, force, recursive)


def kill(actor, *, no_restart=True):
    """Kill an actor now (mirrors ``ray.kill``): its process ends, pending and later calls
    raise ``ActorDiedError``; with ``no_restart=False`` it restarts if ``max_restarts`` allows."""
    from ray_adapter.ray.actor import ActorHandle

    if not isinstance(actor, ActorHandle):
        raise ValueError("ray.kill() only supported for actors. For tasks, try ray.cancel(). "
                         f"Got: {type(actor)}.")
    core = _ensure_core()
    if actor._ray_session is not None and actor._ray_session is not core:
        from ray_adapter.ray.exceptions import ActorHandleNotFoundError

        raise ActorHandleNotFoundError(
            "ActorHandle objects are not valid across Ray sessions. The actor handle was "
            f"created in job {actor._ray_actor_id[-4:].hex()}, but the current job is "
            f"{core.context().job_id.hex()}. This typically happens when you try to use an "
            "actor handle from a previous session after calling ray.shutdown() and ray.init(). "
            "Please create a new actor handle in the current session.")
    with translated:
        core.kill_actor(actor._ray_actor_id, no_restart)


def get_actor(name, namespace=None):
    """The handle of the live actor called ``name`` (mirrors ``ray.get_actor``); raises
    ``ValueError`` if there is none in ``namespace`` (default: the job's)."""
    from ray_adapter.ray.actor import ActorHandle

    if not name:
        raise ValueError("Please supply a non-empty value to get_actor")
    if namespace is not None and (not isinstance(namespace, str) or not namespace):
        raise ValueError("namespace must be None or a non-empty string.")
    from ray_adapter.core import errors as core_errors

    core = _ensure_core()
    with translated:
        try:
            info = core.get_named_actor(name, namespace)
        except core_errors.ActorNotFound:
            raise ValueError(
                f"Failed to look up actor with name '{name}'. This could because 1. You are "
                "trying to look up a named actor you didn't create. 2. The named actor died. "
                "3. You did not use a namespace matching the namespace of the actor.") from None
    return ActorHandle._from_info(info)


def get_gpu_ids():
    """GPU ids assigned to the current task or actor (mirrors ``ray.get_gpu_ids``); ``[]`` in
    the driver. Ints ``0..n-1``, or, when ``CUDA_VISIBLE_DEVICES`` was set as the runtime
    started, that variable's entries as strs (``["4"]``), as Ray returns them."""
    ctx = context_if_started()
    return list(ctx.gpu_ids) if ctx is not None else []


_core_access.set_starter(init)  # the first API call without ray.init() starts the runtime
