"""Actor method calls: queued per actor in arrival order, sent in order, answered, cancelled.

Calls are queued per actor in arrival order (which keeps each caller's submission order) and
sent in that order once their arguments are ready; they are pipelined behind the constructor,
at most a window of them ahead of the worker (``actor_records.call_window``; refilled when half
are done): a burst of calls waits in the driver's queue, not in the worker's socket.
As in Ray, order holds per caller (the driver, or one worker process): a call whose arguments
are pending holds back the later calls of its own caller only, and another caller's ready call
goes ahead of it.
A call made while the actor restarts waits for the restart if it may be retried; if not, it
waits at most :data:`UNAVAILABLE_AFTER_S` and then fails with ActorUnavailable, as in Ray,
where such a call fails once the caller finds the actor gone, about that long later (a quick
restart is over by then and the call runs). ``max_pending_calls`` caps each caller's
unfinished calls (PendingCallsLimit). A call whose method raised an exception its
``retry_exceptions`` names is run again while its retries last.

Mixed into :class:`~ray_adapter.core.embedded.actors.ActorManager`: the records are actor
state, guarded by the manager's lock; messages are queued on the worker's channel under it and
written after it is released.
"""
from ray_adapter.core import errors, ids
from ray_adapter.core.embedded import protocol
from ray_adapter.core.embedded.actor_records import ActorState, CallRecord
from ray_adapter.core.embedded.protocol import Dep, to_payload

#: How long a call made while its actor restarts, and that may not be retried, waits for the
#: restart before it fails with ActorUnavailable (seconds; Ray 2.60 takes 1.7-2 s here).
UNAVAILABLE_AFTER_S = 2.0


class ActorCallsMixin:
    """Method calls of the actor manager's actors."""

    def submit_call(self, actor_id, method, args, deps, options, carried=(), caller=None):
        """Queue a method call; returns its return ids (``[]`` for ``num_returns=0``; one id,
        the completion, for a streaming call). Raises PendingCallsLimit."""
        rt = self.rt
        task_id = rt.ids.task(actor_id)
        streaming = options.generator == "streaming"
        num_returns = 1 if streaming else options.num_returns
        return_ids = ids.IdFactory.returns(task_id, num_returns or 1)
        held = False
        with self._lock:
            actor = self._actors.get(actor_id)
            call = CallRecord(task_id, actor, method, args, deps, carried, options, return_ids, caller)
            dead = actor is None or actor.state is ActorState.DEAD
            if not dead:
                limit = actor.options.max_pending_calls
                count = actor.unfinished.get(caller, 0)
                if limit > 0 and count >= limit:
                    raise errors.PendingCallsLimit(actor_id, actor.options.class_name, method, limit)
                held = actor.state is ActorState.RESTARTING and call.retries_left == 0
                actor.unfinished[caller] = count + 1
                call.counted = True
        if deps or args.refs:  # top-level and nested argument refs, until it finishes
            rt.objects.hold(deps, args.refs)
        rt.objects.create(return_ids, 1 if num_returns else 0, task_id)
        rt.events.submitted(task_id, options.name, "ACTOR_TASK", actor_id, func_name=method)
        if streaming:
            rt.streams.open(task_id, call.backpressure > 0 or (
                actor is not None and actor.options.generator_backpressure > 0))
        if dead:
            failure = actor.death if actor is not None else errors.ActorDied(
                actor_id, errors.ActorDeath.UNKNOWN)
            self._finish_call(call, [rt.error_data(failure)], True)
            return return_ids if num_returns else []
        with self._lock:
            if actor.state is ActorState.DEAD:  # died meanwhile: fail it as die() would have
                dead = True
            else:
                self._calls[task_id] = call
                actor.pending.append(call)
                self.scope.carry_locked(carried)
        if dead:
            self._finish_call(call, [rt.error_data(actor.death)], True)
        else:
            if held:
                rt.timers.call_later(UNAVAILABLE_AFTER_S, lambda: self._unavailable(call))
            self._flush(actor)
        return return_ids if num_returns else []

    def _unavailable(self, call):
        """A call held while its actor restarts (timer thread): failed with ActorUnavailable if
        the actor is restarting still. Sent already, behind the new constructor, it is
        withdrawn: the worker skips it (Cancel) unless the constructor has just ended and the
        call begun (then, as Ray says of such a call, it may or may not have run); its answer
        is ignored."""
        actor = call.actor
        worker = None
        with self._lock:
            if actor.state is not ActorState.RESTARTING or call.cancel_requested:
                return  # restarted (the call ran or runs), dead (failed with the death), or
                # cancelled by its caller (answered so)
            if call in actor.pending:
                actor.pending.remove(call)
            elif actor.inflight.get(call.task_id) is call:
                del actor.inflight[call.task_id]
                worker = actor.worker
                if worker is not None:
                    worker.enqueue(protocol.Cancel(call.task_id, False))
            else:
                return  # cancelled meanwhile
            self._calls.pop(call.task_id, None)
        if worker is not None:
            worker.flush()
        error = errors.ActorUnavailable(actor.actor_id, while_restarting=True)
        self._finish_call(call, [self.rt.error_data(error)], True)
        self._flush(actor)  # the calls behind it, if it was the head waiting for its arguments
        self.scope.end_if_idle(actor)  # its handles may all be gone: nothing left to wait for

    def _flush(self, actor):
        """Send the queued calls whose arguments are ready, in order per caller (see the module
        notes): a call waiting for its arguments holds back its own caller's later calls."""
        rt = self.rt
        sent_streams = []
        wait_for = []
        with self._lock:
            worker = actor.worker
            if worker is None or actor.state is ActorState.DEAD:
                return
            pending = actor.pending
            blocked = set()  # callers with a call waiting for its arguments
            kept = []        # their calls, taken off the queue on the way, in order
            inflight, window = actor.inflight, actor.window
            while pending and len(inflight) < window and not (blocked and pending.only_callers_in(blocked)):
                call = pending.popleft()
                if call.caller in blocked:
                    kept.append(call)
                    continue
                if call.deps and not all(rt.objects.ready_flags(call.deps)):
                    blocked.add(call.caller)
                    kept.append(call)
                    if not call.waiting:
                        call.waiting = True
                        wait_for.append(call)
                    continue
                call.waiting = False
                buffers = []
                args = to_payload(call.args, buffers)
                # A failed argument goes too, flagged: the call fails in the actor, as Ray's
                # (its error quotes the argument's, with the actor's pid and repr).
                deps = [Dep(oid, to_payload(data, buffers), is_error)
                        for oid, (data, is_error) in zip(call.deps, rt.objects.values(call.deps))] \
                    if call.deps else []
                actor.inflight[call.task_id] = call
                worker.enqueue(protocol.CallActor(
                    task_id=call.task_id, method=call.method, args=args, deps=deps,
                    num_returns=1 if call.streaming else (call.num_returns or 1), name=call.name,
                    group=call.group, streaming=call.streaming, backpressure=call.backpressure,
                    retry_exceptions=call.retry_blob), buffers)
                rt.events.running(call.task_id, worker)
                if call.streaming:
                    sent_streams.append(call.task_id)
            if kept:
                pending.put_back(kept)
        for task_id in sent_streams:
            rt.streams.attach(task_id, worker)
        worker.flush()
        for call in wait_for:
            rt.objects.when_ready(call.deps, lambda ok, a=actor: ok and self._flush(a))

    def _sendable_locked(self, actor):
        """(Under the lock.) The queued calls a flush would send were there no window, in
        order: the ready ones of callers not held back by a call waiting for its arguments."""
        objects = self.rt.objects
        blocked, out = set(), []
        for call in actor.pending:
            if call.caller in blocked:
                continue
            if call.deps and not all(objects.ready_flags(call.deps)):
                blocked.add(call.caller)
                continue
            out.append(call)
        return out

    def on_call_done(self, worker, message, buffers):
        retry = False
        with self._lock:
            actor = worker.actor
            call = actor.inflight.pop(message.task_id, None) if actor is not None else None
            if call is None:
                return
            if not message.ok and message.retryable and call.retries_left != 0 \
                    and actor.state is not ActorState.DEAD:
                left = call.retries_left
                if call.retries_left > 0:
                    call.retries_left -= 1
                actor.pending.appendleft(call)
                retry = True
            else:
                self._calls.pop(call.task_id, None)
        datas = [protocol.from_payload(p, buffers) for p in message.results]
        if retry:
            self.rt.notice_retry(call.name, left, datas[0])
            self._flush(actor)
            return
        self._finish_call(call, datas, not message.ok)
        if actor.pending and len(actor.inflight) <= actor.window // 2:
            self._flush(actor)  # refill the window once half of it is done (large writes)
        self.scope.end_if_idle(actor)

    def _finish_call(self, call, datas, is_error, cancelled=False):
        rt = self.rt
        nested = call.args.refs if call.args is not None else ()
        call.args = None  # its arguments (shared buffers among them) are not needed any more
        rt.events.finished(call.task_id, not is_error)
        if call.counted:
            call.counted = False
            with self._lock:
                unfinished = call.actor.unfinished
                left = unfinished.get(call.caller, 0) - 1
                if left > 0:
                    unfinished[call.caller] = left
                else:
                    unfinished.pop(call.caller, None)
        if call.deps or nested:
            rt.objects.release(call.deps, nested)
        self.scope.uncarry(call.carried)
        rt.seal_results(call.return_ids, datas, is_error)
        if call.streaming:  # a cancelled stream drops what was not taken, as in Ray
            rt.streams.end(call.task_id, drop_untaken=is_error and (cancelled or call.cancel_requested))

    def cancel_call(self, task_id):
        """Cancel an actor call: dropped if not sent yet, else the actor is asked to cancel it."""
        with self._lock:
            call = self._calls.get(task_id)
            if call is None or call.actor is None:
                return
            actor = call.actor
            if call in actor.pending:
                actor.pending.remove(call)
                self._calls.pop(task_id, None)
                worker = None
            else:
                worker = actor.worker
                if worker is None:
                    return
                call.cancel_requested = True
                worker.enqueue(protocol.Cancel(task_id, False))
        if worker is None:
            self._finish_call(call, [self.rt.error_data(errors.TaskCancelled(task_id))], True, cancelled=True)
            self._flush(actor)
            self.scope.end_if_idle(actor)  # out of scope with nothing left: it ends now
        else:
            worker.flush()

