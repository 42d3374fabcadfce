"""Shared-memory buffers for large object payloads: anonymous memory files (``memfd``).

A large buffer is copied once into a memfd; processes exchange the file descriptor over their
Unix socket (SCM_RIGHTS) and map it read-only, so a 100 MB array reaches a worker without
being copied again and comes back read-only, as from Ray's object store. A memfd has no name:
the kernel frees it when the last descriptor and mapping are gone, so no process exit, crash
or SIGKILL can leave anything behind in /dev/shm.
"""
import mmap
import os
import resource
import weakref

#: Out-of-band buffers at least this large (bytes) go to shared memory.
MIN_BYTES = 1 << 20
AVAILABLE = hasattr(os, "memfd_create")
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # fault the pages in at once: faster than one by one

# Live buffers by id() of their mapping: serializing an array that views a whole shared buffer
# reuses that buffer instead of copying it (a task returning its argument costs no copy).
_by_map = weakref.WeakValueDictionary()


class ShmBuffer:
    """A read-only shared-memory buffer: ``view`` (memoryview), ``fd`` (to send it on), ``nbytes``."""

    __slots__ = ("fd", "map", "view", "nbytes", "__weakref__")

    def __init__(self, fd, mapping, nbytes):
        self.fd = fd
        self.map = mapping
        self.view = memoryview(mapping).toreadonly()
        self.nbytes = nbytes
        _by_map[id(mapping)] = self

    @classmethod
    def copy_of(cls, raw):
        """A new shared buffer holding a copy of ``raw`` (a contiguous memoryview)."""
        n = raw.nbytes
        fd = os.memfd_create("ray-adapter-object", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, n)
            mapping = mmap.mmap(fd, n, flags=mmap.MAP_SHARED | _POPULATE)
            mapping[:] = raw.cast("B")
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, mapping, n)

    @classmethod
    def from_fd(cls, fd, nbytes):
        """Map a received descriptor read-only (the buffer owns ``fd`` from now on)."""
        return cls(fd, mmap.mmap(fd, nbytes, prot=mmap.PROT_READ), nbytes)

    def __del__(self):
        # The mapping itself lives on while arrays still view it; only the descriptor goes.
        fd, self.fd = self.fd, -1
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass


def shared_source(raw):
    """The ShmBuffer whose whole, read-only memory ``raw`` (a PickleBuffer's raw view) is, or
    None. Follows the exporter chain (array -> ... -> memoryview -> the buffer's mmap)."""
    if not raw.readonly:
        return None
    obj, hops = raw.obj, 0
    while obj is not None and hops < 8:
        if isinstance(obj, mmap.mmap):
            found = _by_map.get(id(obj))
            if found is not None and found.map is obj and found.nbytes == raw.nbytes \
                    and _address(raw) == _address(found.view):
                return found
            return None
        obj = obj.obj if isinstance(obj, memoryview) else getattr(obj, "base", None)
        hops += 1
    return None


def _address(view):
    import numpy

    return numpy.frombuffer(view, dtype=numpy.uint8).ctypes.data


def raise_fd_limit():
    """Each live large object holds a descriptor: lift the soft limit to the hard one."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        target = hard if hard != resource.RLIM_INFINITY else 1 << 16
        if soft < target:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        pass


def as_buffer(buf):
    """What pickle and sockets can read for a buffer (a ShmBuffer's view, or the buffer)."""
    return buf.view if type(buf) is ShmBuffer else buf
