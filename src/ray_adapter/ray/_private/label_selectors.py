"""Ray's label selectors (``label_selector=`` of tasks and actors, ``bundle_label_selector=``
of placement groups), checked as Ray checks them and turned into the core's
:class:`~ray_adapter.core.scheduling.LabelMatch` expressions. A leaf: both the placement options
and ``ray.util.placement_group`` use it."""
import re

_LABEL = r"[a-zA-Z0-9]([a-zA-Z0-9_.-]{0,61}[a-zA-Z0-9])?"
_SELECTOR_VALUE = re.compile(rf"^!?(?:in)?\({_LABEL}(?:, ?{_LABEL})*\)$|^!?{_LABEL}$")


def label_selector(selector, option):
    """``{label: "value" | "!value" | "in(a,b)" | "!in(a,b)"}`` as LabelMatch expressions.
    Raises ValueError for a key or value Ray refuses."""
    from ray_adapter.core.scheduling import LabelMatch  # (its dataclasses: not at ``import ray``)

    out = []
    for key, value in (selector or {}).items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"Invalid label key {key!r} in {option}.")
        if value is None or value == "":
            out.append(LabelMatch(key, "exists"))
            continue
        if not isinstance(value, str) or not _SELECTOR_VALUE.match(value):
            raise ValueError(
                f"Invalid label selector value `{value}`. The label selector value should contain "
                "optional operators and a label value. Supported operators are: ! and {'in'}. "
                "Value must be 63 chars or less beginning and ending with an alphanumeric "
                "character ([a-z0-9A-Z]) with dashes (-), underscores (_),dots (.), and "
                "alphanumerics between.")
        negate = value.startswith("!")
        body = value[1:] if negate else value
        if body.startswith("in(") or body.startswith("("):
            values = tuple(v.strip() for v in body[body.index("(") + 1:-1].split(","))
        else:
            values = (body,)
        out.append(LabelMatch(key, "not_in" if negate else "in", values))
    return tuple(out)
