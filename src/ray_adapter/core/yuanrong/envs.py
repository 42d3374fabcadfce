"""Runtime envs on the yuanrong backend.

Every task and actor runs in its env merged over the job's (:func:`merge`): ``env_vars`` are set
around each call (yr local mode) or passed to yr (a cluster). The job's ``working_dir`` and
``py_modules`` (local paths, checked by the proxy):

- yr local mode: tasks are threads of the driver, so there is no process to start in a copy:
  the paths are put first on the driver's ``sys.path`` (imports from them work; a ``.zip``
  working_dir through zipimport) and the cwd stays the driver's; ``excludes`` change nothing
  (no copy is made). The ``worker_process_setup_hook`` runs once, in the driver, at
  ``ray.init`` (the one process the tasks run in).
- a cluster: ``working_dir`` and ``env_vars`` go to ``yr.Config(runtime_env=...)``: the path
  must be one the cluster's nodes can read (yr's own rule).

Tasks and actors cannot name a working_dir or py_modules of their own here: that needs a
package of this session (the embedded runtime's), which this backend does not make.
"""
import os
import sys
import threading

from ray_adapter.core import errors
from ray_adapter.core.runtime_env import SETUP_HOOK_ENV_VAR, merge, run_setup_hook

_hooks_lock = threading.Lock()
_hooks = {}  # setup hook key -> Future of its failure text (None: it ran), in this process


class SharedEnviron:
    """The ``env_vars`` of the calls and actors running in this process, in ``os.environ`` while
    any of them holds them.

    In yr's local mode every call and actor is a thread of the driver (on a cluster, of a yr
    worker process), and the environment is one per process: a call's variables are set when it
    starts and an actor's for its lifetime; each variable goes back to the value it had before
    the first holder once the last one lets go (:meth:`release`), and every one at the runtime's
    shutdown (:meth:`release_all`). Holders that overlap with different values see the latest
    (the compat matrix says so). Without the count, two overlapping calls restored each other's
    values, and an actor's stayed after shutdown: a driver that later started a real Ray
    passed ``__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR`` on to Ray's workers, which died of it.

    It reads and writes the process environment itself, past the per-call overlay of
    :mod:`.thread_env` (a call's own view), whichever call's thread it runs in.

    Thread-safety: the counts (``_held``) are guarded by ``_lock``, a leaf lock; ``os.environ``
    is written under it (``putenv``, no I/O) so a release never undoes a newer set.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._held = {}  # name -> [number of holders, value before the first (None: unset)]

    def acquire(self, env_vars):
        """Set ``env_vars`` (``{name: value}``); returns the token for :meth:`release`."""
        if not env_vars:
            return None
        with self._lock:
            for name, value in env_vars.items():
                entry = self._held.get(name)
                if entry is None:
                    entry = self._held[name] = [0, _process_get(name)]
                entry[0] += 1
                os._Environ.__setitem__(os.environ, name, str(value))
        return tuple(env_vars)

    def release(self, token):
        """One holder of the variables of ``token`` is done with them."""
        if not token:
            return
        with self._lock:
            for name in token:
                entry = self._held.get(name)
                if entry is None:  # released by release_all meanwhile
                    continue
                entry[0] -= 1
                if entry[0] <= 0:
                    del self._held[name]
                    self._restore(name, entry[1])

    def original(self, name):
        """The process environment's value of ``name`` before any holder set it (None: unset),
        as a process of its own would have it."""
        with self._lock:
            entry = self._held.get(name)
            return entry[1] if entry is not None else _process_get(name)

    def release_all(self):
        """Every variable back to its value before the first holder (the runtime shut down)."""
        with self._lock:
            held, self._held = self._held, {}
            for name, (_, before) in held.items():
                self._restore(name, before)

    @staticmethod
    def _restore(name, before):
        if before is None:
            try:
                os._Environ.__delitem__(os.environ, name)
            except KeyError:
                pass
        else:
            os._Environ.__setitem__(os.environ, name, before)


def _process_get(name):
    """The process environment's value of ``name`` (None: unset), not a call's overlay."""
    try:
        return os._Environ.__getitem__(os.environ, name)
    except KeyError:
        return None


#: The one per process (``os.environ`` is).
shared_environ = SharedEnviron()


def setup_once(env_vars):
    """Run the setup hook ``env_vars`` names once per process: the first caller runs it
    (outside the lock), the others wait for its outcome. Returns its failure text, or None."""
    import concurrent.futures

    key = env_vars.get(SETUP_HOOK_ENV_VAR)
    if not key:
        return None
    with _hooks_lock:
        future = _hooks.get(key)
        first = future is None
        if first:
            future = _hooks[key] = concurrent.futures.Future()
    if first:
        try:
            future.set_result(run_setup_hook(env_vars))
        except BaseException as exc:  # SystemExit in the hook: the waiters learn of it too
            future.set_result(f"the setup hook raised {exc!r}")
            raise
    return future.result()


#: The fields of the job's env a cluster's yr.Config takes.
YR_CONFIG_FIELDS = ("env_vars", "working_dir")


class JobEnv:
    """The job's runtime env on the yuanrong backend (``ray.init(runtime_env=...)``), and each
    task's or actor's env merged over it (see the module notes).

    Owned by the thread that starts and shuts down the runtime (``start`` / ``stop``); the
    other methods only read what ``start`` set, from any thread.
    """

    def __init__(self, env, local_mode):
        """``env``: the job's runtime env (a dict, checked by the proxy; None: none);
        ``local_mode``: yr's local mode (tasks are threads of this process)."""
        self.runtime_env = dict(env or {})
        self.runtime_env.pop("excludes", None)  # nothing is copied here; Ray drops it too
        self.local_mode = local_mode
        self._added_paths = []

    def start(self):
        """Local mode: the job env's paths on sys.path, its setup hook run here. Raises
        EnvSetupFailed when the hook fails."""
        if not self.local_mode:
            return
        paths = []
        if self.runtime_env.get("working_dir"):
            paths.append(self.runtime_env["working_dir"])
        for module in self.runtime_env.get("py_modules") or ():  # `import name` finds it
            paths.append(os.path.dirname(os.path.normpath(module)))
        for path in reversed(paths):
            if path not in sys.path:
                sys.path.insert(0, path)
                self._added_paths.append(path)
        failure = setup_once(self.runtime_env.get("env_vars") or {})
        if failure is not None:
            raise errors.EnvSetupFailed(failure)

    def stop(self):
        """Take the job's paths off sys.path again (at shutdown)."""
        for path in self._added_paths:
            try:
                sys.path.remove(path)
            except ValueError:
                pass
        self._added_paths = []

    def config_env(self):
        """The part of the job's env yr's ``Config`` takes (None: nothing); in local mode only
        env_vars (the paths are this process's business)."""
        fields = YR_CONFIG_FIELDS[:1] if self.local_mode else YR_CONFIG_FIELDS
        env = {k: self.runtime_env[k] for k in fields if self.runtime_env.get(k)}
        return env or None

    def effective(self, requested):
        """``requested`` (a task's or actor's env, or None) over the job's env. Raises
        EnvSetupFailed for a working_dir or py_modules of its own."""
        if requested and (requested.get("working_dir") or requested.get("py_modules")):
            raise errors.EnvSetupFailed(
                "the yuanrong backend has no packages of this session: a task or actor cannot "
                "name a working_dir or py_modules of its own (set them in ray.init)")
        return merge(self.runtime_env, requested) if requested else self.runtime_env

    def env_vars(self, requested):
        """The ``env_vars`` (``{name: value}``) a call with env ``requested`` runs with."""
        return dict(self.effective(requested).get("env_vars") or {})
