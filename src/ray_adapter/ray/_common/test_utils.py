"""``ray._common.test_utils``: the test helpers of Ray's own test suite (mirrors Ray 2.60).

Ray's tests (``python/ray/tests``) and libraries' tests import these to coordinate tasks and
actors and to run driver scripts:

* :data:`SignalActor` / :data:`Semaphore`: async actors (``num_cpus=0``) to block work until a
  test releases it (``signal.wait.remote()`` / ``signal.send.remote()``).
* :func:`wait_for_condition` / :func:`async_wait_for_condition`: retry a predicate until it is
  true; ``RuntimeError`` at the timeout, naming the last exception the predicate raised.
* :func:`run_string_as_driver`: run a script as a driver in a new interpreter (this one's
  ``sys.executable``), stdout and stderr merged; the child inherits the environment, so with
  ``RAY_BACKEND=yuanrong`` its ``import ray`` is the adapter too.
* :class:`FakeTimer`, :func:`is_named_tuple`, :func:`assert_tensors_equivalent`,
  :class:`MetricSamplePattern`, :class:`PrometheusTimeseries`: plain helpers.

The metrics-scraping and telemetry helpers need Ray's metrics agent and usage-stats service and
are gaps (see the compat matrix).
"""
import asyncio
import dataclasses
import inspect
import logging
import subprocess
import sys
import threading
import time
import traceback
from enum import Enum
from typing import Any, Dict, Optional, Set

from ray_adapter import gaps
from ray_adapter.ray import remote as _remote

logger = logging.getLogger(__name__)

#: Seconds :func:`run_string_as_driver` waits for the driver before killing it (Ray's value).
DEFAULT_DRIVER_TIMEOUT_SECONDS = 300
#: Seconds to collect a killed driver's output before giving up on it (Ray's value).
KILLED_DRIVER_DRAIN_TIMEOUT_SECONDS = 10
_KILLED_RETURNCODE = -9

__all__ = ["SignalActor", "Semaphore"]


class _SignalActor:
    """An event shared by tasks and actors: ``wait()`` returns once ``send()`` was called
    (``send(clear=True)`` wakes the current waiters and resets the event);
    ``cur_num_waiters()`` counts the calls blocked in ``wait()``. ``wait(should_wait=False)``
    returns at once. Mirrors Ray's ``ray._common.test_utils.SignalActor`` (an async actor,
    ``num_cpus=0``, so its methods run concurrently on one event loop)."""

    def __init__(self):
        self.ready_event = asyncio.Event()
        self.num_waiters = 0

    def send(self, clear: bool = False):
        self.ready_event.set()
        if clear:
            self.ready_event.clear()

    async def wait(self, should_wait: bool = True):
        if not should_wait:
            return
        self.num_waiters += 1
        try:
            await self.ready_event.wait()
        finally:
            self.num_waiters -= 1

    async def cur_num_waiters(self) -> int:
        return self.num_waiters


class _Semaphore:
    """A counting semaphore actor: ``acquire()`` blocks while ``value`` holders have it,
    ``release()`` frees one place, ``locked()`` is True when none is free. Mirrors Ray's
    ``ray._common.test_utils.Semaphore`` (async actor, ``num_cpus=0``)."""

    def __init__(self, value: int = 1):
        self._sema = asyncio.Semaphore(value=value)

    async def acquire(self):
        await self._sema.acquire()

    async def release(self):
        self._sema.release()

    async def locked(self) -> bool:
        return self._sema.locked()


_SignalActor.__name__ = _SignalActor.__qualname__ = "SignalActor"
_Semaphore.__name__ = _Semaphore.__qualname__ = "Semaphore"
SignalActor = _remote(num_cpus=0)(_SignalActor)
Semaphore = _remote(num_cpus=0)(_Semaphore)


def _timeout_message(last_error):
    message = "The condition wasn't met before the timeout expired."
    if last_error is not None:
        message += f" Last exception: {last_error}"
    return message


def wait_for_condition(condition_predictor, timeout: float = 10, retry_interval_ms: float = 100,
                       raise_exceptions: bool = False, **kwargs: Any):
    """Call ``condition_predictor(**kwargs)`` every ``retry_interval_ms`` milliseconds until it
    returns a true value, for at most ``timeout`` seconds; returns None.

    An exception from the predicate counts as "not yet" (with ``raise_exceptions=True`` it
    propagates). Raises ``RuntimeError("The condition wasn't met before the timeout
    expired.")``, followed by `` Last exception: <traceback>`` when the predicate raised.
    Mirrors ``ray._common.test_utils.wait_for_condition``.
    """
    deadline = time.monotonic() + timeout
    last_error = None
    while True:
        try:
            if condition_predictor(**kwargs):
                return
        except Exception:
            if raise_exceptions:
                raise
            last_error = traceback.format_exc()
        if time.monotonic() >= deadline:
            break
        time.sleep(retry_interval_ms / 1000.0)
    raise RuntimeError(_timeout_message(last_error))


async def async_wait_for_condition(condition_predictor, timeout: float = 10,
                                   retry_interval_ms: float = 100, **kwargs: Any):
    """:func:`wait_for_condition` for event loops: the predicate may be a coroutine function
    (awaited) or a plain one; sleeps with ``asyncio.sleep``. Exceptions of the predicate are
    never raised, the last one is named in the ``RuntimeError`` at the timeout. Mirrors
    ``ray._common.test_utils.async_wait_for_condition``."""
    deadline = time.monotonic() + timeout
    last_error = None
    while True:
        try:
            result = condition_predictor(**kwargs)
            if inspect.isawaitable(result):
                result = await result
            if result:
                return
        except Exception as exc:
            last_error = exc
        if time.monotonic() >= deadline:
            break
        await asyncio.sleep(retry_interval_ms / 1000.0)
    raise RuntimeError(_timeout_message(last_error))


def _decode(data, encode):
    return data.decode(encode, errors="replace") if isinstance(data, bytes) else (data or "")


def _communicate(proc, script_bytes, timeout, encode):
    """Send the script, wait for the exit; on timeout kill the driver and re-raise
    ``subprocess.TimeoutExpired`` after logging what it printed. Returns communicate()'s pair."""
    try:
        return proc.communicate(script_bytes, timeout=timeout)
    except subprocess.TimeoutExpired as expired:
        proc.kill()
        try:
            outputs = proc.communicate(timeout=KILLED_DRIVER_DRAIN_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            # Not even SIGKILL ended it (uninterruptible sleep): stop waiting for it.
            outputs = (expired.stdout or b"", expired.stderr or b"")
            if proc.returncode is None:
                proc.returncode = _KILLED_RETURNCODE
        logger.error("Driver did not exit within %ss; killed it. Output so far:\n%s", timeout,
                     " ".join(_decode(o, encode) for o in outputs if o))
        raise


def run_string_as_driver(driver_script: str, env: Dict = None, encode: str = "utf-8",
                         timeout: Optional[float] = DEFAULT_DRIVER_TIMEOUT_SECONDS) -> str:
    """Run ``driver_script`` as a Python program (``sys.executable -``, the script on stdin)
    and return what it printed, stdout and stderr interleaved, decoded with ``encode``.

    ``env`` replaces the environment (None: inherit this process's). Raises
    ``subprocess.CalledProcessError`` (``output`` = the bytes printed; the output is also
    printed here) when the driver exits non-zero, and ``subprocess.TimeoutExpired`` after
    killing it when it runs longer than ``timeout`` seconds (None: no limit). Mirrors
    ``ray._common.test_utils.run_string_as_driver``.
    """
    with subprocess.Popen([sys.executable, "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, env=env) as proc:
        output, _ = _communicate(proc, driver_script.encode(encode), timeout, encode)
        if proc.returncode:
            print(_decode(output, encode))
            raise subprocess.CalledProcessError(proc.returncode, proc.args, output, proc.stderr)
        return _decode(output, encode)


class FakeTimer:
    """A clock tests move by hand: ``time()`` returns the current fake time (seconds),
    ``advance(by)`` and ``realistic_sleep(amt)`` (``amt`` + 1 ms) move it, ``reset(start)``
    sets it (None: now). Thread-safe. Mirrors Ray's ``FakeTimer``."""

    def __init__(self, start_time: Optional[float] = None):
        self._lock = threading.Lock()
        self.reset(start_time=start_time)

    def reset(self, start_time: Optional[float] = None):
        with self._lock:
            self._curr = time.time() if start_time is None else start_time

    def time(self) -> float:
        return self._curr

    def advance(self, by: float):
        with self._lock:
            self._curr += by

    def realistic_sleep(self, amt: float):
        with self._lock:
            self._curr += amt + 0.001


def is_named_tuple(cls) -> bool:
    """True when ``cls`` is a ``collections.namedtuple`` class (a direct tuple subclass whose
    ``_fields`` is a tuple of strings)."""
    if cls.__bases__ != (tuple,):
        return False
    fields = getattr(cls, "_fields", None)
    return isinstance(fields, tuple) and all(type(f) is str for f in fields)


def assert_tensors_equivalent(obj1, obj2):
    """Assert two (nested) values are equal, comparing ``torch.Tensor`` leaves by dtype, shape,
    device type (not index) and value (``allclose`` for floating and complex dtypes); lists,
    tuples, named tuples, dicts and objects' public ``__dict__`` are walked. Raises
    ``AssertionError`` naming the first difference. Mirrors Ray's helper of that name."""
    import torch

    if isinstance(obj1, torch.Tensor) and isinstance(obj2, torch.Tensor):
        assert obj1.dtype == obj2.dtype, f"dtype mismatch: {obj1.dtype} vs {obj2.dtype}"
        assert obj1.shape == obj2.shape, f"shape mismatch: {obj1.shape} vs {obj2.shape}"
        assert obj1.device.type == obj2.device.type, \
            f"Device type mismatch: {obj1.device} vs {obj2.device}"
        a, b = obj1.cpu(), obj2.cpu()
        if obj1.dtype.is_floating_point or obj1.dtype.is_complex:
            assert torch.allclose(a, b, atol=1e-6, rtol=1e-5), "Floating-point tensors not close"
        else:
            assert torch.equal(a, b), "Integer/bool tensors not equal"
        return
    if type(obj1) is not type(obj2):
        raise AssertionError(f"Type mismatch: {type(obj1)} vs {type(obj2)}")
    if isinstance(obj1, dict):
        assert obj1.keys() == obj2.keys()
        for key in obj1:
            assert_tensors_equivalent(obj1[key], obj2[key])
    elif isinstance(obj1, (list, tuple)):
        assert len(obj1) == len(obj2)
        for a, b in zip(obj1, obj2):
            assert_tensors_equivalent(a, b)
    elif hasattr(obj1, "__dict__") and hasattr(obj2, "__dict__"):
        def public(obj):
            return {k for k in vars(obj) if not k.startswith("_ray_") and k != "_pytype_"}

        keys1, keys2 = public(obj1), public(obj2)
        assert keys1 == keys2, f"Object attribute keys differ: {keys1} vs {keys2}"
        for key in keys1:
            assert_tensors_equivalent(vars(obj1)[key], vars(obj2)[key])
    else:
        assert obj1 == obj2, f"Non-tensor values differ: {obj1} vs {obj2}"


class TelemetryCallsite(Enum):
    """Where :func:`check_library_usage_telemetry` would call the library (Ray's enum)."""

    DRIVER = "driver"
    ACTOR = "actor"
    TASK = "task"


@dataclasses.dataclass
class MetricSamplePattern:
    """A Prometheus sample pattern: ``matches(sample)`` is True when each field that is not
    None equals the sample's (``partial_label_match``: those labels only). Ray's dataclass."""

    name: Optional[str] = None
    value: Optional[str] = None
    partial_label_match: Optional[Dict[str, str]] = None

    def matches(self, sample) -> bool:
        if self.name is not None and self.name != sample.name:
            return False
        if self.value is not None and self.value != sample.value:
            return False
        for label, value in (self.partial_label_match or {}).items():
            if sample.labels.get(label) != value:
                return False
        return True


@dataclasses.dataclass
class PrometheusTimeseries:
    """Accumulated Prometheus samples: ``components_dict`` (address -> components),
    ``metric_descriptors`` (name -> metric), ``metric_samples`` (label set -> latest sample);
    ``flush()`` empties them. Ray's dataclass; nothing in the adapter fills it (no metrics
    endpoint)."""

    components_dict: Dict[str, Set[str]] = dataclasses.field(default_factory=dict)
    metric_descriptors: Dict[str, Any] = dataclasses.field(default_factory=dict)
    metric_samples: Dict[frozenset, Any] = dataclasses.field(default_factory=dict)

    def flush(self):
        self.components_dict.clear()
        self.metric_descriptors.clear()
        self.metric_samples.clear()


__getattr__ = gaps.module_getattr("ray._common.test_utils")
