"""``ray.util.scheduling_strategies``: where a task or actor runs (mirrors Ray 2.60's module).

Pass an instance as ``scheduling_strategy=`` to ``@ray.remote`` / ``.options()`` on tasks and
actors (the strings ``"DEFAULT"`` and ``"SPREAD"`` are accepted too). Each class validates its
arguments as Ray's does and raises ``ValueError`` with Ray's message.
"""
from ray_adapter import gaps
from ray_adapter.ray._private.object_refs import NodeID


class PlacementGroupSchedulingStrategy:
    """Run in ``placement_group``, in bundle ``placement_group_bundle_index`` (``-1``: any
    bundle with room); with ``placement_group_capture_child_tasks=True`` the tasks and actors
    it creates land in the same group by default."""

    def __init__(self, placement_group, placement_group_bundle_index=-1,
                 placement_group_capture_child_tasks=None):
        self.placement_group = placement_group
        self.placement_group_bundle_index = placement_group_bundle_index
        self.placement_group_capture_child_tasks = placement_group_capture_child_tasks


class NodeAffinitySchedulingStrategy:
    """Run on node ``node_id`` (hex, or a NodeID). ``soft=False``: only there (fails with
    TaskUnschedulableError / ActorUnschedulableError if the node is gone or can never fit it,
    waits while it is busy); ``soft=True``: there if it can, else elsewhere.
    ``_spill_on_unavailable`` (soft only) also goes elsewhere when the node is busy;
    ``_fail_on_unavailable`` (hard only) fails instead of waiting."""

    def __init__(self, node_id, soft, _spill_on_unavailable=False, _fail_on_unavailable=False):
        if not isinstance(node_id, str):
            node_id = node_id.hex()
        self.node_id = node_id
        self.soft = soft
        self._spill_on_unavailable = _spill_on_unavailable
        self._fail_on_unavailable = _fail_on_unavailable
        self._validate_attributes()

    def _validate_attributes(self):
        invalid = ValueError(
            f"Invalid node_id '{self.node_id}'. Node ID must be a valid hex string. To get a "
            "list of all nodes and their IDs in your cluster, use ray.nodes(). See "
            "https://docs.ray.io/en/latest/ray-core/miscellaneous.html#node-information for more "
            "details.")
        try:
            node_id = NodeID.from_hex(self.node_id)
        except Exception as exc:
            raise invalid from exc
        if node_id.is_nil():
            raise invalid
        if self._spill_on_unavailable and not self.soft:
            raise ValueError("_spill_on_unavailable cannot be set when soft is False. Please set "
                             "soft to True to use _spill_on_unavailable.")
        if self._fail_on_unavailable and self.soft:
            raise ValueError("_fail_on_unavailable cannot be set when soft is True. Please set "
                             "soft to False to use _fail_on_unavailable.")


def _check_values(values, operator):
    if not values:
        raise ValueError(f"The variadic parameter of the {operator} operator must be a non-empty "
                         f'tuple: e.g. {operator}("value1", "value2").')
    for index, value in enumerate(values):
        if not isinstance(value, str):
            raise ValueError(
                f"Type of value in position {index} for the {operator} operator must be str "
                f'(e.g. {operator}("value1", "value2")) but got {value} of type {type(value)}.')


class In:
    """Label operator: the node's label value is one of ``values``."""

    def __init__(self, *values):
        _check_values(values, "In")
        self.values = list(values)


class NotIn:
    """Label operator: the node has the label and its value is none of ``values``."""

    def __init__(self, *values):
        _check_values(values, "NotIn")
        self.values = list(values)


class Exists:
    """Label operator: the node has the label."""


class DoesNotExist:
    """Label operator: the node lacks the label."""


class _LabelMatchExpression:
    def __init__(self, key, operator):
        self.key = key
        self.operator = operator


def _expressions(mapping, param):
    if mapping is None:
        return []
    if not isinstance(mapping, dict):
        raise ValueError(f'The {param} parameter must be a map (e.g. {{"key1": In("value1")}}) '
                         f"but got type {type(mapping)}.")
    out = []
    for key, value in mapping.items():
        if not isinstance(key, str):
            raise ValueError(f"The map key of the {param} parameter must be of type str (e.g. "
                             f'{{"key1": In("value1")}}) but got {key} of type {type(key)}.')
        if not isinstance(value, (In, NotIn, Exists, DoesNotExist)):
            raise ValueError(
                f"The map value for key {key} of the {param} parameter must be one of the `In`, "
                f'`NotIn`, `Exists` or `DoesNotExist` operator (e.g. {{"key1": In("value1")}}) '
                f"but got {value} of type {type(value)}.")
        out.append(_LabelMatchExpression(key, value))
    return out


class NodeLabelSchedulingStrategy:
    """Run on a node whose labels match every ``hard`` expression, preferring nodes that also
    match the ``soft`` ones: ``NodeLabelSchedulingStrategy({"zone": In("a", "b")},
    soft={"gpu": Exists()})``. Waits while no live node matches (as Ray)."""

    def __init__(self, hard, *, soft=None):
        self.hard = _expressions(hard, "hard")
        self.soft = _expressions(soft, "soft")
        if not (self.hard or self.soft):
            raise ValueError("The `hard` and `soft` parameter of NodeLabelSchedulingStrategy "
                             "cannot both be empty.")


__getattr__ = gaps.module_getattr("ray.util.scheduling_strategies")
