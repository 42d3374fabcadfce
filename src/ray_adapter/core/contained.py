"""Object refs and actor handles pickled inside a value, noted while it is serialized.

:func:`ray_adapter.core.serialization.dumps` opens a collection for the value it pickles; an
object ref or actor handle being pickled calls :func:`record_ref` / :func:`record_handle`, so
the runtime learns with the value which refs and handles travel inside it (no unpickling to
find them). Outside a collection (a user pickling a ref to a file) they return False and the
caller reports the escape to the runtime instead. Imports nothing heavy: ``import ray`` uses it.
"""
import contextvars

_contained = contextvars.ContextVar("ray_adapter_contained", default=None)


def collecting():
    """Open a collection in this context; returns ``(found, token)``: ``found`` is
    ``(refs, handles)``, lists of ids, and ``token`` goes to :func:`done`."""
    found = ([], [])
    return found, _contained.set(found)


def done(token):
    _contained.reset(token)


def record_ref(object_id):
    """True if a collection in this context noted ``object_id`` (an object ref being pickled)."""
    found = _contained.get()
    if found is None:
        return False
    found[0].append(object_id)
    return True


def record_handle(actor_id):
    """True if a collection in this context noted ``actor_id`` (an actor handle being pickled)."""
    found = _contained.get()
    if found is None:
        return False
    found[1].append(actor_id)
    return True
