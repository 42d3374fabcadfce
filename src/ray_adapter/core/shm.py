"""Shared-memory buffers for large object payloads.

Buffers of 1 MiB and more never travel through a socket: they live in anonymous memory files
(``memfd``), passed between processes as descriptors (SCM_RIGHTS) and mapped, so a 100 MB array
reaches a worker without another copy. A memfd has no name: the kernel frees it when the last
descriptor and mapping are gone, so no exit, crash or SIGKILL leaves anything in /dev/shm.

Kinds of shared buffer (each has ``view``, the memory pickle reads, and ``nbytes``):

- :class:`ShmBuffer`: a memfd of its own (a worker's large result; the driver's arena full);
- ``ArenaBuffer`` (:mod:`ray_adapter.core.embedded.arena`): a block of the driver's reusable
  arena segments;
- :class:`RemoteBlock`: a worker's mapping of an arena block the driver sent it.

Views handed to pickle are *exported* (:func:`exported_view`): a read-only numpy array over the
mapping that keeps its owner alive, so arrays read back are read-only, as from Ray's store, and
an array that is a whole shared buffer is recognised when it is serialized again
(:func:`shared_source`): a task returning its argument copies nothing.

Received memory is mapped private (copy on write), and a mapping never outlives what it was
made for, so a page a process writes is its own and goes with that mapping:

- each received buffer (a memfd, or one reference to an arena block) is mapped on its own:
  code that writes through a read-only array anyway (``torch.from_numpy``) changes its own
  pages, never the stored object nor any object later stored in the same memory, and never
  faults;
- each torch storage read from one gets a private mapping of its own (:func:`own_array`): a
  tensor is its reader's, writable without a copy, as Ray's fresh unpickled tensor is; an
  in-place update is seen by no other read, and its pages are freed with the tensor.
"""
import mmap
import os
import resource
import weakref

#: Out-of-band buffers at least this large (bytes) go to shared memory.
MIN_BYTES = 1 << 20
AVAILABLE = hasattr(os, "memfd_create")
POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # fault the pages in at once: faster than one by one

# id() of each live exporter array -> (weakref to the array, weakref to its shared buffer).
_exporters = {}


def exported_view(mapping, offset, nbytes, owner):
    """A read-only memoryview of ``nbytes`` at ``offset`` of ``mapping`` that keeps ``owner``
    alive as long as any array made from it lives."""
    import numpy

    array = numpy.frombuffer(mapping, dtype=numpy.uint8, count=nbytes, offset=offset)
    array.flags.writeable = False
    key = id(array)
    _exporters[key] = (weakref.ref(array), weakref.ref(owner))
    weakref.finalize(array, _forget, key, owner)  # holds ``owner`` until the array is collected
    return memoryview(array)


def _forget(key, owner):
    _exporters.pop(key, None)


def shared_source(raw):
    """The shared buffer whose whole, read-only memory ``raw`` (a PickleBuffer's raw view) is,
    or None. Follows the chain of bases (array -> ... -> the exporter array)."""
    if not raw.readonly:
        return None
    obj, hops = raw.obj, 0
    while obj is not None and hops < 8:
        found = _exporters.get(id(obj))
        if found is not None:
            array, owner = found[0](), found[1]()
            if array is obj and owner is not None and owner.nbytes == raw.nbytes \
                    and _address(raw) == obj.ctypes.data:
                return owner
            return None
        obj = obj.obj if isinstance(obj, memoryview) else getattr(obj, "base", None)
        hops += 1
    return None


def own_array(view):
    """A writable uint8 numpy array of the bytes of ``view`` (a buffer pickle handed a reducer)
    over a private (copy-on-write) mapping of its own, when ``view`` is the whole of a shared
    buffer this process can map again (one it received: :attr:`private_source`): no copy, and
    its writes stay in that mapping, freed with the array. The buffer is kept alive as long as
    the array lives (a block stays pinned: unwritten pages read through to it). None otherwise
    (the driver's own arena, bytes, a part of a buffer: the caller copies)."""
    if not isinstance(view, memoryview):
        return None
    owner = shared_source(view)
    source = getattr(owner, "private_source", None)
    if source is None:
        return None
    import numpy

    fd, offset = source
    mapping, start = map_range(fd, offset, owner.nbytes)
    array = numpy.frombuffer(mapping, dtype=numpy.uint8, count=owner.nbytes, offset=start)
    weakref.finalize(array, _keep, owner)
    return array


def _keep(owner):
    """Holds ``owner`` until the array it is registered with is collected."""


def _address(view):
    import numpy

    return numpy.frombuffer(view, dtype=numpy.uint8).ctypes.data


class ShmBuffer:
    """A memfd of its own: ``fd`` (to send on), ``map``, ``view``, ``nbytes``."""

    is_shared_buffer = True
    __slots__ = ("fd", "map", "nbytes", "private", "__weakref__")

    def __init__(self, fd, mapping, nbytes, private=False):
        self.fd = fd
        self.map = mapping
        self.nbytes = nbytes
        self.private = private  # received, mapped copy on write (see the module's notes)

    @property
    def private_source(self):
        """``(fd, offset)`` to map this buffer again (see :func:`own_array`), or None for one
        this process made (shared with its readers)."""
        return (self.fd, 0) if self.private and self.fd >= 0 else None

    @property
    def view(self):
        """A new exported view (never cached here: the view keeps this buffer alive, not the
        other way round, or neither could ever be freed)."""
        return exported_view(self.map, 0, self.nbytes, self) if self.nbytes else memoryview(b"")

    @classmethod
    def copy_of(cls, raw):
        """A new shared buffer holding a copy of ``raw`` (a contiguous memoryview)."""
        n = raw.nbytes
        fd = os.memfd_create("ray-adapter-object", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, n)
            mapping = mmap.mmap(fd, n, flags=mmap.MAP_SHARED | POPULATE)
            mapping[:] = raw.cast("B")
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, mapping, n)

    @classmethod
    def from_fd(cls, fd, nbytes):
        """Map a received descriptor, private (the buffer owns ``fd`` from now on)."""
        return cls(fd, map_private(fd, nbytes), nbytes, private=True)

    def __del__(self):
        # The mapping itself lives on while arrays still view it; only the descriptor goes.
        fd, self.fd = self.fd, -1
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass


class RemoteBlock:
    """A worker's view of an arena block the driver sent (``key`` = (segment id, offset)),
    mapped private from the segment's descriptor ``fd`` for this reference alone. When the last
    array made from it is gone, ``released(key)`` tells the driver, and the mapping (with any
    page written through it) goes."""

    is_shared_buffer = True
    __slots__ = ("key", "nbytes", "_fd", "_mapping", "_start", "_released", "__weakref__")

    def __init__(self, key, nbytes, fd, released):
        self.key = key
        self.nbytes = nbytes
        self._fd = fd
        self._released = released  # also if mapping fails: __del__ then gives the block back
        self._mapping, self._start = map_range(fd, key[1], nbytes)

    @property
    def view(self):
        """A new exported view (it keeps this block alive; see ShmBuffer.view)."""
        return exported_view(self._mapping, self._start, self.nbytes, self)

    @property
    def private_source(self):
        """``(fd, offset)`` of the block in its segment (see :func:`own_array`)."""
        return self._fd, self.key[1]

    def __del__(self):
        released = self._released
        if released is not None:
            released(self.key)


_MADV_POPULATE_READ = 22  # Linux 5.14+: fault pages in for reading (keeps them shared)


def map_private(fd, size):
    """Map a received memfd private (copy on write), its page tables filled for reading.
    Not MAP_POPULATE: on a private writable mapping it would copy every page at once (and
    later writes by the owner, into blocks reused by the arena, would not be seen)."""
    mapping = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE)
    try:
        mapping.madvise(_MADV_POPULATE_READ)
    except (OSError, ValueError):  # older kernels: pages fault in when first read
        pass
    return mapping


def map_range(fd, offset, nbytes):
    """A private (copy-on-write) mapping of the ``nbytes`` at ``offset`` of memfd ``fd``:
    ``(mapping, start)``, the bytes beginning at ``start`` in the mapping (mappings begin on a
    page). Its pages fault in as they are read (a few at a time, as fast as populating them
    first), so a reader pays only for what it touches."""
    start = offset % mmap.ALLOCATIONGRANULARITY
    return mmap.mmap(fd, start + nbytes, flags=mmap.MAP_PRIVATE, offset=offset - start), start


def raise_fd_limit():
    """Each live large object holds a descriptor: lift the soft limit to the hard one."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        target = hard if hard != resource.RLIM_INFINITY else 1 << 16
        if soft < target:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        pass


def is_shared(buf):
    """True for the shared-buffer kinds above (their classes set ``is_shared_buffer``)."""
    return getattr(type(buf), "is_shared_buffer", False)


def as_buffer(buf):
    """What pickle and sockets can read for a buffer (a shared buffer's view, or the buffer)."""
    return buf.view if is_shared(buf) else buf
