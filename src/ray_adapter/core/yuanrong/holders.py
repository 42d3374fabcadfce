"""What a packed value holds: the refs and actor handles pickled inside it (yuanrong backend).

In yr's local mode every value is packed and unpacked in this process (tasks are threads), so
the adapter tracks what a value holds, as the embedded runtime does:

- packing a value (:func:`shell.pack`: a put, task arguments, a result) holds each ref and
  handle pickled inside it (``YuanrongBackend.hold_contained``: the object table's counts and
  the actor table's handles), so they outlive the code that pickled them;
- a put's or a result's object keeps those holds until it is freed (a result's once yr has it:
  ``ObjectTable.adopt_results``); freeing cascades down nested values, iteratively
  (``ObjectTable.release_contained``, which hands the handles to the actor table);
- task and call arguments keep theirs until the call has finished (its arguments were
  unpickled by then, and whatever the call kept counts its own refs); an actor's constructor
  arguments until the actor is dead.

On a Yuanrong cluster values are unpacked in other processes the adapter cannot see: refs and
handles inside them escape tracking and are kept until shutdown (``escaped``).

Releases run on the backend's release thread, never in yr's callback threads.
"""
from ray_adapter.core import serialization


def contents(packed):
    """``(refs, handles)`` held by one packed value, or None when it holds nothing."""
    if type(packed) is serialization.Serialized and (packed.refs or packed.handles):
        return list(packed.refs), list(packed.handles)
    return None


def holds_anything(box, count):
    """Whether a call's result Box has refs or handles pickled inside any of its ``count``
    values."""
    if not getattr(box, "ok", False):
        return False
    values = (box.value,) if count == 1 else box.value
    try:
        return any(contents(packed) is not None for packed in values)
    except TypeError:  # not the values of ``count`` returns: let the adoption decide
        return True
