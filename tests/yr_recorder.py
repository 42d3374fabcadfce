"""RecordingYr: a stand-in for the openYuanrong SDK's cluster mode, for tests only.

No Yuanrong cluster can run here, so the cluster-only paths of the yuanrong backend (Config
built from the environment, InvokeOptions for resources and options, ``yr.resources()``,
named-instance lookups) are checked against this recorder: it records every call with its
arguments and runs tasks synchronously in-process so that whole flows complete. It is a fake
and is named so; the real SDK (local mode) is what the conformance suite runs against.
"""
import concurrent.futures
import itertools


class _Record:
    """Keyword arguments of a Config / InvokeOptions, compared by value in assertions."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs

    def __getattr__(self, name):
        try:
            return self.kwargs[name]
        except KeyError:
            raise AttributeError(name) from None

    def __repr__(self):
        return f"{type(self).__name__}({self.kwargs})"


class Config(_Record):
    pass


class InvokeOptions(_Record):
    pass


class Ref:
    _ids = itertools.count(1)

    def __init__(self, value=None, exc=None):
        self.id = f"rec-obj-{next(self._ids)}"
        self._future = concurrent.futures.Future()
        if exc is not None:
            self._future.set_exception(exc)
        else:
            self._future.set_result(value)

    def get_future(self):
        return self._future


def _resolve(args):
    return [a.get_future().result() if isinstance(a, Ref) else a for a in args]


class _Invocable:
    def __init__(self, recorder, target, kind):
        self.recorder, self.target, self.kind = recorder, target, kind
        self.opts = None

    def options(self, opts):
        clone = type(self)(self.recorder, self.target, self.kind)
        clone.opts = opts
        return clone

    def invoke(self, *args, **kwargs):
        self.recorder.calls.append((self.kind, self.target, self.opts, args))
        if self.kind == "instance":
            return _Instance(self.recorder, self.target(*_resolve(args)), self.opts)
        try:
            return Ref(self.target(*_resolve(args)))
        except Exception as exc:  # noqa: BLE001
            return Ref(exc=exc)


class _Method:
    def __init__(self, instance, name):
        self.instance, self.name = instance, name

    def invoke(self, *args):
        self.instance.recorder.calls.append(("method", self.name, None, args))
        return Ref(getattr(self.instance.obj, self.name)(*_resolve(args)))


class _Instance:
    def __init__(self, recorder, obj, opts):
        self.recorder, self.obj, self.opts = recorder, obj, opts
        self.terminated = False

    def __getattr__(self, name):
        return _Method(self, name)

    def terminate(self, is_sync=False):
        self.recorder.calls.append(("terminate", None, None, ()))
        self.terminated = True


class RecordingYr:
    """The ``yr`` surface the yuanrong backend uses, recording each call in ``calls``."""

    Config = Config
    InvokeOptions = InvokeOptions

    def __init__(self, resources=None, named=None, instances=None):
        self.calls = []
        self._initialized = False
        self._resources = resources or []
        self._named = named or []
        self._instances = instances or {}

    def is_initialized(self):
        return self._initialized

    def init(self, conf):
        self.calls.append(("init", conf))
        self._initialized = True

    def finalize(self):
        self.calls.append(("finalize",))
        self._initialized = False

    def put(self, obj):
        if obj is None or obj == b"":  # as the real SDK: YRValueError for these
            raise ValueError("yr.put does not accept None or empty bytes")
        self.calls.append(("put", obj))
        return Ref(obj)

    def invoke(self, fn):
        return _Invocable(self, fn, "task")

    def instance(self, cls):
        return _Invocable(self, cls, "instance")

    def cancel(self, refs, allow_force=True, allow_recursive=False):
        self.calls.append(("cancel", allow_force, allow_recursive))

    def resources(self):
        self.calls.append(("resources",))
        return self._resources

    def list_named_instances(self, all_namespaces=False):
        self.calls.append(("list_named_instances", all_namespaces))
        return self._named

    def get_instance(self, name, namespace="", timeout=60):
        self.calls.append(("get_instance", name, namespace))
        if (namespace, name) not in self._instances:
            raise RuntimeError(f"failed to get instance: {name}")
        return self._instances[(namespace, name)]

    def options_of(self, kind):
        """InvokeOptions kwargs of every recorded call of ``kind`` ("task" or "instance")."""
        return [c[2].kwargs if c[2] is not None else {} for c in self.calls if c[0] == kind]
