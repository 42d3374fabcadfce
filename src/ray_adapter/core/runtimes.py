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
    a cluster's). Raises ConnectionError for ``"auto"`` when none runs, as Ray does.
    """
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
