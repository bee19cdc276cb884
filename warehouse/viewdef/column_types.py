"""A view's `column_types`: columns read as a stronger type than their source declares.

`{"orders.updated_at": "timestamp"}` reads ISO text of a SQLite TEXT column as a
timestamp. A key is `table.column`, or `source.table.column` where a table of that name
comes from several of the view's sources; deltasieve_protocol/column_types.py says which (declared,
asked) pairs are allowed. The view is analyzed against schemas in which such a column has
the asked type (`asked_schemas`), so the view's column, its predicates' kinds and the
timestamp strategy see the asked type; each site query then names the columns its agent
reads so (`SiteQuery.read_from`), and the agent reads their values strictly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import sqlglot
from sqlglot import exp

from deltasieve_protocol import column_types, sitenames
from deltasieve_protocol.schema import SourceSchema
from deltasieve_protocol.types import LogicalType
from warehouse.viewdef.binding import referenced_tables
from warehouse.viewdef.model import ViewDef, ViewDefinitionError

#: Columns a view may name in column_types (a bound on the agents' sample reads).
MAX_COLUMN_TYPES = 64
HELP = (
    "column_types maps `table.column` (or `source.table.column`) of a table the view reads to the logical type to "
    f"read it as; allowed (declared -> asked): {column_types.allowed_pairs()}"
)


@dataclass(frozen=True)
class AskedType:
    """One entry of column_types, resolved: the column, its declared type and the one asked."""

    given: str
    source: str
    table: str
    column: str
    declared: LogicalType
    asked: LogicalType


def _split(given: str) -> tuple[str | None, str, str]:
    """(source or None, table, column) of a key written `table.column` or `source.table.column`."""
    parts = given.split(".")
    if len(parts) == 2 and all(parts):
        return None, parts[0], parts[1]
    if len(parts) == 3 and all(parts):
        return parts[0], parts[1], parts[2]
    raise ViewDefinitionError(f"column_types: {given!r} is not written table.column or source.table.column; {HELP}")


def resolve(given: Mapping[str, str], sql: str, schemas: Mapping[str, SourceSchema]) -> list[AskedType]:
    """The entries of column_types resolved against the tables the view reads, each pair checked.

    Raises:
        ViewDefinitionError: an unknown or ambiguous table or column, an unknown type, or a
            pair deltasieve_protocol/column_types.py does not allow.
    """
    if len(given) > MAX_COLUMN_TYPES:
        raise ViewDefinitionError(f"column_types names {len(given)} columns; at most {MAX_COLUMN_TYPES}")
    read = dict.fromkeys(referenced_tables(sql, schemas))
    listed = ", ".join(f"{s}.{t}" for s, t in read)
    out = []
    for key, type_text in given.items():
        source, table, column = _split(key)
        found = [(s, t) for s, t in read if t.casefold() == table.casefold() and source in (None, s)]
        if not found:
            raise ViewDefinitionError(f"column_types: {key!r} names no table the view reads (it reads {listed})")
        if len(found) > 1:
            options = " or ".join(f"{s}.{t}.{column}" for s, t in found)
            raise ViewDefinitionError(
                f"column_types: {key!r} is ambiguous, table {table!r} comes from several sources: write {options}"
            )
        (source, table), info = found[0], schemas[found[0][0]].tables[found[0][1]]
        name = sitenames.pick_name(column, (c.name for c in info.columns), ViewDefinitionError, "column")
        if name is None:
            columns = ", ".join(c.name for c in info.columns)
            raise ViewDefinitionError(
                f"column_types: table {source}.{table} has no column {column!r}; it has {columns}"
            )
        try:
            asked = LogicalType.parse(type_text)
        except ValueError as exc:
            raise ViewDefinitionError(f"column_types: {key!r}: {exc}") from None
        declared = info.known_column(name).type
        try:
            column_types.check_pair(declared, asked)
        except ValueError as exc:
            raise ViewDefinitionError(f"column_types: {key!r} ({source}.{table}.{name}): {exc}") from None
        out.append(AskedType(key, source, table, name, declared, asked))
    return out


def asked_schemas(schemas: Mapping[str, SourceSchema], asked: list[AskedType]) -> dict[str, SourceSchema]:
    """The schemas with each asked column typed as asked (its declared type kept in `read_from`)."""
    out = dict(schemas)
    for a in asked:
        schema = out[a.source]
        table = schema.tables[a.table]
        columns = tuple(
            replace(c, type=a.asked, read_from=a.declared) if c.name == a.column else c for c in table.columns
        )
        out[a.source] = replace(schema, tables={**schema.tables, a.table: replace(table, columns=columns)})
    return out


def _reads(site_sql: str, dialect: str | None) -> dict[str, tuple[str, str]]:
    """Output name -> (table, column) of each plain column the site query selects."""
    tree = sqlglot.parse_one(site_sql, read=dialect)
    tables = {t.alias_or_name: t.name for t in tree.find_all(exp.Table)}
    out = {}
    for item in tree.expressions:
        inner = item.this if isinstance(item, exp.Alias) else item
        if isinstance(inner, exp.Column) and inner.table in tables:
            out[item.alias_or_name] = (tables[inner.table], inner.name)
    return out


def stamp_column(a: AskedType, timestamps: Mapping[str, str]) -> bool:
    """Whether an asked column is the timestamp column (`timestamps`: {TABLE: COLUMN}, TABLE
    written `table` or `source.table`) of its table.

    >>> a = AskedType("people.at", "s", "people", "at", LogicalType("text"), LogicalType("timestamp"))
    >>> stamp_column(a, {"s.people": "at"}), stamp_column(a, {"people": "AT"}), stamp_column(a, {"other": "at"})
    (True, True, False)
    """
    return any(
        column.casefold() == a.column.casefold()
        and table.casefold() in (a.table.casefold(), f"{a.source}.{a.table}".casefold())
        for table, column in timestamps.items()
    )


def with_read_from(definition: ViewDef, asked: list[AskedType], timestamps: Mapping[str, str] | None = None) -> ViewDef:
    """The definition whose site queries name the columns their agents read as asked.

    A column the view does not select may be asked a type only as its table's timestamp
    (`timestamps`, the view's setting): the timestamp strategy compares it in its reads.

    Raises:
        ViewDefinitionError: an asked column the view neither selects (its values would be
            compared unread) nor uses as a timestamp, one of a key, or a view over tables without a key.
    """
    if not asked:
        return definition
    if definition.multiset:
        raise ViewDefinitionError(
            "column_types: a view over tables without a key is read grouped by its values, as the sources declare them; "
            "column_types are for keyed views"
        )
    wanted = {(a.source, a.table, a.column): a for a in asked}
    used: set[str] = set()
    sites = []
    for site in definition.sites:
        read_from = {}
        for out, (table, column) in _reads(site.sql, site.dialect).items():
            a = wanted.get((site.source, table, column))
            if a is None:
                continue
            if out in site.key:
                raise ViewDefinitionError(
                    f"column_types: {a.given!r} is a key column of the view; a key is read as its source declares it "
                    "(the source orders and looks it up so)"
                )
            read_from[out] = str(a.declared)
            used.add(a.given)
        sites.append(replace(site, read_from=read_from))
    unread = [a.given for a in asked if a.given not in used and not stamp_column(a, timestamps or {})]
    if unread:
        raise ViewDefinitionError(
            f"column_types: the view does not select {', '.join(map(repr, unread))}; select the column, so that every "
            "read of the source parses its values (a value that does not parse then fails the sync), or name it "
            "as its table's timestamp (timestamps)"
        )
    return replace(definition, sites=sites)
