"""The yuanrong backend's tasks: one yr function (``shell.run_keyed``) runs every remote
function, its options built once per shape; cancellation as Ray's.

Thread-safety: ``_runner``, ``_runners`` and ``_blobs`` are caches filled on first use with
single dict operations (two threads racing build the same value twice, harmlessly); the rest
is the collaborators' own.
"""
from ray_adapter.core import errors, ids, serialization
from ray_adapter.core.execution import cancelled_failure
from ray_adapter.core.yuanrong import shell
from ray_adapter.core.yuanrong.objects import fail_futures


class TaskCalls:
    """``f.remote()`` and ``ray.cancel`` over yr.

    Collaborators: ``yr``, ``id_factory``, ``objects`` (arguments, returns, futures),
    ``streams`` (streaming calls), ``options_map`` (InvokeOptions), ``job_env`` (env_vars),
    ``local`` (local mode's resource grants, or None), ``local_mode``."""

    def __init__(self, yr, id_factory, objects, streams, options_map, *, job_env, local, local_mode):
        self.yr = yr
        self._ids = id_factory
        self.objects = objects
        self.streams = streams
        self.options_map = options_map
        self.job_env = job_env
        self._local = local
        self.local_mode = local_mode
        self._runner = None
        self._runners = {}  # (resources, retries, placement) -> the runner with those options
        self._blobs = {}    # function key -> what yr ships of the function

    def submit(self, function, function_key, args, kwargs, options):
        """Run ``function`` as a task: the ids of its returns (``[completion id]`` for a
        streaming generator)."""
        runner = self._runner
        if runner is None:
            runner = self._runner = self.yr.invoke(shell.run_keyed)
        blob = self._blobs.get(function_key)
        if blob is None:
            # Local mode runs tasks in this process: the registry is shared, nothing to ship.
            shell.FUNCTIONS[function_key] = function
            blob = self._blobs[function_key] = b"" if self.local_mode else serialization.dumps_plain(function)
        objects = self.objects
        packed, dep_indexes, deps = objects.pack_args(args, kwargs)
        task_id = self._ids.task()
        env = self.job_env.env_vars(options.runtime_env)
        retry_on = options.retry_exceptions
        placement = options.scheduling
        in_group = placement is not None and placement.in_group
        streaming = options.generator == "streaming"
        meta = (task_id, options.name, options.num_returns or 1, env, dict(options.resources),
                retry_on, options.max_retries if retry_on else 0, dep_indexes, streaming,
                (placement.group_id, bool(placement.capture)) if in_group else None,
                placement if self.local_mode else None)  # local mode: granted by the adapter
        shape = (tuple(sorted(options.resources.items())), options.max_retries,
                 placement.key() if placement is not None else None)
        shaped = self._runners.get(shape)
        if shaped is None:  # InvokeOptions and yr's options() are built once per shape
            opts = self.options_map.invoke_options(options.resources, retries=options.max_retries,
                                                   placement=placement)
            shaped = self._runners[shape] = runner.options(opts)
        if streaming:
            def invoke():
                stream_ref = shaped.invoke(function_key, blob, meta, packed, *deps)
                objects.release_after(stream_ref, packed)
                return stream_ref

            return self.streams.open_call(invoke, task_id, options.generator_backpressure, name=options.name)
        ref = shaped.invoke(function_key, blob, meta, packed, *deps)
        objects.release_after(ref, packed)  # what the arguments hold, once the task ended
        return objects.returns(ref, task_id, options.num_returns, name=options.name)

    def cancel(self, object_id, force, recursive):
        """``ray.cancel``: a task not started never runs (TaskCancelledError); a running one
        fails with RayTaskError(TaskCancelledError) (on yr-local it cannot be interrupted: it
        runs on and its result is dropped); an actor call is flagged (``is_canceled()``)."""
        objects = self.objects
        obj = objects.entry(object_id)
        if obj is None:
            return
        future = objects.future_for(obj)
        if future.done():
            return
        task_id = object_id[:ids.TASK_ID_SIZE]
        started = True
        if obj.actor_id is not None:
            # Local mode: a call whose method has started ends as Ray ends it (see
            # cancel_actor_call), its own answer says so; one not started never runs, and fails
            # now. A cluster's call is flagged (it sees is_canceled()) and fails now.
            if not self.local_mode:
                shell.request_cancel(task_id)
            elif shell.cancel_actor_call(task_id):
                self.streams.cancel(task_id)
                return
        elif self.local_mode:
            # yr's local mode loses the worker thread of a cancelled running task and then
            # schedules later tasks onto it (they never run): never let it cancel. A task that
            # has not started yet is skipped by the runner; a running one (a thread: it cannot
            # be interrupted) finishes and its result is dropped.
            started = not shell.cancel_local(task_id)
            if started and self._local.abort(task_id, errors.TaskCancelled(task_id)):
                started = False  # it was waiting for its resources: it never ran
        else:
            try:
                self.yr.cancel(obj.ref, allow_force=bool(force), allow_recursive=bool(recursive))
            except Exception:  # yr cancels stateless tasks only; the ref still fails below
                pass
        if obj.actor_id is None and started:
            # A running task is interrupted in Ray: RayTaskError(TaskCancelledError).
            error = cancelled_failure(task_id, obj.name or "task")
            if not self.local_mode:  # (it ran in a runtime process of the cluster, unknown here)
                error.pid = None
        else:
            error = errors.TaskCancelled(task_id)
        self.streams.cancel(task_id)
        fail_futures([future], error)
