"""The object table's holders beyond plain references: containers and borrowers.

Mixed into :class:`~ray_adapter.core.embedded.objects.ObjectTable` (see its module notes for
the lifetime rules); the state is the table's own (``_objects``, ``_borrows``), guarded by its
lock. Methods ending in ``_locked`` are called with that lock held.
"""


class HoldersMixin:
    """Containers (values holding refs and handles) and borrowers (worker processes)."""

    # -- containers ----------------------------------------------------------------------------
    def _adopt_locked(self, entry, data):
        """``entry``'s value holds the refs and handles pickled inside ``data``."""
        inner = getattr(data, "refs", None)
        if inner:
            objs = self._objects
            held = [oid for oid in inner if oid in objs]
            for oid in held:
                objs[oid].refs += 1
            entry.contained = held or None
        handles = getattr(data, "handles", None)
        if handles:
            entry.handles = list(handles)

    def _release_contents_locked(self, entry):
        """A freed entry lets go of what its value held; frees cascade without recursion."""
        objs = self._objects
        stack = [entry]
        while stack:
            freed = stack.pop()
            if freed.handles:
                self._on_free_handles(freed.handles)
            for oid in freed.contained or ():
                inner = objs.get(oid)
                if inner is None:
                    continue
                inner.refs -= 1
                if self._unused(inner):
                    del objs[oid]
                    if inner.is_error and not inner.read:
                        self._on_unread_error(inner.data)
                    if inner.contained or inner.handles:
                        stack.append(inner)

    # -- borrowers -----------------------------------------------------------------------------
    def lend(self, borrower, object_ids):
        """``borrower`` holds the one reference each of ``object_ids`` was created with (a
        worker's put or submission): it is released by :meth:`unborrow` or
        :meth:`worker_gone`."""
        with self._lock:
            held = self._borrows.setdefault(borrower, set())
            for oid in object_ids:
                if oid in self._objects:
                    held.add(oid)

    def borrow(self, borrower, object_ids):
        """``borrower`` took its first ObjectRef to each of ``object_ids``: one more holder."""
        with self._lock:
            held = self._borrows.setdefault(borrower, set())
            for oid in object_ids:
                entry = self._objects.get(oid)
                if entry is not None and oid not in held:
                    held.add(oid)
                    entry.refs += 1

    def unborrow(self, borrower, object_ids):
        """``borrower`` dropped its last ObjectRef to each of ``object_ids``."""
        with self._lock:
            held = self._borrows.get(borrower)
            if not held:
                return
            for oid in object_ids:
                if oid in held:
                    held.discard(oid)
                    entry = self._objects.get(oid)
                    if entry is not None:
                        entry.refs -= 1
                        self._free_if_unused(oid, entry)

    def worker_gone(self, borrower):
        """A dead borrower's refs died with it."""
        with self._lock:
            held = self._borrows.pop(borrower, None)
            for oid in held or ():
                entry = self._objects.get(oid)
                if entry is not None:
                    entry.refs -= 1
                    self._free_if_unused(oid, entry)

    def borrowed_by(self, borrower):
        """How many objects ``borrower`` holds (tests and diagnostics)."""
        with self._lock:
            return len(self._borrows.get(borrower, ()))

