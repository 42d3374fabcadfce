"""``ray.util.metrics``: application metrics (mirrors Ray 2.60's ``Counter``, ``Gauge`` and
``Histogram``, with their arguments, validation and errors).

Values recorded in the driver, in tasks and in actors are gathered by the driver's runtime and
served in Prometheus' text format at ``http://127.0.0.1:<port>/metrics``, where ``<port>`` is
``ray.init(_metrics_export_port=...)`` or, by default, a free port that
``ray.nodes()[0]["MetricsExportPort"]`` reports (Ray serves each node's metrics at that port).
A metric ``name`` is exported as ``ray_<name>`` (a counter as ``ray_<name>_total``), each
series labelled ``Component="core_worker"``, ``Version="2.60.0"`` and the metric's tags.
Records made while no runtime is started are dropped.
"""
import re
import warnings

from ray_adapter import core as _core
from ray_adapter import gaps as _gaps

__all__ = ["Counter", "Histogram", "Gauge"]

# Prometheus' rule for metric names (as Ray checks them).
_VALID_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


def _discarded(name):
    """True when ``name`` is not a valid Prometheus name: Ray warns and records nothing."""
    if len(name) == 0:
        raise ValueError("Empty name is not allowed. Please provide a metric name.")
    if not _VALID_NAME.match(name):
        warnings.warn(
            f"Invalid metric name: {name}. Metric will be discarded and data will not be "
            "collected or published. Metric names can only contain letters, numbers, _, and :. "
            "Metric names cannot start with numbers.", UserWarning)
        return True
    return False


class Metric:
    """The base of the metric classes (mirrors ``ray.util.metrics.Metric``).

    ``name``: the metric's name (letters, digits, ``_``; exported as ``ray_<name>``);
    ``description``: its help text; ``tag_keys``: a tuple of the tag names every record must
    give a value to (from ``tags`` or the default tags). Raises ``ValueError`` for an empty
    name, ``TypeError`` for ``tag_keys`` that is not a tuple of str."""

    _kind = ""

    def __init__(self, name, description="", tag_keys=None):
        self._discard_metric = _discarded(name)
        self._name = name
        self._description = description
        self._default_tags = {}
        self._tag_keys = tag_keys or tuple()
        if not isinstance(self._tag_keys, tuple):
            raise TypeError(f"tag_keys should be a tuple type, got: {type(self._tag_keys)}")
        for key in self._tag_keys:
            if not isinstance(key, str):
                raise TypeError(f"Tag keys must be str, got {type(key)}.")
        if ":" in self._name:
            warnings.warn(
                f"Metric name {self._name} contains a : character, which is no longer allowed. "
                "Please migrate to the new metric name format. This will be an error in the "
                "future.", FutureWarning)

    def set_default_tags(self, default_tags):
        """Tags used by every record unless it gives its own; returns the metric itself.
        Raises ``ValueError`` for a key not in ``tag_keys``, ``TypeError`` for a value that is
        not a str."""
        for key, value in default_tags.items():
            if key not in self._tag_keys:
                raise ValueError(f"Unrecognized tag key {key}.")
            if not isinstance(value, str):
                raise TypeError(f"Tag values must be str, got {type(value)}.")
        self._default_tags = default_tags
        return self

    def _record(self, value, tags=None):
        if self._discard_metric:
            return
        final = self._final_tags(tags)
        missing = [key for key in self._tag_keys if key not in final]
        if missing:
            raise ValueError(f"Missing value for tag key(s): {','.join(missing)}.")
        if not _core.is_started():
            return  # nothing to export to (as a Ray worker without a metrics agent)
        _core.current().record_metric(self._kind, self._name, self._description, self._tag_keys,
                                      tuple(getattr(self, "boundaries", ()) or ()), final, value)

    def _final_tags(self, tags):
        if not tags:
            return self._default_tags
        for value in tags.values():
            if not isinstance(value, str):
                raise TypeError(f"Tag values must be str, got {type(value)}.")
        return {**self._default_tags, **tags}

    @property
    def info(self):
        """``{"name", "description", "tag_keys", "default_tags"}`` of this metric."""
        return {"name": self._name, "description": self._description,
                "tag_keys": self._tag_keys, "default_tags": self._default_tags}


def _check_number(value):
    if not isinstance(value, (int, float)):
        raise TypeError(f"value must be int or float, got {type(value)}.")


class Counter(Metric):
    """A monotonically increasing count (mirrors ``ray.util.metrics.Counter``; a Prometheus
    counter, exported as ``ray_<name>_total``, summed over every process that records it)."""

    _kind = "counter"

    def __reduce__(self):
        return self.__class__, (self._name, self._description, self._tag_keys)

    def inc(self, value=1.0, tags=None):
        """Add ``value`` (int or float, > 0; default 1). ``tags`` override the default tags.
        Raises ``TypeError`` for a non-number, ``ValueError`` for ``value <= 0`` or a tag key
        left without a value."""
        _check_number(value)
        if value <= 0:
            raise ValueError(f"value must be >0, got {value}")
        self._record(value, tags)


class Histogram(Metric):
    """Observations counted per bucket (mirrors ``ray.util.metrics.Histogram``; a Prometheus
    histogram ``ray_<name>`` with ``_bucket``, ``_count`` and ``_sum`` series).

    ``boundaries``: the buckets' upper bounds, positive numbers (a last ``+Inf`` bucket is
    added). Raises ``ValueError`` when they are missing, empty or not all positive."""

    _kind = "histogram"

    def __init__(self, name, description="", boundaries=None, tag_keys=None):
        super().__init__(name, description, tag_keys)
        if boundaries is None or len(boundaries) == 0:
            raise ValueError(
                "boundaries argument should be provided when using the Histogram class. e.g., "
                'Histogram("name", boundaries=[1.0, 2.0])')
        for i, boundary in enumerate(boundaries):
            if boundary <= 0:
                raise ValueError(f"Invalid `boundaries` argument at index {i}, {boundaries}. Use "
                                 "positive values for the arguments.")
        self.boundaries = boundaries

    def observe(self, value, tags=None):
        """Count ``value`` (int or float) in its bucket. Raises ``TypeError`` for a non-number."""
        _check_number(value)
        self._record(value, tags)

    def __reduce__(self):
        return Histogram, (self._name, self._description, self.boundaries, self._tag_keys)

    @property
    def info(self):
        """:attr:`Metric.info` plus ``"boundaries"``."""
        info = super().info
        info.update({"boundaries": self.boundaries})
        return info


class Gauge(Metric):
    """The last value set (mirrors ``ray.util.metrics.Gauge``; a Prometheus gauge
    ``ray_<name>``: whichever process set a tag set last gives its value)."""

    _kind = "gauge"

    def set(self, value, tags=None):
        """Set the gauge to ``value`` (int or float; ``None`` does nothing). Raises
        ``TypeError`` for a non-number."""
        if value is None:
            return
        _check_number(value)
        self._record(value, tags)

    def __reduce__(self):
        return Gauge, (self._name, self._description, self._tag_keys)


# A name Ray does not have here: the ImportError / AttributeError naming Ray's module.
__getattr__ = _gaps.module_getattr("ray.util.metrics")
