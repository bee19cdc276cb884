"""The grouped site query of a view over tables without a key (a multiset): each distinct
row once with its number of occurrences, NULL read as a filler beside a flag."""

from __future__ import annotations

from sqlglot import exp

from remote_agent.protocol import grouped, sitesql
from remote_agent.protocol.types import Column, LogicalType

from .binding import BoundView

#: What a grouped site query puts in place of NULL, per logical type: any value its
#: column's converter reads will do (the NULL flag beside it says the value was NULL).
_FILLERS = {
    "int": lambda: exp.Literal.number(0),
    "float": lambda: exp.Literal.number(0),
    "decimal": lambda: exp.Literal.number(0),
    "text": lambda: exp.Literal.string(""),
    "bytes": lambda: exp.Literal.string(""),
    "bool": lambda: exp.Boolean(this=False),
    "date": lambda: exp.Literal.string("1970-01-01"),
    "timestamp": lambda: exp.Literal.string("1970-01-01 00:00:00"),
    "timestamptz": lambda: exp.Literal.string("1970-01-01 00:00:00+00:00"),
}


def grouped_site(bound: BoundView) -> tuple[exp.Select, list[Column], list[str], dict]:
    """The grouped site query of a multiset view (sitesql.py): each distinct row once with
    its number of occurrences, keyed by all its columns. A nullable column is read with NULL
    replaced by a filler and flagged, so that no key column is ever NULL at the agent (its
    keyset reads, lookups and ranges compare values) nor in the warehouse's key joins.

    Returns the query's tree (rendered in the source's dialect by the caller), its output
    columns, its key, and the definition's `multiset` entry.
    """
    items: list[tuple[exp.Expression, str]] = []
    flags: list[tuple[exp.Expression, str]] = []
    group: dict[tuple[str, str], exp.Column] = {}
    columns, flag_columns, nulls = [], [], {}
    for o in bound.outputs:
        alias = bound.relations[o.relation].alias
        ref = sitesql.column_ref(alias, o.column.name)
        group.setdefault((alias, o.column.name), ref)
        columns.append(Column(o.name, o.column.type))
        if not o.column.nullable:
            items.append((ref.copy(), o.name))
            continue
        items.append((exp.Coalesce(this=ref.copy(), expressions=[_FILLERS[o.column.type.kind]()]), o.name))
        flag = grouped.null_flag(o.name)
        flags.append((exp.Is(this=ref.copy(), expression=exp.Null()), flag))
        flag_columns.append(Column(flag, LogicalType("bool")))
        nulls[o.name] = flag
    items += flags
    items.append((exp.Count(this=exp.Star()), grouped.COUNT_COLUMN))
    tree = sitesql.build_select(
        items, [(r.table.name, r.alias) for r in bound.relations], bound.conditions, bound.where, list(group.values())
    )
    key = [c.name for c in columns + flag_columns]
    site_columns = columns + flag_columns + [Column(grouped.COUNT_COLUMN, LogicalType("int"))]
    return tree, site_columns, key, {"count": grouped.COUNT_COLUMN, "nulls": nulls}
