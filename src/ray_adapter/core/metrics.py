"""Application metrics (what ``ray.util.metrics`` records) gathered in the driver and served in
Prometheus' text exposition format over HTTP on the loopback interface.

Ray 2.60 serves each node's metrics at its metrics export port (``ray.init(_metrics_export_port=
N)``, ``ray.nodes()[i]["MetricsExportPort"]``), names each metric ``ray_<name>`` and labels its
series with ``Component`` and ``Version`` besides the user's tags. The adapter runs one node per
machine, so one endpoint, in the driver, holds every value recorded by the driver, its tasks and
its actors: counters are summed, a gauge keeps the last value set (whoever set it), a histogram
counts observations per bucket. Scrape ``http://127.0.0.1:<port>/metrics``. The machine's own
``ray_node_*`` metrics are served beside them (:mod:`.node_metrics`) when the runtime is a
node of this machine.

A record is ``(kind, name, description, tag_keys, boundaries, tags, value)``: ``kind`` is
"counter", "gauge" or "histogram"; ``tags`` maps every tag key to a string (checked by the
caller, as Ray's ``Metric`` does); ``boundaries`` are a histogram's bucket upper bounds.

Thread-safety: :class:`MetricsExport` keeps its series in ``_series``, guarded by ``_lock``, a
leaf lock (records come from user threads and worker reader threads; a scrape's handler thread
copies the series under it and builds the text outside it). One thread accepts scrapes; it
owns the listening socket until :meth:`MetricsExport.close` sets ``_stopping`` and wakes it
with a connection of its own.
"""
import socket
import sys
import threading

from ray_adapter.core.threads import start_daemon

#: The ``Version`` label of every series (Ray's: the Ray version it mirrors).
RAY_VERSION = "2.60.0"
#: The ``Component`` label (Ray's for metrics recorded by drivers and workers).
COMPONENT = "core_worker"
_FIXED_LABELS = ("Component", "Version")


class _Family:
    __slots__ = ("kind", "description", "tag_keys", "boundaries", "values")

    def __init__(self, kind, description, tag_keys, boundaries):
        self.kind = kind
        self.description = description
        self.tag_keys = tuple(tag_keys)
        self.boundaries = tuple(boundaries or ())
        self.values = {}  # tag values (in tag_keys order) -> float, or [bucket counts, sum]


class MetricsExport:
    """Every application metric of the runtime, served at ``http://127.0.0.1:<port>/metrics``
    (``port``: the one asked for, or a free one when None or 0; see :attr:`port`), with the
    ``ray_node_*`` metrics of this machine when ``node_ip`` is given (the node's address, their
    ``ip`` label; None: a runtime whose nodes are elsewhere)."""

    def __init__(self, port=None, node_ip=None):
        self._lock = threading.Lock()
        self._series = {}  # metric name -> _Family
        self._warned = set()
        self._listener = None
        self._node_ip = node_ip
        self._node = None  # NodeMetrics, made by the first scrape (psutil is imported then)
        self._session = None
        if node_ip is not None:
            from ray_adapter.core.node_metrics import session_name

            self._session = session_name()
        self.port = -1
        self._serve(port)

    # -- recording (any thread) --------------------------------------------------------------
    def record(self, kind, name, description, tag_keys, boundaries, tags, value):
        """Add one record (see the module docstring). A name first defined with another kind,
        other tag keys or other boundaries keeps its first definition; the record is dropped
        with one warning on stderr (Ray's agent keeps the first definition too)."""
        key = tuple(str(tags.get(k, "")) for k in tag_keys)
        value = float(value)
        warn = False
        with self._lock:
            family = self._series.get(name)
            if family is None:
                family = self._series[name] = _Family(kind, description, tag_keys, boundaries)
            elif (family.kind, family.tag_keys, family.boundaries) != (kind, tuple(tag_keys),
                                                                       tuple(boundaries or ())):
                warn = name not in self._warned
                self._warned.add(name)
                family = None
            if family is not None:
                if kind == "counter":
                    family.values[key] = family.values.get(key, 0.0) + value
                elif kind == "gauge":
                    family.values[key] = value
                else:
                    counts = family.values.get(key)
                    if counts is None:
                        counts = family.values[key] = [[0] * (len(family.boundaries) + 1), 0.0]
                    index = next((i for i, b in enumerate(family.boundaries) if value <= b),
                                 len(family.boundaries))
                    counts[0][index] += 1
                    counts[1] += value
                return
        if warn:
            sys.stderr.write(f"ray-adapter: warning: metric {name!r} was defined before with "
                             "another type, tag keys or boundaries; these records are dropped.\n")

    # -- export ------------------------------------------------------------------------------
    def collect(self):
        """prometheus_client's Collector protocol: one metric family per metric."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        with self._lock:
            snapshot = [(name, f.kind, f.description, f.tag_keys, f.boundaries,
                         [(k, list(v[0]) + [v[1]] if isinstance(v, list) else v)
                          for k, v in f.values.items()])
                        for name, f in self._series.items()]
        for name, kind, description, tag_keys, boundaries, values in snapshot:
            labels = list(_FIXED_LABELS) + list(tag_keys)
            full = "ray_" + name
            if kind == "counter":
                family = CounterMetricFamily(full, description, labels=labels)
            elif kind == "gauge":
                family = GaugeMetricFamily(full, description, labels=labels)
            else:
                family = HistogramMetricFamily(full, description, labels=labels)
            for key, value in values:
                label_values = [COMPONENT, RAY_VERSION, *key]
                if kind == "histogram":
                    counts, total = value[:-1], value[-1]
                    cumulative, buckets = 0, []
                    for bound, count in zip(list(boundaries) + [float("inf")], counts):
                        cumulative += count
                        buckets.append(("+Inf" if bound == float("inf") else repr(float(bound)),
                                        cumulative))
                    family.add_metric(label_values, buckets, total)
                else:
                    family.add_metric(label_values, value)
            yield family
        if self._node_ip is not None:
            if self._node is None:  # (two first scrapes at once make two: harmless)
                from ray_adapter.core.node_metrics import NodeMetrics

                self._node = NodeMetrics(self._node_ip, self._session, RAY_VERSION)
            yield from self._node.collect()

    def text(self):
        """The exposition text a scrape gets (bytes)."""
        from prometheus_client import CollectorRegistry, generate_latest

        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        return generate_latest(registry)

    def _serve(self, port):
        """Listen on ``127.0.0.1:port`` (0/None: a free port) now, so that the port is known and
        a taken one reported at once; the HTTP server on that socket is built by the serving
        thread once the first scrape connects (prometheus_client and wsgiref cost ~80 ms of
        imports: neither on ``ray.init``'s path nor beside it, taking the interpreter from it,
        nor in a program that is never scraped). :meth:`close` wakes that thread and ends it
        (no polling)."""
        try:
            listener = socket.create_server(("127.0.0.1", port or 0))
        except OSError as exc:  # the port is taken: the runtime works, without an endpoint
            sys.stderr.write(f"ray-adapter: warning: metrics are not exported: cannot listen on "
                             f"127.0.0.1:{port}: {exc}\n")
            return
        self._listener = listener
        self.port = listener.getsockname()[1]
        self._stopping = False
        self._thread = start_daemon(self._serve_loop, "ray-adapter-metrics", (listener,))

    def _serve_loop(self, listener):
        try:
            try:
                first = listener.accept()  # blocks until a scrape (or close's wake-up) connects
            except OSError:  # the listener was closed under this thread (close gave up on it)
                return
            if self._stopping:
                first[0].close()
                return
            server = _http_server(listener, self)
            server.process_request(*first)  # (the server closes the connection when served)
            while not self._stopping:
                server.handle_request()  # blocks until a connection (timeout None)
        finally:
            listener.close()

    def close(self):
        """Stop serving and free the port (the values are dropped with this object)."""
        listener, self._listener = self._listener, None
        if listener is None:
            return
        self._stopping = True
        try:  # wake the serving thread: it sees _stopping once this connection is handled
            with socket.socket() as wake:  # (no name lookup: create_connection imports idna)
                wake.settimeout(5)
                wake.connect(("127.0.0.1", self.port))
        except OSError:
            pass
        self._thread.join(10)
        listener.close()  # (closed by the thread already, unless it is stuck)


def _http_server(listener, collector):
    """A threading WSGI server serving ``collector``'s exposition on the bound ``listener``."""
    from wsgiref.simple_server import WSGIRequestHandler

    from prometheus_client import CollectorRegistry, make_wsgi_app
    from prometheus_client.exposition import ThreadingWSGIServer

    class QuietHandler(WSGIRequestHandler):
        def log_message(self, *args):  # no access log on the driver's stderr
            pass

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    host, port = listener.getsockname()[:2]
    server = ThreadingWSGIServer((host, port), QuietHandler, bind_and_activate=False)
    server.socket.close()
    server.socket = listener  # bound and listening already (what server_bind would do, below)
    server.server_name, server.server_port = host, port
    server.setup_environ()
    server.set_app(make_wsgi_app(registry))
    server.daemon_threads = True
    return server
