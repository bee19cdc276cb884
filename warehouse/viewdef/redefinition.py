"""A view's redefinition: what the sync applying it must do, decided from the two definitions.

A PUT stores the new definition at once; the view's stored rows keep following the old one
until its next sync applies the change. That sync reads as little as the change allows:

- `projection`: the new view is the old one with columns left out (one keyed site, the
  same source, FROM, WHERE and key): the stored rows are projected, nothing is read.
- otherwise the new definition is read in full and compared with the old rows, each read
  with the new columns (`carried`: a column the old view lacks is NULL), matched by the new
  key where the old rows have every column of it (`matched_by_key`); else every old row
  leaves and every new one enters.

The delta of that sync starts with the `schema_line` of the new definition.
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.errors import SqlglotError

from deltasieve_protocol.types import Column
from warehouse.viewdef.model import SiteQuery, ViewDef


def same_rows(old: ViewDef, new: ViewDef) -> bool:
    """Whether two definitions describe the same stored rows (their stored JSON compared)."""
    return old.to_json() == new.to_json()


def kept_columns(old: list[Column], new: list[Column]) -> bool:
    """Whether every column of `new` is one of `old`, of the same type.

    >>> from deltasieve_protocol.types import LogicalType
    >>> a, b = Column("id", LogicalType.parse("int")), Column("v", LogicalType.parse("text"))
    >>> kept_columns([a, b], [a]), kept_columns([a], [a, b]), kept_columns([a], [Column("id", b.type)])
    (True, False, False)
    """
    types = {c.name: c.type for c in old}
    return all(c.name in types and types[c.name] == c.type for c in new)


def _rest(site: SiteQuery) -> tuple[str, set[str]] | None:
    """The site query without its SELECT list, as SQL, and the items of that list; None if
    it cannot be read."""
    try:
        tree = site.parse()
    except (SqlglotError, ValueError):
        return None
    items = {e.sql(dialect=site.dialect) for e in tree.expressions}
    bare = tree.copy()
    bare.set("expressions", [exp.Star()])
    return site.render(bare), items


def projection(old: ViewDef, new: ViewDef) -> list[str] | None:
    """The columns to keep when `new` is `old` with columns left out, else None (a read is needed).

    Only a keyed view of one site qualifies: the same source and key, the site query the same
    but for a SELECT list that is part of the old one, and every view column one of the old.

    >>> from deltasieve_protocol.types import LogicalType
    >>> def view(sql, *names):
    ...     cols = [Column(n, LogicalType.parse("int")) for n in names]
    ...     return ViewDef("", cols, ["id"], [SiteQuery("s", sql, cols, ["id"])])
    >>> old = view("SELECT t.id, t.a, t.b FROM t WHERE t.a > 1", "id", "a", "b")
    >>> projection(old, view("SELECT t.id, t.b FROM t WHERE t.a > 1", "id", "b"))
    ['id', 'b']
    >>> projection(old, view("SELECT t.id, t.b FROM t WHERE t.a > 2", "id", "b")) is None  # another WHERE
    True
    >>> projection(old, view("SELECT t.id, t.a, t.b, t.c FROM t WHERE t.a > 1", "id", "a", "b", "c")) is None
    True
    """
    if old.multiset or new.multiset or old.assembly is not None or new.assembly is not None:
        return None
    if len(old.sites) != 1 or len(new.sites) != 1 or old.key != new.key:
        return None
    was, now = old.sites[0], new.sites[0]
    if (was.source, was.key, was.dialect) != (now.source, now.key, now.dialect):
        return None
    if not kept_columns(was.columns, now.columns) or not kept_columns(old.columns, new.columns):
        return None
    before, after = _rest(was), _rest(now)
    if before is None or after is None or before[0] != after[0] or not after[1] <= before[1]:
        return None
    return [c.name for c in new.columns]


def matched_by_key(old: ViewDef, new: ViewDef) -> bool:
    """Whether old rows can be matched to new ones by the new key: the old view has every
    column of it, so a row that stays is an update (or nothing), not a delete and an insert.

    >>> from deltasieve_protocol.types import LogicalType
    >>> cols = lambda *n: [Column(x, LogicalType.parse("int")) for x in n]
    >>> matched_by_key(ViewDef("", cols("id", "a"), ["id"], []), ViewDef("", cols("a", "b"), ["a"], []))
    True
    >>> matched_by_key(ViewDef("", cols("id", "a"), ["id"], []), ViewDef("", cols("id", "b"), ["id", "b"], []))
    False
    """
    if old.multiset or new.multiset:
        return False
    names = {c.name for c in old.columns}
    return all(k in names for k in new.key)


def carried(old: ViewDef, new: ViewDef) -> dict[str, str | None]:
    """Each new column, and the old column read for it (None: the old view lacks it, read as NULL).

    >>> from deltasieve_protocol.types import LogicalType
    >>> cols = lambda *n: [Column(x, LogicalType.parse("int")) for x in n]
    >>> carried(ViewDef("", cols("id", "a"), ["id"], []), ViewDef("", cols("id", "b"), ["id"], []))
    {'id': 'id', 'b': None}
    """
    names = {c.name for c in old.columns}
    return {c.name: (c.name if c.name in names else None) for c in new.columns}


def changed_columns(old: ViewDef, new: ViewDef) -> dict[str, list[str]]:
    """The view columns a redefinition adds and drops, and the new key when it changes.

    >>> from deltasieve_protocol.types import LogicalType
    >>> cols = lambda *n: [Column(x, LogicalType.parse("int")) for x in n]
    >>> changed_columns(ViewDef("", cols("id", "a"), ["id"], []), ViewDef("", cols("id", "b"), ["id"], []))
    {'added': ['b'], 'dropped': ['a']}
    """
    was, now = [c.name for c in old.columns], [c.name for c in new.columns]
    out = {"added": [n for n in now if n not in was], "dropped": [n for n in was if n not in now]}
    if old.key != new.key:
        out["key"] = list(new.key)
    return out


def schema_line(sync_id: str, view: ViewDef) -> dict:
    """The delta line that says a sync redefined the view: its new columns with their types, and key.

    >>> from deltasieve_protocol.types import LogicalType
    >>> v = ViewDef("", [Column("id", LogicalType.parse("int"))], ["id"], [])
    >>> schema_line("s1", v)
    {'sync': 's1', 'op': 'schema', 'columns': [{'name': 'id', 'type': 'int'}], 'key': ['id']}
    """
    return {"sync": sync_id, "op": "schema", "columns": [c.to_json() for c in view.columns], "key": list(view.key)}
