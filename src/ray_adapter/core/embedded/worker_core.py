"""The runtime core inside a worker process: every call is a request to the driver.

Requests carry an id; the worker's reader thread hands each reply to the waiting caller
(:meth:`WorkerCore.on_reply`), or to a callback for :meth:`WorkerCore.object_future` (no
thread is started per request). Functions and classes are registered with the driver before
the first submission that uses them, in channel order, so a submission can never reach the
driver ahead of its function, whichever thread sends it.

References: this process counts its ObjectRefs and actor handles per id. The first one to an
id it does not hold yet (unpickled from an argument or a value it read) is reported to the
driver as a borrow at once, queued on the channel ahead of anything this process does next (the
result of the task that carried it, the drop of the container it came from), so the driver
never frees what a worker is about to hold. Drops (from ``__del__`` and finalizers, in any
thread) are only queued here and sent in batches by one thread (``ref_loop``), in the order
they happened; the last drop of an id returns it. Counts and the messages they decide are
changed under one lock (queueing on the channel is no I/O), so a borrow and a return of one id
always reach the driver in the order they were decided.

Cluster state (nodes, resources, placement groups, State API records) is one typed query each
(``protocol.QUERIES``, answered by ``service.ANSWERS``); those keep no state here.
"""
import contextvars
import itertools
import queue
import threading

import msgspec

from ray_adapter.core import errors, ids, serialization
from ray_adapter.core.embedded import protocol
from ray_adapter.core.embedded.protocol import from_payload, to_payload
from ray_adapter.core.embedded.task_support import retry_blob
from ray_adapter.core.execution import serialize_args, serialize_value
from ray_adapter.core.interface import ArgRef, CallContext, RuntimeCore
from ray_adapter.core.threads import start_daemon

# (task_id, task_name, actor_id) of the call running in this thread / coroutine.
current_call = contextvars.ContextVar("ray_adapter_current_call", default=(None, "", None))
#: The running call's function descriptor (``execution.function_descriptor``); "" outside one.
current_function = contextvars.ContextVar("ray_adapter_current_function", default="")


class _Slot:
    __slots__ = ("event", "message", "buffers", "callback")

    def __init__(self, callback=None):
        self.event = None if callback is not None else threading.Event()
        self.message = None
        self.buffers = None
        self.callback = callback


def _forked_error():
    return RuntimeError("this process was forked from a process connected to Ray (os.fork in a "
                        "task, or multiprocessing in an attached driver): it cannot call Ray; "
                        "only the process it was forked from talks to the runtime")


class WorkerCore(RuntimeCore):
    """The runtime core of a worker process."""

    backend_name = "embedded"

    def __init__(self, worker):
        self._worker = worker
        self._pending = {}
        self._ids = itertools.count(1)
        self._calls_minted = itertools.count(1)  # this process's submissions (their ids)
        self._ship_lock = threading.Lock()
        self._shipped = set()
        self._ref_events = queue.SimpleQueue()
        self._ref_lock = threading.Lock()  # guards both counts and the order of their messages
        self._obj_counts = {}     # object id -> ObjectRefs to it in this process
        self._handle_counts = {}  # actor id -> handles to it in this process
        # Set once the connection is over for good (an attached driver's runtime ended, see
        # attached.py): a request then raises it instead of waiting for a reply that never comes.
        self._gone = None
        self._ref_thread = start_daemon(self.ref_loop, "ray-adapter-refs")

    # -- request / reply ---------------------------------------------------------------------
    def _call(self, build, callback=None):
        """Send the request ``build(req_id)`` returns (``(message, buffers)``) and wait for the
        reply (or hand it to ``callback(message, buffers)`` and return at once)."""
        if self._worker.forked_child:  # its reply would go to the worker, never here
            raise _forked_error()
        req_id = next(self._ids)
        slot = self._pending[req_id] = _Slot(callback)
        message, buffers = build(req_id)
        try:
            self._worker.send(message, buffers)
        except BaseException:
            self._pending.pop(req_id, None)
            raise
        if self._gone is not None and self._pending.pop(req_id, None) is not None:
            raise self._gone  # the end's pass over the pending requests may have missed this one
        if callback is not None:
            return None
        self._await_reply(slot)
        return slot.message, slot.buffers

    def _await_reply(self, slot):
        """Block until ``slot``'s reply is in (the reader thread sets its event)."""
        slot.event.wait()

    def _request(self, build):
        """A request answered by a :class:`protocol.Reply`: its value, or raise its error."""
        message, buffers = self._call(build)
        value = serialization.loads(from_payload(message.value, buffers))
        if not message.ok:
            raise value
        return value

    def on_reply(self, message, buffers):
        """A reply arrived (reader thread)."""
        slot = self._pending.pop(message.req_id, None)
        if slot is None:
            return
        if slot.callback is not None:
            slot.callback(message, buffers)
            return
        slot.message, slot.buffers = message, buffers
        slot.event.set()

    def _query(self, query, buffers=(), **fields):
        """Ask the driver ``query`` (a ``protocol.QUERIES`` class) with ``fields``; its answer."""
        return self._request(lambda rid: (query(req_id=rid, **fields), buffers))

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self, options):
        raise RuntimeError("a worker process does not start a runtime")

    def shutdown(self):
        return None

    def record_metric(self, kind, name, description, tag_keys, boundaries, tags, value):
        """Posted to the driver, which exports it (no reply awaited)."""
        self._worker.post(protocol.MetricRecord(kind, name, description, list(tag_keys),
                                                [float(b) for b in boundaries or ()], dict(tags),
                                                float(value)))

    def relay(self, topic, data):
        """Posted to the driver, whose process hands it to the topic's handler."""
        self._worker.post(protocol.Relay(topic, msgspec.Raw(protocol.encode(data))))

    # -- objects -----------------------------------------------------------------------------
    def put(self, value):
        ser = serialize_value(value)

        def build(rid):
            buffers = []
            return protocol.PutReq(rid, to_payload(ser, buffers)), buffers

        return self._own([self._request(build)])[0]

    @staticmethod
    def _values(message, buffers):
        if message.error is not None:
            raise serialization.loads(from_payload(message.error, buffers))
        return [serialization.loads_value(from_payload(p, buffers)) for p in message.values]

    def get(self, object_ids, timeout):
        message, buffers = self._call(lambda rid: (protocol.GetReq(rid, list(object_ids), timeout), ()))
        return self._values(message, buffers)

    def wait(self, object_ids, num_returns, timeout):
        return self._request(lambda rid: (protocol.WaitReq(rid, list(object_ids), num_returns, timeout), ()))

    def object_future(self, object_id):
        import concurrent.futures

        future = concurrent.futures.Future()

        def settle(message, buffers):
            try:
                future.set_result(self._values(message, buffers)[0])
            except BaseException as exc:  # noqa: BLE001 - the failure belongs to the future
                future.set_exception(exc)

        self._call(lambda rid: (protocol.GetReq(rid, [object_id], None), ()), settle)
        return future

    # Reference counting (see the module notes). Objects this worker created (its puts and
    # submissions) come with the one reference the driver lent it; any other first ObjectRef
    # is a borrow reported at once.
    def _own(self, object_ids):
        with self._ref_lock:
            counts = self._obj_counts
            for oid in object_ids:
                counts[oid] = counts.get(oid, 0) + 1
        return object_ids

    def _first(self, counts, key, message):
        """Count one more ref to ``key``; the first one queues ``message(key)`` on the channel
        (under the lock, so it precedes whatever drop of ``key`` is decided after)."""
        with self._ref_lock:
            n = counts.get(key, 0)
            counts[key] = n + 1
            if n == 0:
                self._worker.channel.enqueue(protocol.encode(message(key)))
        if n == 0:
            self._worker.channel.mark_posted()

    def add_local_reference(self, object_id):
        self._first(self._obj_counts, object_id, lambda oid: protocol.RefUpdate(ref_borrow=[oid]))

    def remove_local_reference(self, object_id):
        self._ref_events.put(("-", object_id))  # from __del__: queued, never sent here

    def object_escaped(self, object_id):
        self._ref_events.put(("pin", object_id))

    def block_released(self, key):
        """The views of one arena block received from the driver are gone (from ``__del__``)."""
        self._ref_events.put(("unpin", key))
    @staticmethod
    def _dropped(counts, key):
        left = counts.get(key, 0) - 1
        if left > 0:
            counts[key] = left
            return False
        counts.pop(key, None)
        return True

    def stop_ref_loop(self):
        """End :meth:`ref_loop` after what is queued (an attached driver's connection is over)."""
        self._ref_events.put(("stop", None))

    def ref_loop(self):
        stop = False
        while not stop:
            event = self._ref_events.get()
            update = protocol.RefUpdate()
            closed = []
            flushed = []  # events of callers waiting for what was queued before them
            with self._ref_lock:
                while event is not None:
                    kind, target = event
                    if kind == "-":
                        if self._dropped(self._obj_counts, target):
                            update.decref.append(target)
                    elif kind == "pin":
                        update.pin.append(target)
                    elif kind == "h-":
                        if self._dropped(self._handle_counts, target):
                            update.unborrow.append(target)
                    elif kind == "hpin":
                        update.escape.append(target)
                    elif kind == "unpin":
                        update.unpin.append(list(target))
                    elif kind == "sclose":
                        closed.append(target)
                    elif kind == "flushed":
                        flushed.append(target)
                    elif kind == "stop":
                        stop = True
                    try:
                        event = self._ref_events.get_nowait()
                    except queue.Empty:
                        event = None
                if update.decref or update.pin or update.unborrow or update.escape or update.unpin:
                    self._worker.channel.enqueue(protocol.encode(update))
                else:
                    update = None
            if update is not None:
                self._worker.channel.flush()
            for generator_id in closed:
                self._worker.send(protocol.StreamCloseQuery(req_id=0, generator_id=generator_id))
            for event in flushed:
                event.set()

    def _refs_queued_so_far(self, timeout=10.0):
        """Wait until the reference drops queued so far are on the channel (so a request sent
        next reaches the runtime after them), for at most ``timeout`` seconds."""
        done = threading.Event()
        self._ref_events.put(("flushed", done))
        done.wait(timeout)

    # -- tasks and actors --------------------------------------------------------------------
    def _ship(self, key, function):
        """Register ``key`` with the driver ahead of its first use (queued, in channel order)."""
        if key in self._shipped:
            return
        blob = serialization.dumps_plain(function)  # user code: outside the lock
        with self._ship_lock:
            if key not in self._shipped:
                self._worker.channel.enqueue(protocol.encode(protocol.FunctionReq(key, blob)))
                self._shipped.add(key)

    @staticmethod
    def _deps(args, kwargs):
        deps = [a.object_id for a in args if type(a) is ArgRef]
        if kwargs:
            deps.extend(v.object_id for v in kwargs.values() if type(v) is ArgRef)
        return deps

    def submit_task(self, function, function_key, args, kwargs, options):
        self._ship(function_key, function)
        ser = serialize_args(args, kwargs)
        wire = protocol.TaskOptionsWire(
            options.name, options.num_returns, dict(options.resources), options.max_retries,
            options.max_calls, retry_blob(options.retry_exceptions), options.runtime_env or None,
            options.scheduling, options.generator or "", options.generator_backpressure)

        parent = current_call.get()[0] or b""  # the call this thread runs (a recursive cancel)
        # Minted here and sent without waiting (see submit_actor_task) when nothing but the
        # runtime's state could refuse it: the job's runtime env, no placement, not streaming.
        salt = self._worker.id_salt
        posted = (salt and self._worker.job_id and options.runtime_env is None
                  and options.scheduling is None and options.generator != "streaming")
        task_id = (ids.caller_task_id(next(self._calls_minted), salt, job=self._worker.job_id)
                   if posted else b"")

        def build(rid):
            buffers = []
            return protocol.SubmitTaskReq(rid, function_key, to_payload(ser, buffers),
                                          self._deps(args, kwargs), wire, parent, task_id), buffers

        if posted:
            return self._post_minted(build, task_id, options.num_returns)
        return self._own(self._request(build))

    def cancel(self, object_id, force, recursive):
        return self._query(protocol.CancelQuery, object_id=object_id, force=force, recursive=recursive)

    def create_actor(self, cls, class_key, args, kwargs, options):
        self._ship(class_key, cls)
        ser = serialize_args(args, kwargs)
        o = options
        wire = protocol.ActorOptionsWire(
            class_name=o.class_name, resources=dict(o.resources), max_restarts=o.max_restarts,
            max_task_retries=o.max_task_retries, max_concurrency=o.max_concurrency,
            is_async=o.is_async, name=o.name, namespace=o.namespace, get_if_exists=o.get_if_exists,
            detached=o.detached, runtime_env=o.runtime_env or None, scheduling=o.scheduling,
            # cloudpickled: method options may name classes defined in __main__ (by value)
            handle_meta=serialization.dumps_plain(o.handle_meta),
            concurrency_groups=dict(o.concurrency_groups or {}), max_pending_calls=o.max_pending_calls,
            generator_backpressure=o.generator_backpressure,
            method_resources=dict(o.method_resources))

        def build(rid):
            buffers = []
            return protocol.CreateActorReq(rid, class_key, to_payload(ser, buffers),
                                           self._deps(args, kwargs), wire), buffers

        return self._request(build)

    def submit_actor_task(self, actor_id, method_name, args, kwargs, options):
        """An actor call. Its id is minted here and the call sent without waiting (its return
        ids are known: the caller owns them, the runtime records them before anything later
        on this channel), unless a refusal must be raised at once (an actor with
        ``max_pending_calls``), the call streams, or the runtime gave no salt: then the
        runtime mints the id and answers with the return ids."""
        ser = serialize_args(args, kwargs)
        retries = options.max_task_retries
        salt = self._worker.id_salt
        posted = salt and not options.refused_at_submit and options.generator != "streaming"
        task_id = ids.caller_task_id(next(self._calls_minted), salt, actor_id) if posted else b""

        def build(rid):
            buffers = []
            return protocol.CallActorReq(
                rid, actor_id, method_name, to_payload(ser, buffers), self._deps(args, kwargs),
                options.name or method_name, options.num_returns, options.generator or "",
                options.generator_backpressure, options.concurrency_group or "",
                -2 if retries is None else retries, retry_blob(options.retry_exceptions),
                task_id), buffers

        if posted:
            return self._post_minted(build, task_id, options.num_returns)
        return self._own(self._request(build))

    def _post_minted(self, build, task_id, num_returns):
        """Send the submission ``build(0)`` makes, whose ``task_id`` this process minted,
        without waiting: its return ids (owned here from now on) are returned at once."""
        if self._worker.forked_child:
            raise _forked_error()
        if self._gone is not None:
            raise self._gone
        message, buffers = build(0)
        self._worker.send(message, buffers)
        return self._own(ids.IdFactory.returns(task_id, num_returns) if num_returns else [])

    # -- streams (owned by the driver; items taken here are owned by this worker) ------------
    def stream_next(self, generator_id, timeout):
        taken = self._request(lambda rid: (protocol.StreamNextReq(rid, generator_id, timeout), ()))
        if taken is not None:
            self._own([taken])
        return taken

    def stream_peek(self, generator_id):
        return self._query(protocol.StreamPeekQuery, generator_id=generator_id)

    def stream_close(self, generator_id):
        self._ref_events.put(("sclose", generator_id))  # from a finalizer: queued

    def kill_actor(self, actor_id, no_restart):
        return self._query(protocol.KillActorQuery, actor_id=actor_id, no_restart=no_restart)

    # Actor handles: the first handle to an actor in this process registers a borrow with the
    # driver (queued at once, so it precedes the result of the call that carried the handle);
    # the drop of the last one returns it.
    def add_actor_handle(self, actor_id):
        self._first(self._handle_counts, actor_id, lambda aid: protocol.RefUpdate(borrow=[aid]))

    def remove_actor_handle(self, actor_id):
        self._ref_events.put(("h-", actor_id))  # from a finalizer: queued, not sent here

    def actor_handle_escaped(self, actor_id):
        self._ref_events.put(("hpin", actor_id))

    def get_named_actor(self, name, namespace):
        return self._query(protocol.GetNamedActorQuery, name=name, namespace=namespace)

    def list_named_actors(self, all_namespaces):
        return self._query(protocol.ListNamedActorsQuery, all_namespaces=all_namespaces)

    def exit_current_actor(self):
        task_id, _, actor_id = current_call.get()
        if actor_id is None:
            raise RuntimeError("exit_actor() is called outside an actor")
        w = self._worker
        w.exit_actor_after_call = w.exit_by_call = True
        w.exit_call = task_id  # the actor ends after this call, even if its exception is caught
        if w.actor is not None and w.actor.is_async:
            return True  # unwound by an Exception: a SystemExit would end the asyncio loop
        raise SystemExit(0)

    def context(self):
        task_id, task_name, actor_id = current_call.get()
        w = self._worker
        a = w.assignment
        host = w.actor
        if host is not None and task_id is not None:
            canceled = task_id in host.cancel_flags
        else:
            canceled = task_id is not None and task_id in w.cancelled
        return CallContext(
            job_id=w.job_id, node_id=w.node_id, worker_id=w.worker_id, namespace=w.namespace,
            is_driver=False, task_id=task_id,
            actor_id=actor_id if actor_id is not None else w.actor_id, task_name=task_name,
            actor_name=w.actor_name, assigned_resources=dict(w.assigned_resources),
            gpu_ids=list(w.gpu_ids), was_restarted=w.restart_count > 0,
            actor_handle_meta=w.actor_handle_meta, runtime_env=w.runtime_env or {},
            node_ip_address=w.node_ip,
            placement_group_id=(a.group_id or None) if a is not None else None,
            capture_child_tasks=bool(a is not None and a.capture),
            gcs_address=w.address,
            accelerator_ids={k: list(v) for k, v in a.accelerators.items()} if a is not None else {},
            is_canceled=canceled, actor_is_async=host is not None and host.is_async,
            function_name=current_function.get())

    # -- cluster state -----------------------------------------------------------------------
    def nodes(self):
        return self._query(protocol.NodesQuery)

    def cluster_resources(self):
        return self._query(protocol.ClusterResourcesQuery)

    def available_resources(self):
        return self._query(protocol.AvailableResourcesQuery)

    # -- placement groups, state -------------------------------------------------------------
    def create_placement_group(self, bundles, strategy, name, lifetime, label_selectors=None):
        return self._query(protocol.CreatePlacementGroupQuery, bundles=bundles, strategy=strategy,
                           name=name, lifetime=lifetime, label_selectors=label_selectors,
                           creator_actor=self._worker.actor_id)

    def remove_placement_group(self, placement_group_id):
        return self._query(protocol.RemovePlacementGroupQuery, placement_group_id=placement_group_id)

    def placement_group_table(self, placement_group_id):
        return self._query(protocol.PlacementGroupTableQuery, placement_group_id=placement_group_id)

    def placement_group_ready(self, placement_group_id, value):
        buffers = []
        payload = to_payload(serialization.dumps(value), buffers)
        return self._own([self._query(protocol.PlacementGroupReadyQuery, buffers,
                                      placement_group_id=placement_group_id, value=payload)])[0]

    def wait_placement_group(self, placement_group_id, timeout):
        # The driver never blocks a worker's reader: wait on a ready() object here instead.
        oid = self.placement_group_ready(placement_group_id, None)
        try:
            ready, _ = self.wait([oid], 1, timeout)
            if not ready:
                return False
            try:
                self.get([oid], 0)
            except errors.PlacementGroupRemoved:
                raise
            except errors.CoreError:
                return False
            return True
        finally:
            self.remove_local_reference(oid)

    def captured_placement_group(self):
        a = self._worker.assignment
        if a is not None and a.capture and a.group_id:
            return a.group_id, a.bundle_index
        return None

    def state(self, kind):
        # This process's drops count first, as Ray's owner applies a ``del`` at once (not in a
        # forked child: no references thread came along; its query is refused below).
        if self._gone is None and not self._worker.forked_child:
            self._refs_queued_so_far()
        return self._query(protocol.StateQuery, kind=kind)

    def resources_per_node(self, which):
        return self._query(protocol.ResourcesPerNodeQuery, which=which)

    def object_store_stats(self):
        return self._query(protocol.ObjectStoreStatsQuery)




def not_found(kind, key):
    return errors.CoreError(f"{kind} {key!r} is not registered with this worker")
