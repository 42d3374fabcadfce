"""yr-local: three defects of the openYuanrong SDK's local mode (0.9.x), repaired where they sit.

yr's local mode runs each stateless call on an "instance" (a thread with a queue) that its
task manager creates on demand. Three of its steps are wrong, and each reaches Ray
programs run on yr-local:

1. **A lost instance (a task that never runs).** To scale out, yr's instance manager first
   hands the instance's creation to a new worker thread (``LocalClient.create``) and only
   then registers, with its object store, the future that the creation settles. When the
   worker finishes the creation before the registration (the scaling thread descheduled for
   a moment: a loaded machine), the store finds no future, the instance never becomes
   active, and the task waiting for it never runs: ``ray.get`` times out on a trivial task.
   Repaired by registering the creation's future before the worker starts; yr's own
   registration right after sets the same future again.
2. **Every session's threads and task records live on.** ``yr.finalize`` in local mode
   clears the object store but neither stops the session's instances (two threads each: its
   queue and its pool) nor drops its task records (each with its call's arguments): a
   process that starts and shuts down yr-local sessions (a test suite) keeps them all.
   Repaired by stopping the finishing session's instances and clearing its task manager
   after yr's own finalize, and by stopping at once an instance that yr's scheduling thread
   was still creating when the session ended. A call still running then finishes on its
   pool thread (a thread cannot be interrupted) and its result is dropped, as at the end of
   a process. Left as it is: yr's scheduling thread itself (one per session, idle; it has
   no way to end).
3. **Every task's arguments are kept for the session.** yr's task manager adds a record
   per stateless call, holding the call's arguments, and never removes it: 300 calls of
   ``f.remote(arg)`` with a 4 MB argument left the driver 1.2 GB larger. Repaired by dropping
   a call's record once its future is settled (ended, failed or cancelled); yr's scheduler
   already skips an id whose record is gone.

Each repair wraps one SDK method, checks the attributes it relies on, and leaves the method
as it is when they are not there (a later SDK): it never makes a working SDK fail.

Thread-safety: :func:`install` is called by the backend's start (one backend at a time);
the wrappers keep no state of their own.
"""
import functools
import logging

_logger = logging.getLogger(__name__)
_MARK = "_ray_adapter_repair"


def install():
    """Apply the repairs to the installed SDK (once per process; idempotent)."""
    try:
        from yr.libruntime_pb2 import InvokeType
        from yr.local_mode import local_client, local_mode_runtime, task_manager
        from yr.local_mode.local_object_store import LocalObjectStore
    except ImportError:  # an SDK without this local mode: nothing to repair
        return
    client = local_client.LocalClient
    if not getattr(client.create, _MARK, False):
        client.create = _registering_create(client.create, InvokeType.CreateInstanceStateless,
                                            LocalObjectStore)
    runtime = local_mode_runtime.LocalModeRuntime
    if not getattr(runtime.finalize, _MARK, False):
        runtime.finalize = _clearing_finalize(runtime.finalize)
    manager = task_manager.TaskManager
    if not getattr(manager.submit_task, _MARK, False):
        manager.submit_task = _forgetting_submit(manager.submit_task)


def _registering_create(create, stateless, store):
    @functools.wraps(create)
    def wrapper(self, task):
        future = getattr(task, "future", None)
        ids = getattr(task, "object_ids", None)
        if getattr(task, "invoke_type", None) == stateless and future is not None and ids:
            store().set_return_obj(ids[0], future)  # before the worker can settle it
        instance_id = create(self, task)
        if instance_id and getattr(self, "_running", True) is False:
            # The session ended while yr's scheduling thread was creating it: stopped at once,
            # as the finalize repair stopped the others (else it runs for the process's life).
            _stop_instances(self, instance_id)
        return instance_id

    setattr(wrapper, _MARK, True)
    return wrapper


def _clearing_finalize(finalize):
    @functools.wraps(finalize)
    def wrapper(self):
        finalize(self)
        # The session's own collaborators (private to yr's runtime; absent: left as they are).
        tasks = getattr(self, "_LocalModeRuntime__task_mgs", None)
        if getattr(tasks, "clear", None) is not None:
            _quietly(tasks.clear)
        client = getattr(self, "_LocalModeRuntime__invoke_client", None)
        if client is not None:
            # What yr's LocalClient.clear does, but each instance stopped on its own (see
            # _stop_instances); from now on the client refuses new ones.
            client._running = False  # noqa: SLF001
            _stop_instances(client)

    setattr(wrapper, _MARK, True)
    return wrapper


def _stop_instances(client, instance_id=None):
    """Take instance ``instance_id`` (None: every one) from yr's LocalClient ``client`` and
    stop it: outside the client's lock (a stop joins the instance's thread), each on its own
    (a failing stop must not leave the others running). Nothing when the client lacks the
    attributes this relies on."""
    lock, workers = getattr(client, "_lock", None), getattr(client, "workers", None)
    if lock is None or not isinstance(workers, dict):
        return
    with lock:
        if instance_id is None:
            stopping = list(workers.values())
            workers.clear()
        else:
            stopping = [w for w in (workers.pop(instance_id, None),) if w is not None]
    for worker in stopping:
        _quietly(worker.stop)


def _quietly(step):
    try:
        step()
    except Exception:  # noqa: BLE001 - the session is over either way
        _logger.debug("clearing yr local mode's session: %r failed", step, exc_info=True)


def _forgetting_submit(submit_task):
    @functools.wraps(submit_task)
    def wrapper(self, task):
        submit_task(self, task)
        records = getattr(self, "_TaskManager__pending_tasks", None)
        lock = getattr(self, "_TaskManager__task_lock", None)
        future = getattr(task, "future", None)
        if records is None or lock is None or future is None:
            return
        task_id = task.task_id

        def forget(_future):
            with lock:
                records.pop(task_id, None)

        future.add_done_callback(forget)  # at once when it is already settled

    setattr(wrapper, _MARK, True)
    return wrapper

