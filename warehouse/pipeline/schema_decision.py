"""What a view does about a schema change met at its sources: take it, or refuse it.

`decide` compares the view as it was bound (`old`) with the view bound again against the
sources' schemas now (`new`) under the view's policy, and returns a `Decision`: pure, no
source is read and nothing is stored here (schema_policy.py acts on it).

- `follow`: a table view takes its table's columns added and dropped, and any lossless
  widening with them (under `evolve`, when the view can be redefined within its sync);
- `widen`: every changed column is a lossless widening (under `evolve`), taken in place;
- `refuse`: anything else, with the changes and the reason;
- `unrelated`: the view's columns did not change (the failure is told as it was).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from warehouse.pipeline import table_follow
from warehouse.viewdef import ViewDef
from warehouse.viewdef.widening import WIDENED, TypeChange, type_changes

#: The action a sync record lists for a change that failed the sync.
REFUSED = "refused"

Action = Literal["follow", "widen", "refuse", "unrelated"]


@dataclass(frozen=True)
class Decision:
    """What to do about a schema change, and the sync record's schema_changes for it."""

    action: Action
    #: the changes as the sync record lists them ({table, column, old, new, action} each)
    records: tuple[dict, ...] = ()
    #: the columns whose types changed (a widening takes them in place)
    changes: tuple[TypeChange, ...] = ()
    #: why a refused change is refused
    reason: str = ""
    #: every refused change is a lossless widening (another policy would take it)
    widening: bool = False


def decide(old: ViewDef, new: ViewDef, policy: str, can_follow: bool = False) -> Decision:
    """The decision about a view bound as `old` that binds as `new` now, under `policy`
    ("evolve" or "freeze"); `can_follow`: a table view can be redefined within its sync.

    >>> from deltasieve_protocol.types import Column, LogicalType
    >>> from warehouse.viewdef import SiteQuery
    >>> SQL = 'SELECT "id", "amount", "memo" FROM "orders"'
    >>> def view(amount, *more):
    ...     columns = [Column("id", LogicalType("int")), Column("amount", LogicalType.parse(amount)), *more]
    ...     return ViewDef("", columns, ["id"], [SiteQuery("pg", SQL, columns, ["id"])], table="pg.orders")
    >>> decide(view("decimal(10,2)"), view("decimal(12,2)"), "evolve").action
    'widen'
    >>> frozen = decide(view("decimal(10,2)"), view("decimal(12,2)"), "freeze")
    >>> frozen.action, frozen.widening, [r["action"] for r in frozen.records]
    ('refuse', True, ['refused'])
    >>> decide(view("decimal(12,2)"), view("decimal(10,2)"), "evolve").reason
    'only lossless widenings are taken in place (on_schema_change evolve)'
    >>> memo = Column("memo", LogicalType("text"))
    >>> followed = decide(view("decimal(10,2)"), view("decimal(12,2)", memo), "evolve", can_follow=True)
    >>> followed.action, [(r["column"], r["action"]) for r in followed.records]
    ('follow', [('memo', 'added'), ('amount', 'widened')])
    >>> decide(view("decimal(10,2)"), view("decimal(10,2)", memo), "evolve").action
    'refuse'
    >>> decide(view("decimal(10,2)"), view("decimal(10,2)"), "evolve").action
    'unrelated'
    """
    if old.table is not None:
        moved = table_follow.records(old, new)
        if moved:
            return _followed(old, new, moved, policy, can_follow)
    changes = type_changes(old, new)
    if changes is None:
        return Decision("refuse", reason="the view no longer binds to the same columns, keys and site queries")
    if not changes:
        return Decision("unrelated")
    widening = all(c.widened for c in changes)
    if policy == "evolve" and widening:
        return Decision("widen", tuple(records(old, changes, WIDENED)), tuple(changes))
    reason = (
        _policy_refuses(policy)
        if policy != "evolve"
        else "only lossless widenings are taken in place (on_schema_change evolve)"
    )
    return Decision("refuse", tuple(records(old, changes, REFUSED)), tuple(changes), reason, widening)


def _followed(old: ViewDef, new: ViewDef, moved: list[dict], policy: str, can_follow: bool) -> Decision:
    """A table view whose table gained or lost columns: followed, with any lossless widening."""
    was = {c.name: c.type for c in old.columns}
    changes = [TypeChange(0, c.name, was[c.name], c.type) for c in new.columns if was.get(c.name, c.type) != c.type]
    narrowed = [c for c in changes if not c.widened]
    if policy == "evolve" and can_follow and not narrowed:
        return Decision("follow", tuple(moved + records(old, changes, WIDENED)), tuple(changes))
    refused = [{**r, "action": REFUSED} for r in moved] + records(old, narrowed, REFUSED)
    reason = (
        _policy_refuses(policy)
        if policy != "evolve"
        else "only columns added or dropped and lossless widenings are taken (on_schema_change evolve)"
    )
    return Decision("refuse", tuple(refused), tuple(narrowed), reason)


def _policy_refuses(policy: str) -> str:
    return f"the view's on_schema_change is {policy}, which takes no change"


def records(view: ViewDef, changes: list[TypeChange], action: str) -> list[dict]:
    """The sync record's schema_changes: one per changed column of a site query, in source terms."""
    out = []
    for c in changes:
        if c.site is None:
            continue
        site = view.sites[c.site]
        table, _, column = site.origin(c.column).rpartition(".")
        out.append(
            {
                "table": f"{site.source}.{table}" if table else site.source,
                "column": column,
                "old": str(c.old),
                "new": str(c.new),
                "action": action,
            }
        )
    return out
