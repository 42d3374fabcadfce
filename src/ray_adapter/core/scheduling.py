"""Where a task or actor may run: the backend-neutral placement request of the runtime core.

The proxy turns Ray's ``scheduling_strategy`` / ``placement_group`` / ``label_selector``
options into one :class:`Placement`; each backend honours it (the embedded scheduler picks a
node or a placement-group bundle, the yuanrong backend builds yr's ``resource_group_options`` and
``schedule_affinities``). ``None`` where a Placement is expected means Ray's default strategy.

Kinds:

- ``"default"``: any node that fits (explicit, as Ray's ``"DEFAULT"``);
- ``"spread"``: spread over the nodes that fit (Ray's ``"SPREAD"``);
- ``"node"``: node affinity to ``node_id`` (hex); ``soft`` lets it run elsewhere when that node
  is gone or can never fit it; ``spill`` (soft only) also when it is busy now; ``fail`` (hard
  only) fails at once when the node is busy instead of waiting;
- ``"group"``: bundle ``bundle_index`` (``-1``: any) of placement group ``group_id``;
  ``capture`` makes the tasks it submits land in the same group.

``hard`` / ``soft`` are label expressions (:class:`LabelMatch`) nodes must / should satisfy; they
combine with ``"default"`` and ``"spread"``.
"""
from dataclasses import dataclass
from typing import Optional, Tuple

LABEL_OPERATORS = ("in", "not_in", "exists", "does_not_exist")
NODE_ID_LABEL = "ray.io/node-id"


@dataclass(frozen=True)
class LabelMatch:
    """One label expression: ``key`` ``op`` (one of :data:`LABEL_OPERATORS`) ``values``."""

    key: str
    op: str
    values: Tuple[str, ...] = ()

    def __post_init__(self):
        if self.op not in LABEL_OPERATORS:
            raise ValueError(f"unknown label operator {self.op!r}; one of {LABEL_OPERATORS}")

    def matches(self, labels):
        """Does a node with ``labels`` (``{key: value}``) satisfy this expression?"""
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "does_not_exist":
            return not present
        if self.op == "in":
            return present and labels[self.key] in self.values
        return not present or labels[self.key] not in self.values  # not_in: as Ray, absent matches


def matches_all(labels, expressions):
    return all(e.matches(labels) for e in expressions)


@dataclass(frozen=True)
class Placement:
    """A task's or actor's placement request (see the module docstring for the kinds)."""

    kind: str = "default"
    node_id: Optional[str] = None
    soft: bool = False
    spill: bool = False
    fail: bool = False
    group_id: Optional[bytes] = None
    bundle_index: int = -1
    capture: Optional[bool] = False  # None: not given (the proxy fills in the caller's capture)
    hard: Tuple[LabelMatch, ...] = ()
    soft_labels: Tuple[LabelMatch, ...] = ()

    @property
    def in_group(self):
        return self.kind == "group"

    def key(self):
        """What makes two requests of one resource shape schedule differently (a queue key)."""
        if self.kind == "default" and not self.hard and not self.soft_labels:
            return None
        return (self.kind, self.node_id, self.soft, self.spill, self.fail, self.group_id,
                self.bundle_index, self.hard, self.soft_labels)


DEFAULT = Placement()
SPREAD = Placement(kind="spread")
