"""The runtimes of this machine, for ``ray.init`` and the ``ray`` command: finding one to attach
to, starting and stopping headless ones (``ray start --head`` / ``ray stop``). The embedded
backend's runtimes are the ones that can be attached to (see
:mod:`ray_adapter.core.embedded.local_runtimes`); the proxy reaches them only through here.
"""
from ray_adapter.core.embedded import head, local_runtimes


def find_runtime(address):
    """The runtime on this machine that ``init(address=...)`` attaches to, as Ray finds one
    (``None``: the one ``ray start --head`` started, if it runs; ``"auto"``: that one or any
    running; ``"host:port"``: the one with that address), as a record for
    ``InitOptions.attach``; None when there is none to attach to (start one, or the address is
    a cluster's). Raises ConnectionError (Ray's plain class) for ``"auto"`` when none runs, as
    Ray does.
    """
    try:
        return _find(address)
    except local_runtimes.NoRuntime as e:
        raise ConnectionError(str(e)) from None


def _find(address):
    """:func:`find_runtime`, raising the registry's NoRuntime for ``"auto"`` when none runs."""
    try:
        return local_runtimes.find(address)
    except PermissionError:
        if address == "auto":
            raise ConnectionError("Could not find any running Ray instance: this user's "
                                  "registry of runtimes is not private") from None
        return None


def start_head(options):
    """Start a headless runtime of the embedded backend in a process of its own (``ray start
    --head``): ``options`` a dict (``num_cpus``, ``num_gpus``, ``resources``, ``labels``,
    ``object_store_memory``, ``port``). Returns its record (``address``, ``pid``, ``log``:
    the file its output goes to, ...) once drivers can attach; raises RuntimeError (the
    reason) when it cannot start."""
    return head.start(options)


def stop_heads(force=False, grace=10.0):
    """Stop every headless runtime of this user on this machine (``ray stop``): SIGTERM, SIGKILL
    after ``grace`` seconds (at once with ``force``); what a killed one left is removed. Returns
    their records."""
    return head.stop(force=force, grace=grace)


def running_runtimes():
    """Records of the runtimes of this user running on this machine, newest first."""
    return local_runtimes.running()


def observe(address):
    """A connection of its own to the runtime of this machine at ``address`` (``"auto"``: the
    one ``ray start`` started, else any running; ``"host:port"``: the one with that address)
    for a tool's look, whatever this process's own session is: an attached core (an observer:
    no job of its own; ``state(kind)`` answers the State API) that the caller ends with
    ``shutdown()``. None when no runtime has that address (for ``"auto"``: none runs);
    ConnectionError when the runtime found cannot be reached."""
    from ray_adapter.core.embedded.attached import AttachedCore
    from ray_adapter.core.interface import InitOptions

    try:
        record = _find(address)
    except local_runtimes.NoRuntime:
        return None
    if record is None:
        return None
    core = AttachedCore()
    core.start(InitOptions(attach=dict(record, observer=True), log_to_driver=False))
    return core
