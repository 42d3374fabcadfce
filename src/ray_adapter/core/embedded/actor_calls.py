"""Actor method calls: queued per actor in arrival order, sent in order, answered, cancelled.

Calls are queued per actor in arrival order (which keeps each caller's submission order) and
sent while the head call's arguments are ready; they are pipelined behind the constructor.
Mixed into :class:`~ray_adapter.core.embedded.actors.ActorManager`: the records are actor
state, guarded by the manager's lock; messages are queued on the worker's channel under it and
written after it is released.
"""
from ray_adapter.core import errors, ids
from ray_adapter.core.embedded import protocol
from ray_adapter.core.embedded.actor_records import ActorState, CallRecord
from ray_adapter.core.embedded.protocol import Dep, to_payload


class ActorCallsMixin:
    """Method calls of the actor manager's actors."""

    def submit_call(self, actor_id, method, args, deps, name, num_returns, carried=()):
        """Queue a method call; returns its return ids (``[]`` for ``num_returns=0``)."""
        rt = self.rt
        task_id = rt.ids.task(actor_id)
        return_ids = ids.IdFactory.returns(task_id, num_returns or 1)
        if deps or args.refs:  # top-level and nested argument refs, until it finishes
            rt.objects.hold(deps, args.refs)
        rt.objects.create(return_ids, 1 if num_returns else 0, task_id)
        with self._lock:
            actor = self._actors.get(actor_id)
            call = CallRecord(task_id, actor, method, args, deps, carried, num_returns, name, return_ids)
            dead = actor is None or actor.state is ActorState.DEAD
            if not dead:
                self._calls[task_id] = call
                actor.pending.append(call)
                self.scope.carry_locked(carried)
        if dead:
            death = actor.death if actor is not None else errors.ActorDied(actor_id, errors.ActorDeath.UNKNOWN)
            self._finish_call(call, [rt.error_data(death)], True)
        else:
            self._flush(actor)
        return return_ids if num_returns else []

    def _flush(self, actor):
        """Send queued calls in order while the head call's arguments are ready."""
        rt = self.rt
        failed_calls = []
        wait_for = None
        with self._lock:
            worker = actor.worker
            if worker is None or actor.state is ActorState.DEAD:
                return
            while actor.pending:
                call = actor.pending[0]
                if call.deps and not all(rt.objects.ready_flags(call.deps)):
                    if not call.waiting:
                        call.waiting = True
                        wait_for = call
                    break
                actor.pending.popleft()
                call.waiting = False
                failed = rt.objects.first_error(call.deps) if call.deps else None
                if failed is not None:
                    self._calls.pop(call.task_id, None)
                    failed_calls.append((call, failed))
                    continue
                buffers = []
                args = to_payload(call.args, buffers)
                deps = [Dep(oid, to_payload(data, buffers))
                        for oid, (data, _) in zip(call.deps, rt.objects.values(call.deps))]
                actor.inflight[call.task_id] = call
                worker.enqueue(protocol.CallActor(call.task_id, call.method, args, deps,
                                                  call.num_returns or 1, call.name), buffers)
        worker.flush()
        for call, failed in failed_calls:
            self._finish_call(call, [failed], True)
        if wait_for is not None:
            rt.objects.when_ready(wait_for.deps, lambda ok, a=actor: ok and self._flush(a))

    def on_call_done(self, worker, message, buffers):
        with self._lock:
            actor = worker.actor
            call = actor.inflight.pop(message.task_id, None) if actor is not None else None
            if call is None:
                return
            self._calls.pop(call.task_id, None)
        datas = [protocol.from_payload(p, buffers) for p in message.results]
        self._finish_call(call, datas, not message.ok)
        self.scope.end_if_idle(actor)

    def _finish_call(self, call, datas, is_error):
        rt = self.rt
        if call.deps or call.args.refs:
            rt.objects.release(call.deps, call.args.refs)
        self.scope.uncarry(call.carried)
        n = len(call.return_ids)
        if len(datas) < n:
            datas = list(datas) + [datas[-1]] * (n - len(datas))
        rt.adopt_contained(datas)
        rt.objects.seal_many([(oid, data, is_error) for oid, data in zip(call.return_ids, datas)])

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
                worker.enqueue(protocol.Cancel(task_id, False))
        if worker is None:
            self._finish_call(call, [self.rt.error_data(errors.TaskCancelled(task_id))], True)
            self._flush(actor)
        else:
            worker.flush()
