"""Resource accounting of one node of the embedded runtime (guarded by the scheduler's lock).

Amounts are kept in integer units of 1/10000 so fractional requests (``num_gpus=0.01``) add and
subtract exactly, as Ray's fixed-point resource sets do. ``memory`` is in bytes.
"""
import os

UNIT = 10000
_NO_DEVICES = {}  # the grant of a request for no GPU/NPU: shared, never mutated


def detect_accelerators():
    """``{"GPU": n, "NPU": m}`` found on this machine without importing a framework."""
    found = {}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        n = len([d for d in visible.split(",") if d.strip()])
    else:
        try:
            n = len(os.listdir("/proc/driver/nvidia/gpus"))
        except OSError:
            n = 0
    if n:
        found["GPU"] = n
    try:
        npus = [d for d in os.listdir("/dev") if d.startswith("davinci") and d[7:].isdigit()]
    except OSError:
        npus = []
    if npus:
        found["NPU"] = len(npus)
    return found


def to_units(amount):
    return int(round(float(amount) * UNIT))


def from_units(units):
    value = units / UNIT
    return float(value)


class NodeResources:
    """Total and available amounts of one node, plus per-device GPU/NPU slots."""

    DEVICE_KINDS = ("GPU", "NPU")

    def __init__(self, total):
        self.total = {k: to_units(v) for k, v in total.items() if v}
        self.available = dict(self.total)
        # Per-device free fraction (in units) so tasks get concrete device ids.
        self.devices = {k: [UNIT] * int(total.get(k, 0)) for k in self.DEVICE_KINDS}

    def request_units(self, request):
        return {k: to_units(v) for k, v in request.items() if v}

    def feasible(self, units):
        """Could the request ever fit on this node?"""
        return all(self.total.get(k, 0) >= v for k, v in units.items())

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
        """Take ``units``; returns ``{"GPU": [ids], "NPU": [ids]}`` for the grant."""
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
                    grant[k] = ids
        return grant

    def acquire_amounts(self, units):
        """Take ``units`` without device slots (a lent CPU taken back); may go negative."""
        for k, v in units.items():
            self.available[k] = self.available.get(k, 0) - v

    def release(self, units, grant):
        for kind, ids in (grant.items() if grant else ()):
            need = units.get(kind, 0)
            per = UNIT if need >= UNIT else need
            for i in ids:
                self.devices[kind][i] += per
        for k, v in units.items():
            self.available[k] = self.available.get(k, 0) + v

    def amounts(self, units):
        """``{resource: amount}`` for a request or grant held in units."""
        return {k: from_units(v) for k, v in units.items()}

    def total_dict(self):
        return self.amounts(self.total)

    def available_dict(self):
        """Free amounts; resources with nothing free are omitted, as in Ray."""
        return {k: from_units(v) for k, v in self.available.items() if v > 0}
