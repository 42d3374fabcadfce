"""``ray.experimental.tqdm_ray``: progress bars from tasks and actors, drawn by the driver
(mirrors Ray 2.60's module: ``tqdm``, ``safe_print``, ``instance``, ``RAY_TQDM_MAGIC``).

A bar made in a task or actor sends its state to the driver (at most once per
``flush_interval_s``, and at ``close()``), where one real ``tqdm`` bar per remote bar is drawn on
the driver's stderr, its description prefixed with ``(pid=N)`` of the process that made it, as
Ray's driver does. Ray carries the state in a magic-token JSON line of the worker's log; the
adapter relays the same state dict to the driver's process (:mod:`ray_adapter.core.relays`).
A bar made in the driver is drawn at once, without a prefix. As in Ray, ``tqdm`` itself is
optional: without it the driver logs "tqdm is not installed. Progress bars will be disabled."
once and draws nothing. Using the module in the driver makes ``print`` :func:`safe_print`
(unless ``RAY_TQDM_PATCH_PRINT=0``), as Ray's does.

Thread-safety: the driver's :class:`_BarManager` state is guarded by its ``lock``; state updates
arrive from worker reader threads and user threads. tqdm writes under its own lock.
"""
import atexit
import builtins
import copy
import logging
import os
import sys
import threading
import time
import uuid

try:
    import tqdm.auto as real_tqdm
except ImportError:
    real_tqdm = None

from ray_adapter import core as _core
from ray_adapter import gaps as _gaps

logger = logging.getLogger(__name__)

#: The token Ray puts in a bar's state (its log lines are recognised by it).
RAY_TQDM_MAGIC = "__ray_tqdm_magic_token__"
#: The relay topic bar states travel under.
_TOPIC = "tqdm_ray"

_manager = None
_mgr_lock = threading.Lock()
_print = builtins.print
_DIM_CYAN, _RESET = "\x1b[2m\x1b[36m", "\x1b[0m"  # Ray's colorama Style.DIM + Fore.CYAN


def safe_print(*args, **kwargs):
    """``print`` that hides the driver's bars while it writes (mirrors Ray's ``safe_print``);
    a print to another file than stdout/stderr is a plain print."""
    if kwargs.get("file") not in [sys.stdout, sys.stderr, None]:
        return _print(*args, **kwargs)
    try:
        instance().hide_bars()
        _print(*args, **kwargs)
    finally:
        instance().unhide_bars()


class tqdm:
    """A progress bar usable in tasks and actors, shown by the driver (mirrors
    ``ray.experimental.tqdm_ray.tqdm``; Ray's subset of tqdm's arguments).

    ``iterable``: iterate the bar to advance it by one per item (its ``len()`` is the total
    when ``total`` is None); ``desc``: the description; ``total``: the number of steps;
    ``unit``: the unit shown (default "it"); ``position``: the bar's line among this process's
    bars (0 first); ``flush_interval_s``: at most one state update per this many seconds is
    sent (default 1.0; ``close()`` always sends)."""

    DEFAULT_FLUSH_INTERVAL_SECONDS = 1.0

    def __init__(self, iterable=None, desc=None, total=None, unit=None, position=None,
                 flush_interval_s=None):
        if total is None and iterable is not None:
            try:
                total = len(iterable)
            except (TypeError, AttributeError):
                total = None
        self._iterable = iterable
        self._desc = desc or ""
        self._total = total
        self._unit = unit or "it"
        self._ip = _node_ip()
        self._pid = os.getpid()
        self._pos = position or 0
        self._uuid = uuid.uuid4().hex
        self._x = 0
        self._closed = False
        self._flush_interval_s = (flush_interval_s if flush_interval_s is not None
                                  else self.DEFAULT_FLUSH_INTERVAL_SECONDS)
        self._last_flush_time = 0.0

    def set_description(self, desc):
        """Set the description (tqdm's ``set_description``)."""
        self._desc = desc
        self._dump_state()

    def update(self, n=1):
        """Advance by ``n`` steps (tqdm's ``update``)."""
        self._x += n
        self._dump_state()

    def close(self):
        """Finish the bar; its last state is always sent (tqdm's ``close``)."""
        self._closed = True
        self._dump_state(force_flush=True)

    def refresh(self):
        """Send the state now if the flush interval allows (tqdm's ``refresh``)."""
        self._dump_state()

    @property
    def total(self):
        return self._total

    @total.setter
    def total(self, total):
        self._total = total

    @property
    def n(self):
        return self._x

    @n.setter
    def n(self, n):
        self._x = n

    def _dump_state(self, force_flush=False):
        now = time.time()
        if not force_flush and now - self._last_flush_time < self._flush_interval_s:
            return
        self._last_flush_time = now
        if not _core.is_started():
            return  # no runtime: nobody to draw it (Ray's driver prints nothing either)
        core = _core.current()
        if core.context().is_driver:
            instance().process_state_update(copy.deepcopy(self._get_state()))
        else:
            core.relay(_TOPIC, self._get_state())

    def _get_state(self):
        return {"__magic_token__": RAY_TQDM_MAGIC, "x": self._x, "pos": self._pos,
                "desc": self._desc, "total": self._total, "unit": self._unit, "ip": self._ip,
                "pid": self._pid, "uuid": self._uuid, "closed": self._closed}

    def __iter__(self):
        if self._iterable is None:
            raise ValueError("No iterable provided")
        for x in iter(self._iterable):
            self.update(1)
            yield x


def _node_ip():
    from ray_adapter.ray._private.services import get_node_ip_address

    try:
        return get_node_ip_address()
    except Exception:  # noqa: BLE001 - no runtime: the machine's address does not matter
        return "127.0.0.1"


class _Bar:
    """One remote bar drawn in the driver: a real tqdm bar at ``offset + state["pos"]``."""

    def __init__(self, state, offset):
        self.state = state
        self.offset = offset
        self.bar = real_tqdm.tqdm(desc=state["desc"], total=state["total"], unit=state["unit"],
                                  position=offset + state["pos"], dynamic_ncols=True,
                                  unit_scale=True)
        if state["x"]:
            self.bar.update(state["x"])

    def update(self, state):
        if state["desc"] != self.state["desc"]:
            self.bar.set_description(state["desc"])
        if state["total"] != self.state["total"]:
            self.bar.total = state["total"]
        delta = state["x"] - self.state["x"]
        if delta:
            self.bar.update(delta)
        self.bar.refresh()
        self.state = state

    def move(self, offset):
        if offset != self.offset:
            self.offset = offset
            self.bar.clear()
            self.bar.pos = -(offset + self.state["pos"])
            self.bar.refresh()


class _BarManager:
    """The driver's bars, grouped per process: each process's bars get the lines after the
    groups before it (a group needs ``1 + the highest position`` of its open bars)."""

    def __init__(self):
        self.ip = _node_ip()
        self.pid = os.getpid()
        self.groups = {}  # (ip, pid) -> {uuid: _Bar}, in order of arrival
        self.hidden = False
        self.lock = threading.RLock()
        self._warned = False

    def process_state_update(self, state):
        """Draw a bar's new state (a new bar is opened, a closed one is finished)."""
        if real_tqdm is None:
            if not self._warned:
                self._warned = True
                logger.warning("tqdm is not installed. Progress bars will be disabled.")
            return
        if state["pid"] != self.pid or state["ip"] != self.ip:
            where = (f"(pid={state['pid']}) " if state["ip"] == self.ip
                     else f"(pid={state['pid']}, ip={state['ip']}) ")
            state = dict(state, desc=f"{_DIM_CYAN}{where}{_RESET}{state['desc']}")
        with self.lock:
            group = self.groups.setdefault((state["ip"], state["pid"]), {})
            bar = group.get(state["uuid"])
            if bar is None:
                group[state["uuid"]] = _Bar(state, self._offset_of(group))
                self._reflow()
                return
            bar.update(state)
            if state["closed"]:
                bar.bar.close()
                del group[state["uuid"]]
                self._reflow()

    def _offset_of(self, wanted):
        offset = 0
        for group in self.groups.values():
            if group is wanted:
                return offset
            offset += _slots(group)
        return offset

    def _reflow(self):
        offset = 0
        for group in self.groups.values():
            for bar in group.values():
                bar.move(offset)
            offset += _slots(group)

    def hide_bars(self):
        """Clear every bar from the terminal until :meth:`unhide_bars`."""
        with self.lock:
            if not self.hidden:
                self.hidden = True
                for group in self.groups.values():
                    for bar in group.values():
                        bar.bar.clear()

    def unhide_bars(self):
        with self.lock:
            if self.hidden:
                self.hidden = False
                for group in self.groups.values():
                    for bar in group.values():
                        bar.bar.refresh()


    def close_all(self):
        """Close the bars still open, left as drawn (registered with ``atexit``: a tqdm bar
        closed by its ``__del__`` while the interpreter finalizes crashed Python 3.13)."""
        with self.lock:
            groups, self.groups = self.groups, {}
        for group in groups.values():
            for bar in group.values():
                bar.bar.close()


def _slots(group):
    return 1 + max(bar.state["pos"] for bar in group.values()) if group else 0


def instance():
    """The driver's bar manager (made on first use; ``print`` becomes :func:`safe_print`
    then, unless ``RAY_TQDM_PATCH_PRINT=0``), as Ray's ``instance()``."""
    global _manager
    with _mgr_lock:
        if _manager is None:
            _manager = _BarManager()
            atexit.register(_manager.close_all)
            if os.environ.get("RAY_TQDM_PATCH_PRINT", "1").lower() not in ("0", "false"):
                builtins.print = safe_print
        return _manager


def _from_worker(state):
    """The relay handler the driver registers for ``_TOPIC``."""
    instance().process_state_update(state)


__getattr__ = _gaps.module_getattr("ray.experimental.tqdm_ray")  # Ray's helpers: gaps
