"""Resource accounting of one node of the embedded runtime (guarded by the scheduler's lock).

Amounts are kept in integer units of 1/10000 so fractional requests (``num_gpus=0.01``) add and
subtract exactly, as Ray's fixed-point resource sets do. ``memory`` is in bytes.
"""
import os

UNIT = 10000
_NO_DEVICES = {}  # the grant of a request for no GPU/NPU: shared, never mutated


def detect_accelerators():
    """``{"GPU": n, "NPU": m}`` found on this machine without importing a framework: the
    machine's NVIDIA GPUs, at most as many as ``CUDA_VISIBLE_DEVICES`` lists, as Ray counts
    them."""
    found = {}
    try:
        n = len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        n = 0
    visible = _visible_gpu_entries()
    if visible is not None:
        n = min(n, len(visible))
    if n:
        found["GPU"] = n
    try:
        npus = [d for d in os.listdir("/dev") if d.startswith("davinci") and d[7:].isdigit()]
    except OSError:
        npus = []
    if npus:
        found["NPU"] = len(npus)
    return found


def split_visible(value):
    """A ``CUDA_VISIBLE_DEVICES`` value split as Ray splits it (``""`` and Slurm's
    ``NoDevFiles``: no device)."""
    return [] if value in ("", "NoDevFiles") else str(value).split(",")


def _visible_gpu_entries():
    """This process's ``CUDA_VISIBLE_DEVICES`` split (:func:`split_visible`), or None when it
    is not set."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return None if visible is None else split_visible(visible)


def visible_device_ids():
    """``{"GPU": [ids]}`` named by ``CUDA_VISIBLE_DEVICES`` in this process, or ``{}`` when it
    is not set. The ids are the variable's entries as strings (indexes or ``GPU-<uuid>``s), as
    Ray's ``get_gpu_ids()`` returns them when the variable was set at start (integers
    ``0..n-1`` otherwise)."""
    visible = _visible_gpu_entries()
    return {} if visible is None else {"GPU": visible}


def check_declared_gpus(num_gpus):
    """``ray.init(num_gpus=n)`` on a machine whose ``CUDA_VISIBLE_DEVICES`` lists fewer: Ray
    refuses to start (ValueError, its words) rather than hand out devices the variable hides."""
    visible = _visible_gpu_entries()
    if num_gpus is not None and visible is not None and num_gpus > len(visible):
        raise ValueError(f"Attempting to start raylet with {num_gpus} GPU, but "
                         f"CUDA_VISIBLE_DEVICES contains {visible}.")


def to_units(amount):
    return int(round(float(amount) * UNIT))


def from_units(units):
    value = units / UNIT
    return float(value)


class NodeResources:
    """Total and available amounts of one node (or of one placement-group bundle), plus
    per-device GPU/NPU slots so tasks get concrete device ids.

    ``devices`` (optional) gives each kind's slots as ``[(device_id, capacity_units)]``: a
    bundle's slots are the node devices it reserved, possibly a fraction of one. By default a
    node has devices ``0..n-1`` (or ``device_ids`` of a kind), each of capacity one unit."""

    DEVICE_KINDS = ("GPU", "NPU")

    def __init__(self, total, devices=None, device_ids=None):
        self.total = {k: to_units(v) for k, v in total.items() if v}
        self.available = dict(self.total)
        if devices is None:
            devices = {}
            for kind in self.DEVICE_KINDS:
                count = int(total.get(kind, 0))
                ids = list((device_ids or {}).get(kind) or ())
                if len(ids) < count:  # declared beyond what is visible: Ray numbers them 0..n-1
                    ids = list(range(count))
                devices[kind] = [(i, UNIT) for i in ids[:count]]
        self.device_ids = {k: [i for i, _ in devices.get(k, ())] for k in self.DEVICE_KINDS}
        self._capacity = {k: [c for _, c in devices.get(k, ())] for k in self.DEVICE_KINDS}
        # Free units per slot; slot i holds device ``device_ids[kind][i]``.
        self.devices = {k: list(self._capacity[k]) for k in self.DEVICE_KINDS}

    def request_units(self, request):
        return {k: to_units(v) for k, v in request.items() if v}

    def feasible(self, units):
        """Could the request ever fit here (when nothing else holds anything)?"""
        if not all(self.total.get(k, 0) >= v for k, v in units.items()):
            return False
        for kind in self.DEVICE_KINDS:
            need = units.get(kind, 0)
            if need:
                caps = self._capacity[kind]
                if need >= UNIT and sum(1 for c in caps if c == UNIT) < need // UNIT:
                    return False
                if need < UNIT and not any(c >= need for c in caps):
                    return False
        return True

    def fits(self, units):
        available = self.available
        for k, v in units.items():
            if available.get(k, 0) < v:
                return False
            if (k == "GPU" or k == "NPU") and self._device_slots(k, v) is None:
                return False
        return True

    def _device_slots(self, kind, need):
        slots = self.devices.get(kind) or []
        if not need:
            return []
        if need >= UNIT:
            whole = [i for i, free in enumerate(slots) if free == UNIT]
            count = need // UNIT
            return whole[:count] if len(whole) >= count else None
        for i, free in enumerate(slots):
            if free >= need:
                return [i]
        return None

    def acquire(self, units):
        """Take ``units``; returns ``{"GPU": [device ids], "NPU": [...]}`` for the grant."""
        grant = _NO_DEVICES
        available = self.available
        for k, v in units.items():
            available[k] = available.get(k, 0) - v
            if k == "GPU" or k == "NPU":
                ids = self._device_slots(k, v) or []
                per = UNIT if v >= UNIT else v
                for i in ids:
                    self.devices[k][i] -= per
                if ids:
                    if grant is _NO_DEVICES:
                        grant = {}
                    grant[k] = [self.device_ids[k][i] for i in ids]
        return grant

    def acquire_amounts(self, units):
        """Take ``units`` without device slots (a lent CPU taken back); may go negative."""
        for k, v in units.items():
            self.available[k] = self.available.get(k, 0) - v

    def release(self, units, grant):
        for kind, ids in (grant.items() if grant else ()):
            need = units.get(kind, 0)
            per = UNIT if need >= UNIT else need
            index = self.device_ids[kind]
            for device in ids:
                if device in index:
                    self.devices[kind][index.index(device)] += per
        for k, v in units.items():
            self.available[k] = self.available.get(k, 0) + v

    def reserved_devices(self, units, grant):
        """The ``devices`` argument for a bundle made of ``units`` granted with ``grant``."""
        out = {}
        for kind in self.DEVICE_KINDS:
            need = units.get(kind, 0)
            ids = (grant or {}).get(kind) or []
            per = UNIT if need >= UNIT else need
            out[kind] = [(i, per) for i in ids]
        return out

    def amounts(self, units):
        """``{resource: amount}`` for a request or grant held in units."""
        return {k: from_units(v) for k, v in units.items()}

    def total_dict(self):
        return self.amounts(self.total)

    def available_dict(self):
        """Free amounts; resources with nothing free are omitted, as in Ray."""
        return {k: from_units(v) for k, v in self.available.items() if v > 0}


class Node:
    """One (real or virtual) node: ``node_id`` (bytes), ``ip``, ``labels``, its resources."""

    __slots__ = ("node_id", "hex", "ip", "labels", "resources", "alive", "hostname", "is_head",
                 "start_time", "end_time", "idle_limit")

    def __init__(self, node_id, ip, total, labels=None, hostname="", device_ids=None, is_head=False):
        self.node_id = node_id
        self.hex = node_id.hex()
        self.ip = ip
        self.labels = {"ray.io/node-id": self.hex, **dict(labels or {})}
        self.resources = NodeResources(total, device_ids=device_ids)
        self.alive = True
        self.hostname = hostname
        self.is_head = is_head
        self.start_time = self.end_time = None
        self.idle_limit = None  # idle workers the pool keeps for it (worked out once)
