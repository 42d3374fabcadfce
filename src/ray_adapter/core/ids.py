"""Identifiers laid out like Ray's binary IDs, so their hex forms read as Ray's do.

Sizes (bytes): job 4, actor 16 (12 unique + job), task 24 (8 unique + 12 actor part + job),
object 28 (task id + 4-byte little-endian return index), node 28, worker 28, placement group 18.
The embedded driver mints every id, so a per-runtime counter keeps them unique.
"""
import itertools
import os

JOB_ID_SIZE = 4
ACTOR_ID_SIZE = 16
TASK_ID_SIZE = 24
OBJECT_ID_SIZE = 28
NODE_ID_SIZE = 28
WORKER_ID_SIZE = 28
PLACEMENT_GROUP_ID_SIZE = 18

_NO_ACTOR = b"\xff" * 12
#: The 4-byte return-index suffixes of the first return ids (1, 2, ...), made once.
_RETURN_INDEXES = tuple(i.to_bytes(4, "little") for i in range(1, 17))


def names_actor(task_or_object_id):
    """True for the id of an actor call (its task id or a return id): the actor part is set."""
    return task_or_object_id[8:20] != _NO_ACTOR


def actor_of(task_id):
    """The id of the actor an actor call's task id names (its actor part and job)."""
    return task_id[8:24]


def random_id(size):
    """A random binary id of ``size`` bytes."""
    return os.urandom(size)


def job_id(index):
    """Ray's job ids are a little-endian counter: job 1 prints as ``01000000``."""
    return index.to_bytes(JOB_ID_SIZE, "little")


def driver_worker_id(job):
    """The worker id of job ``job``'s driver, as Ray makes it: the job's id, then 0xff bytes
    (job 2's driver prints as ``02000000ffff...``)."""
    return job + b"\xff" * (WORKER_ID_SIZE - JOB_ID_SIZE)


class IdFactory:
    """Mints task, actor and object ids for one runtime (thread-safe)."""

    def __init__(self, job):
        self.job = job
        self._salt = os.urandom(8)  # per runtime: ids of two runtimes never collide
        self._counter = itertools.count(1)
        self._callers = itertools.count(1)

    def _unique(self, n):
        # itertools.count's next() is atomic under the GIL: no lock, no syscall per id.
        return next(self._counter).to_bytes(4, "little") + self._salt[: n - 4]

    def caller_salt(self):
        """4 bytes for one worker or attached driver to mint the ids of its own tasks and
        actor calls with (:func:`caller_task_id`): distinct from every other caller's and from this
        runtime's own, so no two ids collide (until 2**32 callers)."""
        base = int.from_bytes(self._salt[:4], "little")
        return ((base + next(self._callers)) % (1 << 32)).to_bytes(4, "little")

    def actor(self, job=None):
        """A new actor id of job ``job`` (an attached driver's; None: this runtime's)."""
        return self._unique(12) + (job or self.job)

    def task(self, actor_id=None, job=None):
        return self._unique(8) + (actor_id[:12] if actor_id else _NO_ACTOR) + (job or self.job)

    @staticmethod
    def returns(task_id, count):
        """The ids of a task's ``count`` return values (index 1..count)."""
        if count == 1:  # most calls: one return
            return [task_id + _RETURN_INDEXES[0]]
        if count <= len(_RETURN_INDEXES):
            return [task_id + index for index in _RETURN_INDEXES[:count]]
        return [task_id + i.to_bytes(4, "little") for i in range(1, count + 1)]

    @staticmethod
    def stream_item(task_id, index):
        """The id of item ``index`` (0, 1, ...) of a streaming call's items: return index
        ``index + 2`` (index 1 is the call's completion object, as in Ray)."""
        return task_id + (index + 2).to_bytes(4, "little")

    def put(self, job=None):
        """A new ``ray.put`` object id of job ``job`` (None: this runtime's)."""
        return self.task(job=job) + (0).to_bytes(4, "little")


def caller_task_id(counter, salt, actor_id=None, job=None):
    """The task id of a caller's ``counter``-th submission, minted by the caller with the
    ``salt`` its runtime gave it (:meth:`IdFactory.caller_salt`), laid out as
    :meth:`IdFactory.task`'s: a call of ``actor_id``, else a task of job ``job``."""
    return counter.to_bytes(4, "little") + salt + (actor_id if actor_id else _NO_ACTOR + job)
