"""Ray's placement options, turned into the runtime core's :class:`~ray_adapter.core.scheduling.Placement`.

``scheduling_strategy`` (``"DEFAULT"``, ``"SPREAD"``, ``PlacementGroupSchedulingStrategy``,
``NodeAffinitySchedulingStrategy``, ``NodeLabelSchedulingStrategy``), the older
``placement_group`` / ``placement_group_bundle_index`` / ``placement_group_capture_child_tasks``
options and ``label_selector`` are checked as Ray checks them (same exceptions and messages)
and combined into one Placement when a remote function's or actor class's options are built.

Capture (Ray's ``placement_group_capture_child_tasks``) depends on who submits: a task created
inside a capturing task or actor joins its group. :func:`with_capture` applies it per call; the
runtime core says cheaply whether the caller captures (``RuntimeCore.captured_placement_group``).
"""
import sys
import warnings

from ray_adapter.ray._private.label_selectors import label_selector

ACCELERATOR_PREFIX = "accelerator_type:"
#: The share of ``accelerator_type:<name>`` a task or actor asks for, as in Ray.
ACCELERATOR_SHARE = 0.001

_STRATEGY_TYPES = ("(<class 'NoneType'>, <class 'str'>, <class 'ray.util.scheduling_strategies."
                   "PlacementGroupSchedulingStrategy'>, <class 'ray.util.scheduling_strategies."
                   "NodeAffinitySchedulingStrategy'>, <class 'ray.util.scheduling_strategies."
                   "NodeLabelSchedulingStrategy'>)")
_OPTION_TYPES = {
    "placement_group": "(<class 'NoneType'>, <class 'str'>, <class 'ray.util.placement_group.PlacementGroup'>)",
    "placement_group_bundle_index": "<class 'int'>",
    "placement_group_capture_child_tasks": "(<class 'bool'>, <class 'NoneType'>)",
    "label_selector": "(<class 'dict'>, <class 'NoneType'>)",
    "accelerator_type": "(<class 'str'>, <class 'NoneType'>)",
}


def _classes():
    """The placement_group module (not the function ``ray.util`` binds to that name) and
    the scheduling_strategies module: Ray's classes the options are checked against (loaded
    on first use: ``ray.util`` loads much more)."""
    import ray_adapter.ray.util.placement_group  # noqa: F401 - read from sys.modules below
    from ray_adapter.ray.util import scheduling_strategies

    return sys.modules["ray_adapter.ray.util.placement_group"], scheduling_strategies


def check_type(key, value):
    """Ray's type checks of the placement options (raised at decoration / ``.options()``)."""
    pg_module, s = _classes()
    if key == "scheduling_strategy":
        if value is not None and not isinstance(value, (str, s.PlacementGroupSchedulingStrategy,
                                                        s.NodeAffinitySchedulingStrategy,
                                                        s.NodeLabelSchedulingStrategy)):
            raise TypeError(f"The type of keyword 'scheduling_strategy' must be {_STRATEGY_TYPES}, "
                            f"but received type {_ray_type(value)}")
        return
    ok = {"placement_group": lambda v: v is None or isinstance(v, (str, pg_module.PlacementGroup)),
          "placement_group_bundle_index": lambda v: isinstance(v, int) and not isinstance(v, bool),
          "placement_group_capture_child_tasks": lambda v: v is None or isinstance(v, bool),
          "label_selector": lambda v: v is None or isinstance(v, dict),
          "accelerator_type": lambda v: v is None or isinstance(v, str)}.get(key)
    if ok is not None and not ok(value):
        raise TypeError(f"The type of keyword '{key}' must be {_OPTION_TYPES[key]}, but received "
                        f"type {_ray_type(value)}")
    if key == "label_selector" and value:
        label_selector(value, "label_selector")


def _ray_type(value):
    return f"<class '{type(value).__module__}.{type(value).__qualname__}'>".replace(
        "<class 'builtins.", "<class '").replace("ray_adapter.ray.", "ray.")


def _label_expressions(expressions):
    from ray_adapter.core.scheduling import LabelMatch  # (its dataclasses: not at ``import ray``)

    _, s = _classes()
    out = []
    for e in expressions:
        op = e.operator
        if isinstance(op, s.In):
            out.append(LabelMatch(e.key, "in", tuple(op.values)))
        elif isinstance(op, s.NotIn):
            out.append(LabelMatch(e.key, "not_in", tuple(op.values)))
        elif isinstance(op, s.Exists):
            out.append(LabelMatch(e.key, "exists"))
        else:
            out.append(LabelMatch(e.key, "does_not_exist"))
    return tuple(out)


def static_placement(options, resources, repr_name, actor_default=False):
    """The Placement for a function's or class's merged ``options`` (None: Ray's default,
    which a capturing parent may still turn into its group per call; see :func:`with_capture`).
    ``resources`` is the request (for Ray's check that it fits a bundle); ``actor_default``:
    an actor that names no resource (it needs 1 CPU in a bundle to be created, as in Ray).
    Raises ValueError / TypeError as Ray does."""
    from ray_adapter.core.scheduling import Placement  # (its dataclasses: not at ``import ray``)

    pg_module, s = _classes()
    strategy = options.get("scheduling_strategy")
    group = options.get("placement_group", "default")
    index = options.get("placement_group_bundle_index")
    index = -1 if index is None else index
    capture = options.get("placement_group_capture_child_tasks")
    if group not in ("default", None) and strategy is not None:
        raise ValueError("Placement groups should be specified via the scheduling_strategy "
                         "option. The placement_group option is deprecated.")
    hard = label_selector(options.get("label_selector"), "label_selector")
    if not isinstance(strategy, s.PlacementGroupSchedulingStrategy):
        _warn_deprecated(group, index, capture)
    if isinstance(strategy, str):
        if strategy not in ("DEFAULT", "SPREAD"):
            raise ValueError(f"Invalid scheduling_strategy value {strategy}. Valid values are "
                             '["DEFAULT" | "SPREAD" | PlacementGroupSchedulingStrategy | '
                             "NodeAffinitySchedulingStrategy]")
        return Placement(kind="spread" if strategy == "SPREAD" else "default", hard=hard)
    if isinstance(strategy, s.NodeAffinitySchedulingStrategy):
        return Placement(kind="node", node_id=strategy.node_id, soft=bool(strategy.soft),
                         spill=bool(strategy._spill_on_unavailable),
                         fail=bool(strategy._fail_on_unavailable), hard=hard)
    if isinstance(strategy, s.NodeLabelSchedulingStrategy):
        return Placement(hard=_label_expressions(strategy.hard) + hard,
                         soft_labels=_label_expressions(strategy.soft))
    if isinstance(strategy, s.PlacementGroupSchedulingStrategy):
        group = strategy.placement_group
        index = strategy.placement_group_bundle_index
        capture = strategy.placement_group_capture_child_tasks
    if isinstance(group, str) and group != "default":
        raise TypeError("placement_group must be a PlacementGroup, None or 'default'")
    if group is None or (isinstance(group, pg_module.PlacementGroup) and group.is_empty):
        pg_module.check_placement_group_index(pg_module.PlacementGroup.empty(), index)
        return Placement(hard=hard)  # explicitly no group: never captured
    if group == "default":
        if index != -1 and not capture:
            pg_module.check_placement_group_index(pg_module.PlacementGroup.empty(), index)
        return Placement(hard=hard) if (hard or capture is False) else None
    check_group(group, index, resources, repr_name, actor_default)
    return Placement(kind="group", group_id=group.id.binary(), bundle_index=index,
                     capture=None if capture is None else bool(capture))


def check_group(group, index, resources, repr_name, actor_default):
    """Ray's checks that ``index`` names a bundle and the request fits some bundle."""
    pg_module, _ = _classes()
    pg_module.check_placement_group_index(group, index)
    bundles = group.bundle_specs
    if not _fits_some(resources, bundles):
        raise ValueError(f"Cannot schedule {repr_name} with the placement group because the "
                         f"resource request {resources} cannot fit into any bundles for the "
                         f"placement group, {bundles}.")
    if actor_default and not _fits_some({"CPU": 1}, bundles):
        raise ValueError(f"Cannot schedule {repr_name} with the placement group because the "
                         f"actor requires 1 CPU for creation, but it cannot fit into any bundles "
                         f"for the placement group, {bundles}. Consider creating a placement "
                         "group with CPU resources.")


def _fits_some(resources, bundles):
    return any(all(bundle.get(k, 0) >= v for k, v in resources.items()
                   if k != "bundle" and not k.startswith(ACCELERATOR_PREFIX))
               for bundle in bundles)


def with_capture(core, opts, resources, repr_name, actor_default=False):
    """``opts`` (TaskOptions / ActorOptions) with the caller's captured group applied: a
    default placement joins it (any bundle), and a group placement whose capture flag was not
    given inherits the caller's. Unchanged (the same object) when the caller captures nothing."""
    placement = opts.scheduling
    if placement is not None and not (placement.in_group and placement.capture is None):
        return opts
    captured = core.captured_placement_group()
    if captured is None:
        return opts
    import dataclasses

    from ray_adapter.core.scheduling import Placement

    if placement is None:
        pg_module, _ = _classes()
        from ray_adapter.ray._private.object_refs import PlacementGroupID

        group = pg_module.PlacementGroup(PlacementGroupID(captured[0]))
        check_group(group, -1, resources, repr_name, actor_default)
        placement = Placement(kind="group", group_id=captured[0], bundle_index=-1, capture=True)
    else:
        placement = dataclasses.replace(placement, capture=True)
    return dataclasses.replace(opts, scheduling=placement)


def accelerator_resources(accelerator_type):
    """Ray's resource request for ``accelerator_type=<name>``: ``{"accelerator_type:<name>": 0.001}``."""
    return {f"{ACCELERATOR_PREFIX}{accelerator_type}": ACCELERATOR_SHARE} if accelerator_type else {}


def _warn_deprecated(group, index, capture):
    for flag, name in ((group != "default", "placement_group"),
                       (index != -1, "placement_group_bundle_index"),
                       (bool(capture), "placement_group_capture_child_tasks")):
        if flag:
            warnings.warn(f"{name} parameter is deprecated. Use scheduling_strategy="
                          "PlacementGroupSchedulingStrategy(...) instead, see the usage at "
                          "https://docs.ray.io/en/latest/ray-core/package-ref.html#ray-remote.",
                          DeprecationWarning, stacklevel=5)
