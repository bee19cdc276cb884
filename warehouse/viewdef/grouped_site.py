"""The grouped site queries of a view over tables without a key (a multiset): each distinct
row once with its number of occurrences, NULL read as a filler beside a flag; and, for such a
view over several sites, the assembly's pieces that join them (multiset.py has the why)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from deltasieve_protocol import grouped, sitesql
from deltasieve_protocol.sqlnodes import Node
from deltasieve_protocol.types import Column, LogicalType
from warehouse.viewdef.bound import BoundView

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


@dataclass
class Grouped:
    """The select items of a grouped site query and what they make."""

    items: list[tuple[exp.Expression, str]]
    group: list[exp.Column]
    columns: list[Column]  # its output columns: the values, their NULL flags, the count
    key: list[str]  # the values and the flags
    nulls: dict[str, str]  # value column -> its NULL flag


def grouped_items(entries: list[tuple[exp.Column, Column, bool]]) -> Grouped:
    """The grouped form of select items (column reference, output column, nullable): each
    nullable one read with NULL replaced by a filler and flagged, so that no key column is
    ever NULL at the agent (its keyset reads, lookups and ranges compare values) nor in the
    warehouse's key joins; then COUNT(*).

    >>> g = grouped_items([(exp.column("a", "t"), Column("a", LogicalType("int")), True)])
    >>> [e.sql() for e, _ in g.items], g.key, g.nulls
    (['COALESCE(t.a, 0)', 't.a IS NULL', 'COUNT(*)'], ['a', '__ds_null_a'], {'a': '__ds_null_a'})
    """
    items: list[tuple[exp.Expression, str]] = []
    flags: list[tuple[exp.Expression, str]] = []
    group: dict[tuple[str, str], exp.Column] = {}
    columns, flag_columns, nulls = [], [], {}
    for ref, column, nullable in entries:
        group.setdefault((ref.table, ref.name), ref)
        columns.append(column)
        if not nullable:
            items.append((ref.copy(), column.name))
            continue
        items.append((exp.Coalesce(this=ref.copy(), expressions=[_FILLERS[column.type.kind]()]), column.name))
        flag = grouped.null_flag(column.name)
        flags.append((exp.Is(this=ref.copy(), expression=exp.Null()), flag))
        flag_columns.append(Column(flag, LogicalType("bool")))
        nulls[column.name] = flag
    items += flags
    items.append((exp.Count(this=exp.Star()), grouped.COUNT_COLUMN))
    key = [c.name for c in columns + flag_columns]
    counted = columns + flag_columns + [Column(grouped.COUNT_COLUMN, LogicalType("int"))]
    return Grouped(items, list(group.values()), counted, key, nulls)


def grouped_site(bound: BoundView) -> tuple[exp.Select, list[Column], list[str], dict]:
    """The grouped site query of a multiset view of one site (sitesql.py), keyed by all its columns.

    Returns the query's tree (rendered in the source's dialect by the caller), its output
    columns, its key, and the definition's `multiset` entry.
    """
    g = grouped_items(
        [
            (
                sitesql.column_ref(bound.relations[o.relation].alias, o.column.name),
                Column(o.name, o.column.type),
                o.column.nullable,
            )
            for o in bound.outputs
        ]
    )
    tree = sitesql.build_select(
        g.items, [(r.table.path, r.alias) for r in bound.relations], bound.conditions, bound.where, g.group
    )
    return tree, g.columns, g.key, {"count": grouped.COUNT_COLUMN, "nulls": g.nulls}


def site_count(site: int) -> str:
    """The name under which the assembly of a multiset over several sites selects the count of site `site`.

    >>> site_count(1)
    '__ds_count_1'
    """
    return f"{grouped.COUNT_COLUMN}_{site}"


def nulls_restored(ref: exp.Column, flag: str | None) -> exp.Expression:
    """A site column as the assembly's conditions read it: NULL where its flag says so.

    >>> nulls_restored(exp.column("b", "s0"), "__ds_null_b").sql()
    'CASE WHEN s0.__ds_null_b THEN NULL ELSE s0.b END'
    """
    if flag is None:
        return ref
    test = exp.Column(this=exp.to_identifier(flag, quoted=ref.this.quoted), table=ref.args["table"].copy())
    return exp.Case(ifs=[exp.If(this=test, true=exp.Null())], default=ref)


def combination_items(sites: list[list[Column]], ref) -> list[Node]:
    """The select list of a multiset's assembly: of every site, each column but the count as
    itself, then the count as `site_count(i)`; `ref(site, name)` makes a column reference.
    A row so selected is a *combination*, one row of each site, keyed by all their keys."""
    items = []
    for i, columns in enumerate(sites):
        for c in columns:
            name = site_count(i) if c.name == grouped.COUNT_COLUMN else c.name
            items.append(exp.alias_(ref(i, c.name), name, quoted=True))
    return items
