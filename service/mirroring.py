"""Mirroring: a table view of each table of a source, made in one request.

A mirror names each view after its source and table (`mirror_view_name`), so that running
it again finds the views it made: a table whose view exists is listed as existing, a new
table gets its view, and a name another view holds is skipped. Each view is bound against
the one schema the source's agent gave for the whole request (`define`), never asked again
per table, so that a mirror of hundreds of tables costs one round trip to the agent.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from deltasieve_protocol import sitenames
from deltasieve_protocol.schema import SourceSchema
from service.catalog import Catalog
from service.errors import Conflict, Unprocessable
from service.models import NAME_MAX_LENGTH
from warehouse.view_options import ViewOptions
from warehouse.viewdef import ViewDef, ViewDefinitionError

#: Hex digits of the hash that ends a view name shortened to NAME_MAX_LENGTH: 32 bits, so
#: two long names of one source that share their first 54 characters still differ.
HASH_DIGITS = 8
#: What a table whose view name another view holds is skipped with.
NAME_TAKEN = "name taken"

#: Binds a table view (`source.table`) and gives its definition and options; raises
#: Unprocessable for a table no view can keep.
Define = Callable[[str], tuple[ViewDef, ViewOptions]]


def mirror_view_name(source: str, table: str) -> str:
    """The name of the view a mirror makes of `table` at `source`: `<source>_<table>`
    (`schema.table` outside the default schema gives `<source>_<schema>_<table>`), lower-cased,
    every character but a letter, a digit or `_` as `_`, and a name longer than a view name
    may be cut and ended with a short hash of the source and table, so that it stays unique.

    >>> mirror_view_name("crm", "Orders"), mirror_view_name("crm", "erp.Order Items")
    ('crm_orders', 'crm_erp_order_items')
    >>> mirror_view_name("crm", "Straße-2024")
    'crm_stra_e_2024'
    >>> long = mirror_view_name("crm", "a" * 100)
    >>> long, len(long)
    ('crm_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa_11c90962', 63)
    >>> long != mirror_view_name("crm", "a" * 101)
    True
    """
    name = re.sub(r"[^a-z0-9_]", "_", f"{source}_{table}".lower())
    if len(name) <= NAME_MAX_LENGTH:
        return name
    digest = hashlib.sha256(f"{source}.{table}".encode()).hexdigest()[:HASH_DIGITS]
    return f"{name[: NAME_MAX_LENGTH - HASH_DIGITS - 1]}_{digest}"


@dataclass(frozen=True)
class Mirrored:
    """A table of the mirror and its view, keyed by `key` (empty: a multiset view)."""

    table: str
    view: str
    key: list[str]


@dataclass(frozen=True)
class Skipped:
    """A table the mirror made no view of, and why."""

    table: str
    reason: str


@dataclass
class Mirror:
    """What one mirror request did, table by table, in the order of the tables."""

    created: list[Mirrored] = field(default_factory=list)
    existing: list[Mirrored] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


def mirrored_tables(schema: SourceSchema, asked: Sequence[str] | None) -> list[str]:
    """The tables of `schema` to mirror, as the agent names them: those `asked` (each once,
    matched as view SQL matches a table: exactly, else ignoring case), or all when None.

    Raises:
        Unprocessable: tables the agent does not expose, named, with what it does expose.

    >>> from deltasieve_protocol.schema import TableInfo
    >>> s = SourceSchema("sqlite", {"orders": TableInfo("orders", (), ()), "Items": TableInfo("Items", (), ())})
    >>> mirrored_tables(s, None), mirrored_tables(s, ["items", "orders", "Items"])
    (['Items', 'orders'], ['Items', 'orders'])
    """
    if asked is None:
        return sorted(schema.tables)
    found: dict[str, None] = {}
    unknown = []
    for wanted in asked:
        try:
            name = sitenames.pick_name(wanted, schema.tables, ViewDefinitionError, "table")
        except ViewDefinitionError as exc:
            raise Unprocessable(exc.detail) from None
        if name is None:
            unknown.append(wanted)
        else:
            found[name] = None
    if unknown:
        raise Unprocessable(
            f"the agent exposes no table {', '.join(map(repr, unknown))} (its tables: "
            f"{sitenames.name_list(sorted(schema.tables))}); an agent started with --allow exposes only the tables it "
            f"names, one outside the default schema as schema.table"
        )
    return list(found)


def set_aside(
    schema: SourceSchema, tables: Sequence[str], asked: Sequence[str] | None
) -> tuple[list[str], list[Skipped]]:
    """Of `tables`, those the mirror makes views of, and those it passes over with the reason.

    A mirror of every table (`asked` None) makes no view of a partition or an inheriting
    table, whose rows the view of its root holds already, nor of a source's view or
    materialized view; one that names such a relation makes its view.

    >>> from deltasieve_protocol.schema import TableInfo
    >>> s = SourceSchema("postgres", {"pay": TableInfo("pay", (), ()), "pay_1": TableInfo("pay_1", (), (), kind="partition", parent="pay")})
    >>> kept, aside = set_aside(s, ["pay", "pay_1"], None)
    >>> kept, [a.reason.split(":")[0] for a in aside]
    (['pay'], ['partition of pay'])
    >>> set_aside(s, ["pay_1"], ["pay_1"])[0]
    ['pay_1']
    """
    if asked is not None:
        return list(tables), []
    kept, aside = [], []
    for table in tables:
        reason = schema.tables[table].mirrored_with
        if reason is None:
            kept.append(table)
        else:
            aside.append(Skipped(table, reason))
    return kept, aside


def excluded_columns(schema: SourceSchema, tables: Sequence[str], exclude: Sequence[str]) -> dict[str, list[str]]:
    """The columns each of `tables` leaves out, by a mirror's `exclude_columns`: `table.column`
    (the table as the agent names it) for one table's column, a bare `column` for that column of
    every table that has it.

    Raises:
        Unprocessable: an entry that names no column of the tables mirrored.

    >>> from deltasieve_protocol.schema import ColumnInfo, TableInfo
    >>> from deltasieve_protocol.types import LogicalType
    >>> col = lambda n: ColumnInfo(n, LogicalType("int"), True, "integer")
    >>> s = SourceSchema("pg", {"a": TableInfo("a", (col("id"), col("ssn")), ()), "erp.b": TableInfo("erp.b", (col("id"), col("geom")), (), schema="erp")})
    >>> excluded_columns(s, ["a", "erp.b"], ["ssn", "erp.b.geom"])
    {'a': ['ssn'], 'erp.b': ['geom']}
    """
    out: dict[str, list[str]] = {table: [] for table in tables}
    unknown = []
    for entry in exclude:
        table, _, column = entry.rpartition(".")
        if table:
            hit = table in out and schema.tables[table].column(column) is not None
            if hit:
                out[table].append(column)
        else:
            holders = [t for t in tables if schema.tables[t].column(column) is not None]
            for t in holders:
                out[t].append(column)
            hit = bool(holders)
        if not hit:
            unknown.append(entry)
    if unknown:
        raise Unprocessable(
            f"exclude_columns names {', '.join(map(repr, unknown))}, no column of the tables mirrored: write "
            "table.column (the table as GET /v1/sources/{name}/tables names it) or a bare column name for that "
            "column of every table"
        )
    return {table: columns for table, columns in out.items() if columns}


def table_views(catalog: Catalog) -> dict[str, ViewDef]:
    """Every view's definition, by name."""
    return {v.name: ViewDef.of_view(v.name, v.definition) for v in catalog.views()}


def mirror(
    source: str, tables: Iterable[str], views: Mapping[str, ViewDef], catalog: Catalog, define: Define
) -> Mirror:
    """Create the view of each of `tables` at `source` that `views` (the catalog's, by
    `table_views`) lacks, bound by `define`; the others are existing or skipped."""
    done = Mirror()
    known = dict(views)  # with the views this request creates: a later table of the same name is skipped
    for table in tables:
        written, name = f"{source}.{table}", mirror_view_name(source, table)
        holder = known.get(name)
        if holder is None:
            try:
                definition, options = define(written)
                catalog.add_view(name, definition.sql, definition.to_json(), options)
            except Unprocessable as exc:
                done.skipped.append(Skipped(table, str(exc.detail)))
                continue
            except Conflict:  # a request running at once (another mirror) took the name since `views` was read
                holder = ViewDef.of_view(name, catalog.view(name).definition)
            else:
                known[name] = definition
                done.created.append(Mirrored(table, name, list(definition.key)))
                continue
        if holder.table == written:
            done.existing.append(Mirrored(table, name, list(holder.key)))
        else:
            done.skipped.append(Skipped(table, _taken(name, holder.table)))
    return done


def _taken(name: str, holder: str | None) -> str:
    """Why a table is skipped whose view name `name` is held by a view of `holder` (None: SQL)."""
    what = f"the view of {holder}" if holder is not None else "a view given as SQL"
    return f"{NAME_TAKEN}: view {name!r} is {what}; rename or delete it to mirror this table"
