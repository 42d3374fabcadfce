"""The end of a yr call, watched once per call, whatever the adapter wants to do then.

yr's ``ObjectRef.get_future()`` makes a new future at every call, registered with yr's store,
and in local mode that store keeps every registration for the rest of the session (with the
future, the ref it points to and every callback added to it). The adapter needs several
things done when a call ends (settle the future a ``get`` waits on, adopt what the result
holds, release what the arguments held, give back local-mode resources, forget a dropped
call), so it watches each ref once (:func:`completion_of`) and fans out from there; once the
call has ended nothing of the adapter's stays reachable from yr's store (the registered
trampoline lets go of its target, the ref is unhooked from yr's future), so the only thing
kept per call is what yr itself keeps.

Thread-safety: callbacks run in the thread that completes the call (yr's), or at once in the
caller's when the call has ended already; ``Completion`` guards its own state with a leaf lock.
"""
import concurrent.futures
import threading
import traceback

_ATTR = "_ray_adapter_completion"
_create_lock = threading.Lock()


def completion_of(ref):
    """The :class:`Completion` of yr ObjectRef ``ref`` (made, and registered with yr, once)."""
    completion = getattr(ref, _ATTR, None)
    if completion is None:
        with _create_lock:
            completion = getattr(ref, _ATTR, None)
            if completion is None:
                completion = Completion(ref)
                setattr(ref, _ATTR, completion)
    return completion


class _Trampoline:
    """What yr's futures hold: a reference to the completion, dropped once it fired."""

    __slots__ = ("target",)

    def __init__(self, target):
        self.target = target

    def __call__(self, future):
        target = self.target
        if target is not None and target.fired(future, self):
            self.target = None


class Completion:
    """Callbacks ``fn(value, exc)`` run once the call's value (or its exception) is there."""

    __slots__ = ("_lock", "_callbacks", "_outcome", "_wrapper")

    def __init__(self, ref):
        self._lock = threading.Lock()
        self._callbacks = []
        self._outcome = None
        self._wrapper = wrapper = ref.get_future()
        wrapper.add_done_callback(_Trampoline(self))

    def fired(self, future, trampoline):
        """A yr future of the call is done; True once the value is there. Local mode resolves a
        ref's future to the store's future of the value: the chain is followed."""
        exc = future.exception()
        value = None
        if exc is None:
            value = future.result()
            if isinstance(value, concurrent.futures.Future):
                value.add_done_callback(trampoline)
                return False
        wrapper, self._wrapper = self._wrapper, None
        if wrapper is not None:
            wrapper.__dict__.pop("object_ref", None)  # yr keeps the wrapper: let the ref go
        with self._lock:
            self._outcome = (value, exc)
            callbacks, self._callbacks = self._callbacks, None
        for callback in callbacks:  # one failing must not keep the others from running
            try:
                callback(value, exc)
            except Exception:  # noqa: BLE001 - a bug of ours: shown, not swallowed
                traceback.print_exc()
        return True

    def add(self, callback):
        """Run ``callback(value, exc)`` when the call ends (now, if it has)."""
        with self._lock:
            if self._outcome is None:
                self._callbacks.append(callback)
                return
            value, exc = self._outcome
        callback(value, exc)

    @property
    def done(self):
        return self._outcome is not None
