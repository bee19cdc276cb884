"""A table view follows its table: a column added at the source joins it, a dropped one leaves it.

A table view (`{"table": "source.table"}`, viewdef/table_views.py) is every column its agent
exposes of one table. Each extraction answer names a fingerprint of the table's columns
(source_columns.py); when it changes, the sync reads the table's columns and `check` compares
them with the view's. A difference stops the extraction with TableChanged, and the schema
policy (schema_policy.py) then binds the table again and, under `evolve`, redefines the view
within the same sync: a dropped column is projected away from the stored rows, an added one
read in full with its values, the delta starting with a schema line as after a PUT. A column
dropped is also met earlier, as the agent's refusal of a site query naming it.
"""

from __future__ import annotations

from collections.abc import Sequence

from deltasieve_protocol.types import Column
from warehouse.errors import TableChanged
from warehouse.pipeline.source_columns import Seen
from warehouse.viewdef import SiteQuery, ViewDef

#: The actions a sync record lists for a table view's columns that followed its table.
ADDED, DROPPED = "added", "dropped"


def moved(site: SiteQuery, seen: Seen, excluded: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """The columns of the site's one table that the site query lacks (but those the view
    leaves out, `excluded`), and those it reads that the table no longer has (the table
    itself gone: nothing, the agent refuses that).

    >>> from deltasieve_protocol.types import LogicalType
    >>> site = SiteQuery("s", 'SELECT "id", "note" FROM "orders"', [Column("id", LogicalType("int")), Column("note", LogicalType("text"))], ["id"])
    >>> seen = Seen("f", {"orders": {"id": ["int", "integer", False], "memo": ["text", "text", True]}})
    >>> moved(site, seen), moved(site, seen, ["memo"])
    ((['memo'], ['note']), ([], ['note']))
    """
    tables = site.tables()
    now = seen.tables.get(tables[0]) if len(tables) == 1 else None
    if now is None:
        return [], []
    read = [c.name for c in site.columns if not c.name.startswith("__")]
    return [c for c in now if c not in read and c not in excluded], [c for c in read if c not in now]


def check(site: SiteQuery, seen: Seen, excluded: Sequence[str] = ()) -> None:
    """Raise TableChanged when a table view's site no longer reads every column of its table but `excluded`."""
    added, dropped = moved(site, seen, excluded)
    if added or dropped:
        parts = [f"{', '.join(added)} added" if added else "", f"{', '.join(dropped)} dropped" if dropped else ""]
        raise TableChanged(
            f"the columns of table {site.tables()[0]!r} at source {site.source!r} changed: {'; '.join(p for p in parts if p)}",
            [],
        )


def records(old: ViewDef, new: ViewDef, action_added: str = ADDED, action_dropped: str = DROPPED) -> list[dict]:
    """A table view's columns added and dropped from `old` to `new`, as the sync record's schema_changes.

    >>> from deltasieve_protocol.types import LogicalType
    >>> a, b = Column("id", LogicalType("int")), Column("memo", LogicalType("text"))
    >>> site = SiteQuery("s", 'SELECT "id" FROM "orders"', [a], ["id"])
    >>> old, new = ViewDef("", [a], ["id"], [site], table="s.orders"), ViewDef("", [a, b], ["id"], [site], table="s.orders")
    >>> records(old, new)
    [{'table': 's.orders', 'column': 'memo', 'old': None, 'new': 'text', 'action': 'added'}]
    """
    was = {c.name: c for c in old.columns}
    now = {c.name: c for c in new.columns}
    out = [_record(new, c.name, None, c, action_added) for c in new.columns if c.name not in was]
    return out + [_record(new, c.name, c, None, action_dropped) for c in old.columns if c.name not in now]


def _record(view: ViewDef, column: str, old: Column | None, new: Column | None, action: str) -> dict:
    return {
        "table": view.table,
        "column": column,
        "old": str(old.type) if old is not None else None,
        "new": str(new.type) if new is not None else None,
        "action": action,
    }
