"""RecordingYr: a stand-in for the openYuanrong SDK's cluster mode, for tests only.

No Yuanrong cluster can run here, so the cluster-only paths of the yuanrong backend (Config
built from the environment, InvokeOptions for resources and options, ``yr.resources()``,
named-instance lookups) are checked against this recorder: it records every call with its
arguments and runs tasks synchronously in-process so that whole flows complete. It is a fake
and is named so; the real SDK (local mode) is what the conformance suite runs against.
"""
import concurrent.futures
import itertools
import threading


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


class ResourceGroupOptions(_Record):
    pass


class Affinity(_Record):
    def __init__(self, affinity_kind, affinity_type, label_operators, affinity_scope=None):
        super().__init__(affinity_kind=affinity_kind, affinity_type=affinity_type,
                         label_operators=label_operators)


class LabelOperator(_Record):
    def __init__(self, operator_type, key, values=None):
        super().__init__(operator_type=operator_type, key=key, values=list(values or []))


class _Enum:
    def __init__(self, *names):
        for name in names:
            setattr(self, name, name)


class _AffinityModule:
    AffinityKind = _Enum("RESOURCE", "INSTANCE")
    AffinityType = _Enum("PREFERRED", "PREFERRED_ANTI", "REQUIRED", "REQUIRED_ANTI")
    OperatorType = _Enum("LABEL_IN", "LABEL_NOT_IN", "LABEL_EXISTS", "LABEL_NOT_EXISTS")


class ResourceGroup:
    """A recorded resource group; ``wait`` returns once the test calls ``place`` (or at once
    when the recorder places groups immediately)."""

    def __init__(self, recorder, name, bundles, strategy):
        self.recorder, self.name, self.bundles, self.strategy = recorder, name, bundles, strategy
        self.placed = threading.Event()
        self.removed = False

    def wait(self, timeout_seconds=None):
        self.recorder.calls.append(("wait_resource_group", self.name, timeout_seconds))
        self.placed.wait()
        if self.removed:
            raise RuntimeError(f"resource group {self.name} was removed")


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
    ResourceGroupOptions = ResourceGroupOptions
    Affinity = Affinity
    LabelOperator = LabelOperator
    affinity = _AffinityModule

    def __init__(self, resources=None, named=None, instances=None, place_groups=True):
        self.calls = []
        self.groups = {}
        self.place_groups = place_groups
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

    def create_resource_group(self, bundles, name=None, strategy="PACK"):
        self.calls.append(("create_resource_group", bundles, name, strategy))
        group = self.groups[name] = ResourceGroup(self, name, bundles, strategy)
        if self.place_groups:
            group.placed.set()
        return group

    def remove_resource_group(self, resource_group):
        name = getattr(resource_group, "name", resource_group)
        self.calls.append(("remove_resource_group", name))
        group = self.groups.get(name)
        if group is not None:
            group.removed = True
            group.placed.set()

    def resource_group_table(self, resource_group_id):
        """The shape the SDK declares (ResourceGroupUnit / RgInfo / BundleInfo): bundle i on
        the i-th node of ``resources`` (round robin)."""
        self.calls.append(("resource_group_table", resource_group_id))
        group = self.groups[resource_group_id]
        nodes = [r["id"] for r in self._resources] or ["node"]
        return {"resourceGroups": {group.name: {"name": group.name, "bundles": [
            {"bundleId": f"{group.name}_{i}", "functionProxyId": nodes[i % len(nodes)]}
            for i in range(len(group.bundles))]}}}

    def options_of(self, kind):
        """InvokeOptions kwargs of every recorded call of ``kind`` ("task" or "instance")."""
        return [c[2].kwargs if c[2] is not None else {} for c in self.calls if c[0] == kind]
