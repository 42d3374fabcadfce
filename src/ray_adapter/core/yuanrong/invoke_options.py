"""Ray's resources and options as yr's ``InvokeOptions`` (units converted, placements mapped).

Units: ``num_cpus`` -> ``cpu`` millicores, ``memory`` bytes -> MB, GPU/NPU -> ``GPU/.+/count``
(or ``GPU/<model>/count`` with ``accelerator_type``). Ray's "forever" (-1) retries and restarts
-> :data:`FOREVER`. A placement (a core :class:`~ray_adapter.core.scheduling.Placement`) in a
bundle -> ``resource_group_options``; node affinity and node labels -> ``schedule_affinities``
(RESOURCE affinities, REQUIRED for hard and PREFERRED for soft constraints); yr's local mode
takes none of them (the adapter grants resources there itself, see :mod:`.local_resources`).
"""
import math

#: yr resource names for Ray's accelerator resources.
ACCELERATOR_RESOURCES = {"GPU": "GPU/.+/count", "NPU": "NPU/.+/count"}
#: yr's ``retry_times``/``recover_retry_times`` have no "forever"; Ray's -1 maps to this.
FOREVER = 2 ** 31 - 1
#: The node label the adapter matches for node affinity on a Yuanrong cluster (the key under
#: which yr nodes carry their id). Not verified against a live cluster: none can run here.
NODE_ID_LABEL = "NODE_ID"
_OPERATORS = {"in": "LABEL_IN", "not_in": "LABEL_NOT_IN", "exists": "LABEL_EXISTS",
              "does_not_exist": "LABEL_NOT_EXISTS"}


def resource_kwargs(resources):
    """The InvokeOptions fields for Ray resources (``{name: amount}``): ``cpu`` millicores,
    ``memory`` MB (rounded up), ``custom_resources`` (accelerators as yr names them)."""
    kwargs = {"cpu": int(round(float(resources.get("CPU", 0)) * 1000))}
    if resources.get("memory"):
        kwargs["memory"] = max(1, math.ceil(resources["memory"] / (1024 * 1024)))
    custom = {}
    model = next((k.split(":", 1)[1] for k in resources if k.startswith("accelerator_type:")), None)
    for key, amount in resources.items():
        if key in ("CPU", "memory") or not amount or (model and key.startswith("accelerator_type:")):
            continue
        name = ACCELERATOR_RESOURCES.get(key, key)
        if model and key in ACCELERATOR_RESOURCES:  # accelerator_type: the card model
            name = f"{key}/{model}/count"
        custom[name] = float(amount)
    if custom:
        kwargs["custom_resources"] = custom
    return kwargs


def yr_bundle(bundle):
    """A placement group bundle in yr's units (``CPU`` millicores, ``Memory`` MB,
    ``GPU/.+/count``), without zero amounts."""
    opts = resource_kwargs(bundle)
    out = {"CPU": opts.get("cpu", 0)}
    if opts.get("memory"):
        out["Memory"] = opts["memory"]
    out.update(opts.get("custom_resources") or {})
    return {k: v for k, v in out.items() if v}


class InvokeOptionsMap:
    """Builds ``yr.InvokeOptions``. Collaborators: ``yr``, ``job_env`` (a call's env_vars, see
    :mod:`.envs`), ``group_names`` (``group id -> yr resource group name or None``: the
    resource groups' lookup), ``local_mode``. Stateless: any thread."""

    def __init__(self, yr, job_env, group_names, local_mode):
        self.yr = yr
        self.job_env = job_env
        self._group_names = group_names
        self.local_mode = local_mode

    def invoke_options(self, resources, *, placement=None, **options):
        """The ``yr.InvokeOptions`` for Ray resources/options (see :meth:`invoke_kwargs`) and
        a core Placement (resource group bundle, schedule affinities)."""
        kwargs = self.invoke_kwargs(resources, **options)
        kwargs.update(self.placement_kwargs(placement))
        return self.yr.InvokeOptions(**kwargs)

    def invoke_kwargs(self, resources, *, name=None, namespace=None, retries=0, restarts=0,
                      concurrency=None, get_if_exists=False, detached=False, runtime_env=None):
        """The InvokeOptions fields for Ray resources (:func:`resource_kwargs`) and options:
        ``retry_times``, ``recover_retry_times``, ``concurrency``, ``name``/``namespace``,
        ``get_if_exists``, detached lifecycle, ``env_vars``."""
        kwargs = resource_kwargs(resources)
        if retries:
            kwargs["retry_times"] = FOREVER if retries < 0 else int(retries)
        if restarts:
            kwargs["recover_retry_times"] = FOREVER if restarts < 0 else int(restarts)
        if concurrency:
            kwargs["concurrency"] = int(concurrency)
        if name:
            kwargs["name"] = name
        if namespace:
            kwargs["namespace"] = namespace
        if get_if_exists:
            kwargs["get_if_exists"] = True
        if detached:
            kwargs["custom_extensions"] = {"lifecycle": "detached"}
        env = self.job_env.env_vars(runtime_env)
        if env:
            kwargs["env_vars"] = env
        return kwargs

    def placement_kwargs(self, placement):
        """InvokeOptions fields for a core Placement (cluster mode; local mode ignores them)."""
        if placement is None or self.local_mode:
            return {}
        yr = self.yr
        out = {}
        if placement.in_group:
            rg_name = self._group_names(placement.group_id)
            if rg_name is not None:
                out["resource_group_options"] = yr.ResourceGroupOptions(
                    resource_group_name=rg_name, bundle_index=placement.bundle_index)
        affinities = []
        kind, kinds = yr.affinity.AffinityKind.RESOURCE, yr.affinity.AffinityType
        if placement.kind == "node":
            op = yr.LabelOperator(yr.affinity.OperatorType.LABEL_IN, NODE_ID_LABEL, [placement.node_id])
            affinities.append(yr.Affinity(kind, kinds.PREFERRED if placement.soft else kinds.REQUIRED, [op]))
        for expressions, level in ((placement.hard, kinds.REQUIRED), (placement.soft_labels, kinds.PREFERRED)):
            if expressions:
                ops = [yr.LabelOperator(getattr(yr.affinity.OperatorType, _OPERATORS[e.op]), e.key,
                                        list(e.values)) for e in expressions]
                affinities.append(yr.Affinity(kind, level, ops))
        if affinities:
            out["schedule_affinities"] = affinities
        return out
