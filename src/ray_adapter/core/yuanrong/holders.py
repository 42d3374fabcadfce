"""Refs and actor handles pickled inside values, on the yuanrong backend.

In yr's local mode every value is packed and unpacked in this process (tasks are threads), so
the adapter tracks what a value holds, as the embedded runtime does:

- packing a value (:func:`shell.pack`: a put, task arguments, a result) holds each ref and
  handle pickled inside it (:meth:`HoldersMixin.hold_contained`), so they outlive the code that
  pickled them;
- a put's or a result's object keeps those holds until it is freed (a result's once yr has it:
  :meth:`adopt_results`); freeing cascades down nested values, iteratively;
- task and call arguments keep theirs until the call has finished (its arguments were
  unpickled by then, and whatever the call kept counts its own refs); an actor's constructor
  arguments until the actor is dead.

On a Yuanrong cluster values are unpacked in other processes the adapter cannot see: refs and
handles inside them escape tracking and are kept until shutdown (``object_escaped``).

Mixed into :class:`~ray_adapter.core.yuanrong.backend.YuanrongBackend`; state is guarded by
its lock. Releases run on the backend's release thread (which holds that lock), never in yr's
callback threads.
"""
from ray_adapter.core import serialization
from ray_adapter.core.yuanrong.completions import completion_of


def contents(packed):
    """``(refs, handles)`` held by one packed value, or None when it holds nothing."""
    if type(packed) is serialization.Serialized and (packed.refs or packed.handles):
        return list(packed.refs), list(packed.handles)
    return None


def _holds_anything(box, count):
    """Whether a call's result Box has refs or handles pickled inside any of its values."""
    if not getattr(box, "ok", False):
        return False
    values = (box.value,) if count == 1 else box.value
    try:
        return any(contents(packed) is not None for packed in values)
    except TypeError:  # not the values of ``count`` returns: let _adopt decide
        return True


class HoldersMixin:
    """Holds of values on the refs and handles pickled inside them (local mode)."""

    def hold_contained(self, refs, handles):
        """A value being packed holds ``refs`` (object ids) and ``handles`` (actor ids)."""
        with self._lock:
            for oid in refs:
                obj = self._objects.get(oid)
                if obj is not None:
                    obj.refs += 1
            for actor_id in handles:
                actor = self._actors.get(actor_id)
                if actor is not None:
                    actor.handles += 1

    def release_contained(self, held):
        """Undo :meth:`hold_contained` for ``held`` (``(refs, handles)``); frees cascade."""
        stack = [held]
        with self._lock:
            while stack:
                refs, handles = stack.pop()
                for oid in refs:
                    obj = self._objects.get(oid)
                    if obj is None:
                        continue
                    obj.refs -= 1
                    if obj.refs <= 0:
                        self._objects.pop(oid, None)
                        if obj.contained is not None:
                            stack.append(obj.contained)
                for actor_id in handles:
                    self._drop_actor_handle(actor_id)

    def release_after(self, ref, packed):
        """Release what the packed arguments of the call ``ref`` hold once it has finished."""
        held = contents(packed)
        if held is not None:
            completion_of(ref).add(lambda _v, _e: self._releases.put(self.release_contained, held))

    def adopt_results(self, ref, return_ids):
        """Once the call ``ref`` has a result, its objects keep what the packed values hold
        (released now if the object is gone already)."""
        def done(box, exc):
            if exc is None and _holds_anything(box, len(return_ids)):  # most hold nothing: no hop
                self._releases.put(self._adopt, (return_ids, box))

        completion_of(ref).add(done)

    def _adopt(self, item):
        return_ids, box = item
        ok = getattr(box, "ok", False)
        if not ok:
            return
        values = [box.value] if len(return_ids) == 1 else list(box.value)
        with self._lock:
            for oid, packed in zip(return_ids, values):
                held = contents(packed)
                if held is None:
                    continue
                obj = self._objects.get(oid)
                if obj is not None:
                    obj.contained = held
                else:
                    self.release_contained(held)
