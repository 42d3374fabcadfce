"""The embedded runtimes running on this machine that a driver can attach to.

Every embedded runtime (one a driver's ``ray.init()`` started, or a headless one started by
``ray start --head``) listens for drivers on a Unix socket (:mod:`.attach_server`) and leaves a
record here saying where: a JSON file per runtime in this user's registry directory,
``<RAY_TMPDIR or the temporary directory>/ray-adapter-<uid>/`` (made 0700 and refused when
another user owns it: nobody else can reach the sockets or forge a record). ``ray start``
also names its runtime in ``current_cluster``, as Ray's ``ray start`` writes
``/tmp/ray/ray_current_cluster``.

How an address is found, as Ray's ``get_ray_address_from_environment`` finds one (the caller
has already put ``RAY_ADDRESS`` in place of a missing address):

- ``None``: the runtime ``ray start`` left in ``current_cluster``, if it runs; else None (the
  caller starts a runtime of its own);
- ``"auto"``: that one, else the newest running runtime of this user; else
  :class:`NoRuntime`;
- ``"host:port"``: the running runtime with that address, else
  None (not a runtime of this machine: a Yuanrong cluster's address).

A record whose process is gone is stale (its runtime was SIGKILLed): it is removed when met,
with its socket directory. A socket directory of a process that is gone and left no record (it
was killed while its runtime started or stopped) is removed when the next runtime starts.

Thread-safety: stateless; each function reads or writes the files it names (a record is
written to a temporary name and renamed, so a reader never sees half of one).
"""
import json
import os
import shutil
import tempfile
import time

CURRENT = "current_cluster"
#: Set in a submitted job's entrypoint (:mod:`.jobs`): the job's runtime env (JSON), which the
#: driver it starts takes as its job's when it attaches (as Ray's job config carries it).
JOB_RUNTIME_ENV_VAR = "RAY_ADAPTER_JOB_RUNTIME_ENV"
#: Set there too: the job's submission id, which that driver reports when it attaches (the
#: job's record then names the driver's job id and pid, as Ray's does).
JOB_SUBMISSION_ID_VAR = "RAY_ADAPTER_JOB_SUBMISSION_ID"
_RECORD_SUFFIX = ".runtime.json"


class NoRuntime(ConnectionError):
    """``address="auto"`` and no runtime of this user runs on this machine."""


def registry_dir(create=True):
    """This user's registry directory (0700); raises PermissionError when another user owns
    it (or it is not private)."""
    root = os.path.join(os.environ.get("RAY_TMPDIR") or tempfile.gettempdir(),
                        f"ray-adapter-{os.getuid()}")
    if create:
        os.makedirs(root, mode=0o700, exist_ok=True)
    try:
        info = os.lstat(root)
    except FileNotFoundError:
        return root
    if info.st_uid != os.getuid() or info.st_mode & 0o077 or not os.path.isdir(root):
        raise PermissionError(f"{root} is not a private directory of this user: ray-adapter "
                              "does not use it (remove it, or set RAY_TMPDIR)")
    return root


def runtime_dir(pid):
    """A new private directory for the sockets and files of the runtime of process ``pid``
    (the directories that ended processes left without a record are removed first)."""
    root = registry_dir()
    _remove_orphan_dirs(root)
    return tempfile.mkdtemp(prefix=f"rt-{pid}-", dir=root)


def _remove_orphan_dirs(root):
    """Remove each ``rt-<pid>-*`` directory under ``root`` whose process is gone and that no
    record names (a record's own directory goes with the record: :func:`remove_stale`)."""
    for name in os.listdir(root):
        if not name.startswith("rt-"):
            continue
        pid = name.split("-", 2)[1]
        if not pid.isdigit() or os.path.exists(os.path.join(root, f"{pid}{_RECORD_SUFFIX}")):
            continue
        try:
            os.kill(int(pid), 0)
            continue  # runs (or runs under another user, or is a zombie: left for later)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        except OSError:
            continue


def alive(pid):
    """Process ``pid`` runs (a zombie, ended but not yet reaped, does not)."""
    import psutil  # only when a runtime is looked for

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True


def register(record):
    """Publish ``record`` (a dict: ``address``, ``socket``, ``pid``, ``dir``, ``version``,
    ``started_by``, ...); returns the record's path."""
    path = os.path.join(registry_dir(), f"{record['pid']}{_RECORD_SUFFIX}")
    record = dict(record, registered=time.time())
    _write(path, record)
    return path


def unregister(pid):
    """Remove the record of the runtime of process ``pid`` (and ``current_cluster`` when it
    names it)."""
    root = registry_dir(create=False)
    _remove(os.path.join(root, f"{pid}{_RECORD_SUFFIX}"))
    current = _read(os.path.join(root, CURRENT))
    if current is not None and current.get("pid") == pid:
        _remove(os.path.join(root, CURRENT))


def set_current(record):
    """``ray start --head``: ``record`` is the runtime ``ray.init()`` attaches to."""
    _write(os.path.join(registry_dir(), CURRENT), record)


def running():
    """The records of every runtime of this user that runs, newest first (stale ones
    removed)."""
    root = registry_dir(create=False)
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        if not name.endswith(_RECORD_SUFFIX):
            continue
        record = _read(os.path.join(root, name))
        if record is not None and _live(record):
            found.append(record)
    return sorted(found, key=lambda r: r.get("registered", 0), reverse=True)


def current():
    """The runtime ``ray start`` named, if it still runs."""
    record = _read(os.path.join(registry_dir(create=False), CURRENT))
    return record if record is not None and _live(record) else None


def find(address):
    """The record of the runtime ``address`` names (see the module's notes), or None."""
    if address == "local":
        return None
    if address is None:
        return current()
    if address == "auto":
        record = current()
        if record is None:
            records = running()
            record = records[0] if records else None
        if record is None:
            raise NoRuntime("Could not find any running Ray instance. Please specify the one to "
                            "connect to by setting `--address` flag or `RAY_ADDRESS` environment "
                            "variable.")
        return record
    wanted = _normal(address)
    for record in running():
        if _normal(record["address"]) == wanted:
            return record
    return None


def _normal(address):
    host, _, port = address.rpartition(":")
    host = host.split("://", 1)[-1]
    if host in ("localhost", "127.0.0.1", "0.0.0.0", ""):
        host = "127.0.0.1"
    return f"{host}:{port}"


def _live(record):
    """The record's runtime runs; a stale record is removed with its directory."""
    pid = record.get("pid")
    if not isinstance(pid, int):
        return False
    if not alive(pid):
        remove_stale(record)
        return False
    return os.path.exists(record.get("socket", ""))


def remove_stale(record):
    """Remove what the runtime of a dead process left: its record and its directory."""
    unregister(record["pid"])
    directory = record.get("dir")
    if directory and os.path.dirname(directory) == registry_dir(create=False):
        shutil.rmtree(directory, ignore_errors=True)


def _write(path, record):
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(record, out)
    os.replace(tmp, path)


def _read(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (FileNotFoundError, ValueError):
        return None


def _remove(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
