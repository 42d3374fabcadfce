"""Runtime envs of the embedded runtime: packages (copies of ``working_dir`` / ``py_modules``)
and the start-up spec of worker processes per env.

As Ray does, a local ``working_dir`` or ``py_modules`` entry named in ``ray.init`` is copied
once, when the runtime starts, into this session's directory, leaving out what ``excludes``,
``.gitignore`` / ``.rayignore`` files (each relative to its own directory; ``.gitignore`` not
when ``RAY_RUNTIME_ENV_IGNORE_GITIGNORE=1``) and Ray's default excludes (``.git``, ``.venv``,
``venv``, ``__pycache__``; ``RAY_OVERRIDE_RUNTIME_ENV_DEFAULT_EXCLUDES`` overrides them)
match, with gitignore rules (:mod:`pathspec`). A ``.zip`` working_dir is extracted. Each copy
is named by a URI like Ray's (``gcs://_ray_pkg_<content hash>.zip``), which is what envs
carry from then on (and what ``get_runtime_context().runtime_env`` shows).

A :class:`WorkerSpec` says how to start a worker process for an env: its environment
(``env_vars`` over the driver's), its cwd (the working_dir copy), its import path
(``PYTHONPATH``: the working_dir copy, then each py_modules copy, then, without a working_dir,
the driver's own code folders) and its interpreter (``py_executable``: a command prefix, as in
Ray; None for the driver's). Workers are pooled per spec key.

The session directory (``<RAY_TMPDIR or tmp>/ray-adapter-session-*``) goes with the session: removed at
``shutdown``, by the worker template when the driver dies however (SIGKILL included: the
template sees its control socket close), and, should both be gone, by the next runtime started
on this machine: the driver holds a ``flock`` on the directory while it lives, and a session
directory whose lock can be taken belongs to a dead driver (:func:`remove_stale_sessions`;
Ray likewise cleans its session directories up).

Thread-safety: ``_lock`` (a leaf lock) guards the tables; copying happens outside it (at
``ray.init``, before any task).
"""
import fcntl
import os
import shutil
import tempfile
import threading

from ray_adapter.core import errors
from ray_adapter.core.runtime_env import (default_excludes, merge, package_files, process_key,
                                          py_executable)

PACKAGE_PREFIX = "gcs://_ray_pkg_"
SESSION_PREFIX = "ray-adapter-session-"
_MAKING_PREFIX = "ray-adapter-making-"  # a session directory before its lock is held
#: The largest package (bytes) Ray accepts; larger ones fail as they do in Ray.
MAX_PACKAGE_BYTES = 512 * 1024 * 1024


class WorkerSpec:
    """How a worker process for one env starts: ``environ`` (its whole environment), ``cwd``
    (None: the driver's), ``py_executable`` (the command that runs its interpreter, a shell
    command prefix as Ray's ``py_executable``; None: the driver's ``sys.executable``) and
    ``env`` (the runtime env it reports); ``key`` pools it."""

    __slots__ = ("key", "env", "environ", "cwd", "py_executable")

    def __init__(self, key, env, environ, cwd, py_executable=None):
        self.key, self.env, self.environ, self.cwd = key, env, environ, cwd
        self.py_executable = py_executable


def _package_name(files, salt):
    import hashlib  # (only to package a working_dir / py_modules: not on every ray.init's path)

    digest = hashlib.sha1(salt.encode())
    for rel, path in sorted(files):
        digest.update(rel.encode())
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    return f"_ray_pkg_{digest.hexdigest()[:16]}"


def _session_root():
    """Where session directories go: ``RAY_TMPDIR`` (Ray's root for its session files) when
    set, else the temporary directory."""
    return os.environ.get("RAY_TMPDIR") or tempfile.gettempdir()


def _new_session_dir():
    """``(path, fd)``: a new session directory and a descriptor of it that holds its flock.
    It gets its session name only once locked, so a sweep never takes a live one for stale."""
    making = tempfile.mkdtemp(prefix=_MAKING_PREFIX, dir=_session_root())
    fd = os.open(making, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    path = os.path.join(os.path.dirname(making), SESSION_PREFIX + os.path.basename(making)[len(_MAKING_PREFIX):])
    os.rename(making, path)
    return path, fd


def remove_stale_sessions(tmp=None):
    """Remove the session directories of drivers that are gone (their flock is free); returns
    how many. Directories of live drivers (and of other users, which are not ours to remove)
    stay."""
    tmp = tmp or _session_root()
    removed = 0
    try:
        entries = [e for e in os.scandir(tmp) if e.name.startswith(SESSION_PREFIX)]
    except OSError:
        return 0
    for entry in entries:
        try:
            fd = os.open(entry.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # a live driver holds it
            os.close(fd)
            continue
        try:
            shutil.rmtree(entry.path)
            removed += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


class RuntimeEnvs:
    """Packages and worker specs of one session. ``base_environ``: the environment of a
    default worker (the driver's, with the hook on and the driver's code on PYTHONPATH)."""

    def __init__(self, base_environ):
        self._base = dict(base_environ)
        self._lock = threading.Lock()
        self._root = None
        self._root_fd = None  # holds the session directory's flock while this session lives
        self._packages = {}  # package URI -> its directory
        self._specs = {}     # process key -> WorkerSpec
        self.job = None      # the job's WorkerSpec (start_job)

    def start_job(self, env):
        """Package the job's env (see :meth:`package_job_env`); returns it, with :attr:`job`
        its WorkerSpec."""
        remove_stale_sessions()  # of drivers killed before they (and their template) could
        env = self.package_job_env(env)
        self.job = self.spec(env)
        return env

    def effective(self, requested, parent=None):
        """The runtime env a task or actor runs in: ``requested`` over the env of whoever
        submits it (``parent``: a worker's spec; None: the job's); None when that is just the
        job's env. Raises EnvSetupFailed (at ``.remote()``) for a package that is not there."""
        parent = parent or self.job
        if not requested:
            return None if parent is self.job else parent.env
        env = merge(parent.env, requested)
        self.spec(env)
        return env

    def spec_of(self, env):
        """The WorkerSpec of an effective env (None, for the job's env: the pool's default)."""
        return self.spec(env) if env else None

    # -- packages ----------------------------------------------------------------------------
    def _session_dir(self):
        if self._root is None:
            self._root, self._root_fd = _new_session_dir()
        return self._root

    def package_root(self):
        """This session's directory, made now if it was not (packages of submitted jobs go
        there too)."""
        return self._session_dir()

    def add_package(self, uri, directory):
        """Register ``directory`` (an extracted upload) as the package ``uri`` (``gcs://...``)."""
        with self._lock:
            self._packages[uri] = directory

    @property
    def session_dir(self):
        """This session's directory (None while nothing was packaged)."""
        return self._root

    def _package(self, kind, source, excludes):
        """Copy ``source`` (a directory, a .zip working_dir, a .py module) into a new package;
        returns its URI. Raises ValueError (as Ray) for one over the size limit."""
        if os.path.isdir(source):
            files = package_files(source, default_excludes() + list(excludes or ()))
            prefix = os.path.basename(os.path.normpath(source)) if kind == "py_modules" else ""
        elif kind == "working_dir" and source.endswith(".zip"):
            files, prefix = [(os.path.basename(source), source)], None
        else:  # a single-file module
            files, prefix = [(os.path.basename(source), source)], ""
        size = sum(os.path.getsize(p) for _, p in files)
        if size >= MAX_PACKAGE_BYTES:
            raise ValueError(f"Package size ({size / 2 ** 20:.2f}MiB) exceeds the maximum size of "
                             f"{MAX_PACKAGE_BYTES / 2 ** 20:.2f}MiB. To exclude large files, add "
                             "them to '.gitignore' or '.rayignore' files, or use the 'excludes' "
                             "option in the runtime_env.")
        name = _package_name(files, f"{kind}:{prefix}")
        target = os.path.join(self._session_dir(), f"{kind}_files", name)
        uri = f"{PACKAGE_PREFIX}{name[len('_ray_pkg_'):]}.zip"
        if not os.path.isdir(target):
            if prefix is None:
                import zipfile  # (only for a zip archive: not on every ray.init's path)

                with zipfile.ZipFile(source) as archive:
                    archive.extractall(target)
            else:
                for rel, path in files:
                    dest = os.path.join(target, prefix, rel)
                    os.makedirs(os.path.dirname(dest), exist_ok=True)
                    shutil.copy2(path, dest)
                os.makedirs(target, exist_ok=True)
        with self._lock:
            self._packages[uri] = target
        return uri

    def package_job_env(self, env):
        """The job's env with local working_dir / py_modules copied into packages (their URIs
        in their place; ``excludes`` dropped, as Ray drops it after packaging)."""
        env = dict(env or {})
        excludes = env.pop("excludes", None)
        if env.get("working_dir") and not env["working_dir"].startswith(PACKAGE_PREFIX):
            env["working_dir"] = self._package("working_dir", env["working_dir"], excludes)
        if env.get("py_modules"):
            env["py_modules"] = [m if m.startswith(PACKAGE_PREFIX) else self._package("py_modules", m, excludes)
                                 for m in env["py_modules"]]
        return env

    def _directory(self, uri):
        with self._lock:
            path = self._packages.get(uri)
        if path is None:
            raise errors.EnvSetupFailed(f"the package {uri} is not one of this session's "
                                        "(only those ray.init created can be named)")
        return path

    # -- worker specs --------------------------------------------------------------------------
    def spec(self, env):
        """The WorkerSpec for an effective env (packages given by URI). Raises EnvSetupFailed
        for a package this session does not have."""
        key = process_key(env)
        with self._lock:
            spec = self._specs.get(key)
        if spec is not None:
            return spec
        environ = dict(self._base)
        environ.update((env or {}).get("env_vars") or {})
        cwd, paths = None, []
        if env and env.get("working_dir"):
            cwd = self._directory(env["working_dir"])
            paths.append(cwd)
        for module in (env or {}).get("py_modules") or ():
            paths.append(self._directory(module))
        user_paths = os.environ.get("PYTHONPATH", "")
        if cwd is None:
            paths.append(self._base.get("PYTHONPATH", ""))
        elif user_paths:
            paths.append(user_paths)
        environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        spec = WorkerSpec(key, dict(env or {}), environ, cwd, py_executable(env))
        with self._lock:
            return self._specs.setdefault(key, spec)

    def close(self):
        """Remove this session's packages."""
        root, self._root = self._root, None
        fd, self._root_fd = self._root_fd, None
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)
        if fd is not None:
            os.close(fd)
