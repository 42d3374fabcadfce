"""``ray.util.placement_group``: placement groups (mirrors Ray 2.60's module).

A placement group reserves resource bundles on the cluster's nodes with a strategy (``PACK``,
``SPREAD``, ``STRICT_PACK``, ``STRICT_SPREAD``); tasks and actors then run in a bundle through
``PlacementGroupSchedulingStrategy``. Creation is asynchronous: ``pg.ready()`` is an ObjectRef
that resolves (to the group) once every bundle is reserved, ``pg.wait(timeout_seconds)`` a bool;
a group that cannot be placed stays pending. The runtime core does the placing
(``RuntimeCore.create_placement_group``).
"""
import warnings

from ray_adapter import gaps
from ray_adapter.core import errors as core_errors
from ray_adapter.ray._private.label_selectors import label_selector
from ray_adapter.ray._private.core_access import context as _context, core as _core, translated
from ray_adapter.ray._private.object_refs import ObjectRef, PlacementGroupID, put_object

VALID_PLACEMENT_GROUP_STRATEGIES = {"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"}
NODE_ID_LABEL_KEY = "ray.io/node-id"
PLACEMENT_GROUP_BUNDLE_RESOURCE_NAME = "bundle"

#: Bundle specs by group id: a group's bundles never change, so each process asks once.
_bundle_cache = {}


class PlacementGroup:
    """A handle to a placement group (mirrors ``ray.util.placement_group.PlacementGroup``):
    ``id`` (a PlacementGroupID, ``id.hex()`` 36 digits), ``bundle_specs`` (list of
    ``{resource: float}``), ``bundle_count``, ``ready()``, ``wait(timeout_seconds)``."""

    @staticmethod
    def empty():
        return PlacementGroup(PlacementGroupID.nil())

    def __init__(self, id, bundle_cache=None):  # noqa: A002 - Ray's parameter name
        self.id = id
        self.bundle_cache = bundle_cache

    @property
    def is_empty(self):
        return self.id.is_nil()

    def ready(self):
        """An ObjectRef that resolves to this group once every bundle is reserved; ``ray.get``
        on it raises ``TaskPlacementGroupRemoved`` if the group is removed first."""
        if self.is_empty:  # ready at once, as ``ray.put(self)``
            return put_object(self)
        core = _core()
        with translated:
            object_id = core.placement_group_ready(self.id.binary(), self)
        return ObjectRef(object_id, core, _add_ref=False)

    def wait(self, timeout_seconds=30):
        """True once the group is created, False if ``timeout_seconds`` passed first; a removed
        group raises ``Exception("Placement group PlacementGroupID(...) does not exist.")``, as
        in Ray."""
        with translated:
            try:
                return bool(_core().wait_placement_group(self.id.binary(), timeout_seconds))
            except core_errors.PlacementGroupRemoved:
                raise Exception(f"Placement group {self.id} does not exist.") from None

    @property
    def bundle_specs(self):
        self._fill_bundle_cache_if_needed()
        return self.bundle_cache

    @property
    def bundle_count(self):
        self._fill_bundle_cache_if_needed()
        return len(self.bundle_cache)

    def _fill_bundle_cache_if_needed(self):
        if not self.bundle_cache:
            self.bundle_cache = _bundles_of(self.id.binary())

    def __eq__(self, other):
        return isinstance(other, PlacementGroup) and self.id == other.id

    def __hash__(self):
        return hash(self.id)

    def __reduce__(self):
        return PlacementGroup, (self.id, self.bundle_cache)


def _bundles_of(group_id):
    specs = _bundle_cache.get(group_id)
    if specs is None:
        with translated:
            records = _core().placement_group_table(group_id)
        if not records:
            return []
        specs = _bundle_cache[group_id] = [dict(b) for b in records[0]["bundles"]]
    return [dict(b) for b in specs]


def placement_group(bundles, strategy=None, name="", lifetime=None, _soft_target_node_id=None,
                    bundle_label_selector=None, topology_strategy=None):
    """Create a placement group asynchronously (mirrors ``ray.util.placement_group``).

    ``bundles``: a list of ``{resource: amount}`` dicts; ``strategy`` (default ``PACK``);
    ``name`` (unique in the namespace: a second live group of that name raises RaySystemError,
    as in Ray); ``lifetime``: None (ends with its creator: the job, or the actor that created
    it) or ``"detached"``; ``bundle_label_selector``: one ``{label: value}`` dict per bundle.
    Raises ``ValueError`` for invalid arguments, as Ray does."""
    validate_placement_group(bundles, strategy, lifetime, _soft_target_node_id,
                             bundle_label_selector, topology_strategy)
    if _soft_target_node_id is not None or topology_strategy is not None:
        what = "_soft_target_node_id" if _soft_target_node_id is not None else "topology_strategy"
        raise gaps.option_gap_error("ray.util.placement_group", what,
                                    "Soft target nodes and topology strategies are not implemented.")
    if strategy is None:
        strategy = "PACK"
    selectors = None
    if bundle_label_selector:
        selectors = [label_selector(s, "bundle_label_selector") for s in bundle_label_selector]
    core = _core()
    with translated:
        group_id = core.create_placement_group([dict(b) for b in bundles], strategy, name or "",
                                               lifetime, selectors)
    specs = [{k: float(v) for k, v in b.items()} for b in bundles]
    _bundle_cache[group_id] = specs
    return PlacementGroup(PlacementGroupID(group_id), bundle_cache=[dict(b) for b in specs])


def remove_placement_group(placement_group):
    """Remove a group (mirrors ``ray.util.remove_placement_group``): its bundles are released,
    the actors in it die and its tasks are killed; pending work for it fails."""
    core = _core()  # started first, as Ray's (its AssertionError then)
    assert placement_group is not None
    with translated:
        core.remove_placement_group(placement_group.id.binary())


def get_placement_group(placement_group_name):
    """The live group named ``placement_group_name`` in the current namespace; raises
    ``ValueError`` if there is none (mirrors ``ray.util.get_placement_group``)."""
    if not placement_group_name:
        raise ValueError("Please supply a non-empty value to get_placement_group")
    core = _core()
    namespace = _context().namespace
    with translated:
        records = core.placement_group_table(None)
    for record in records:
        if (record["name"] == placement_group_name and record["namespace"] == namespace
                and record["state"] != "REMOVED"):
            return PlacementGroup(PlacementGroupID(record["placement_group_id"]))
    raise ValueError(f"Failed to look up placement group with name: {placement_group_name}")


def placement_group_table(placement_group=None):
    """Ray's table of one group, or ``{id hex: entry}`` of all (mirrors
    ``ray.util.placement_group_table``). Entry keys: ``placement_group_id``, ``name``,
    ``bundles`` ``{index: {resource: amount}}``, ``bundles_to_node_id`` ``{index: node id hex}``
    (``""`` while unplaced), ``strategy``, ``state`` (PENDING, CREATED, REMOVED,
    RESCHEDULING), ``stats``."""
    from ray_adapter.ray._private import state
    from ray_adapter.ray._private.core_access import core

    core()  # starts the runtime if nobody has, as Ray's does (its global state would not)
    return state.state.placement_group_table(placement_group.id if placement_group is not None else None)


def get_current_placement_group():
    """The group the calling task or actor runs in, or None (always None in the driver)."""
    ctx = _context()
    if ctx.is_driver or not ctx.placement_group_id:
        return None
    return PlacementGroup(PlacementGroupID(ctx.placement_group_id))


def check_placement_group_index(placement_group, bundle_index):
    """Ray's check of ``placement_group_bundle_index`` against ``placement_group``."""
    assert placement_group is not None
    if placement_group.id.is_nil():
        if bundle_index != -1:
            raise ValueError("If placement group is not set, the value of bundle index must be -1.")
    elif bundle_index >= placement_group.bundle_count or bundle_index < -1:
        raise ValueError(f"placement group bundle index {bundle_index} is invalid. Valid "
                         f"placement group indexes: 0-{placement_group.bundle_count}")


def validate_placement_group(bundles, strategy=None, lifetime=None, _soft_target_node_id=None,
                             bundle_label_selector=None, topology_strategy=None):
    """Ray's argument checks of :func:`placement_group`; raises ``ValueError``."""
    if topology_strategy is not None and strategy is not None:
        raise ValueError("`strategy` and `topology_strategy` cannot both be specified. Pass "
                         f"node-level packing via `topology_strategy['{NODE_ID_LABEL_KEY}']`.")
    if strategy is not None and strategy not in VALID_PLACEMENT_GROUP_STRATEGIES:
        raise ValueError(f"Invalid placement group strategy {strategy}. Supported strategies "
                         f"are: {VALID_PLACEMENT_GROUP_STRATEGIES}.")
    if _soft_target_node_id and (strategy or "PACK") != "STRICT_PACK":
        raise ValueError("_soft_target_node_id currently only works with STRICT_PACK but got "
                         f"{strategy or 'PACK'}")
    _validate_bundles(bundles)
    if bundle_label_selector is not None:
        if len(bundles) != len(bundle_label_selector):
            raise ValueError(f"Invalid bundle label selector {bundle_label_selector}. The length "
                             "of `bundle_label_selector` should equal the length of `bundles`.")
        for selector in bundle_label_selector:
            if not isinstance(selector, dict) or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in selector.items()):
                raise ValueError(
                    "Bundle label selector must be a list of string dictionary label selectors. "
                    'For example: `[{ray.io/market_type": "spot"}, {"ray.io/accelerator-type": '
                    '"A100"}]`.')
    if lifetime not in (None, "detached"):
        raise ValueError("Placement group `lifetime` argument must be either `None` or "
                         f"'detached'. Got {lifetime}.")


def _validate_bundles(bundles):
    if not isinstance(bundles, list):
        raise ValueError(f"Placement group bundles must be a list, got {type(bundles)}.")
    if len(bundles) == 0:
        raise ValueError('Bundles must be a non-empty list of resource dictionaries. For example: '
                         '`[{"CPU": 1.0}, {"GPU": 1.0}]`. Got empty list instead.')
    for bundle in bundles:
        if not isinstance(bundle, dict) or not all(isinstance(k, str) for k in bundle) or not all(
                isinstance(v, (int, float)) for v in bundle.values()):
            raise ValueError('Bundles must be a non-empty list of resource dictionaries. For '
                             'example: `[{"CPU": 1.0}, {"GPU": 1.0}]`.')
        if len(bundle) == 0 or all(v == 0 for v in bundle.values()):
            raise ValueError("Bundles cannot be an empty dictionary or resources with only 0 "
                             f"values. Bundles: {bundles}")
        if "object_store_memory" in bundle:
            warnings.warn("Setting 'object_store_memory' for bundles is deprecated since it "
                          "doesn't actually reserve the required object store memory.",
                          DeprecationWarning, stacklevel=3)


__getattr__ = gaps.module_getattr("ray.util.placement_group")
