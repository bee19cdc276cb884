"""Columns a view reads as a stronger type than the source declares (its `column_types`).

A request's site query names such columns in `read_from` (output column -> declared type);
`read_as_asked` gives them the asked type and the declared one (`ColumnInfo.read_from`),
so that RowConverter reads their raw values with the strict converter of
deltasieve_protocol/column_types.py. `sample_column` reads a bounded sample of one column the same
way, for the warehouse to check a view's column_types when it is defined.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import sqlglot
from sqlglot import exp

from deltasieve_protocol import column_types
from deltasieve_protocol.models import BadValue, ColumnSampleOut, ColumnSampleRequest, SiteSpec
from deltasieve_protocol.types import LogicalType
from remote_agent.adapters.base import Adapter, TableInfo
from remote_agent.errors import BadRequest, Forbidden, SchemaChanged, SourceDataError, UnsupportedQuery, changed_column
from remote_agent.sitequery import ValidatedQuery, validate_site_query


def _logical(text: str, what: str) -> LogicalType:
    try:
        return LogicalType.parse(text)
    except ValueError as exc:
        raise BadRequest(f"{what}: {exc}") from None


def _pair(declared: LogicalType, asked: LogicalType) -> None:
    try:
        column_types.check_pair(declared, asked)
    except ValueError as exc:
        raise UnsupportedQuery(str(exc)) from None


def _strict(adapter: Adapter) -> None:
    """Refuse (422) column_types on an adapter whose reads are not strict (`Adapter.strict_reads`)."""
    if not adapter.strict_reads:
        raise UnsupportedQuery(
            f"this agent reads {adapter.dialect} dump files, whose values Arrow casts: a column cannot be read as a "
            "stronger type than its dump declares (column_types); declare it in the dump"
        )


def read_as_asked(adapter: Adapter, query: ValidatedQuery, site: SiteSpec) -> ValidatedQuery:
    """The query with each column of `site.read_from` read as the type `site.columns` gives it.

    Then `check_columns` compares the asked types. A key column cannot be read so (the
    source orders it by its declared type).

    Raises:
        BadRequest: `read_from` names no output column, or a key column (400).
        UnsupportedQuery: a pair deltasieve_protocol/column_types.py does not allow, or an agent on dump files (422).
        SchemaChanged: the source no longer declares the column as the request says (409, code schema_changed).
    """
    if not site.read_from:
        return query
    _strict(adapter)
    asked = {c.name: c.type for c in site.columns}
    columns = list(query.columns)
    names = [c.name for c in columns]
    for name, declared_text in site.read_from.items():
        if name not in names or name not in asked:
            raise BadRequest(f"read_from names {name!r}, which is not an output column ({', '.join(names)})")
        if name in query.key:
            raise BadRequest(f"read_from names the key column {name!r}: a key column is read as its source declares it")
        i = names.index(name)
        declared = _logical(declared_text, f"read_from of {name!r}")
        wanted = _logical(asked[name], f"the type of {name!r}")
        _pair(declared, wanted)
        if columns[i].type != declared:
            raise SchemaChanged(
                f"the source schema of {query.where()} changed since the view was registered: column {name!r} "
                f"({query.origins[i]}) is {columns[i].type} at the source, but the view reads it from {declared}. "
                "Redefine the view to match the new schema",
                [changed_column(query.origins[i], name, str(declared), str(columns[i].type))],
            )
        columns[i] = replace(columns[i], type=wanted, read_from=declared)
    return replace(query, columns=columns)


def _sample_key(table: TableInfo, column: str) -> list[str]:
    """The columns naming a row of the sample: the primary key, else a unique key, else the column itself."""
    for key in (table.primary_key, *table.unique_keys):
        if key:
            if column in key:
                raise BadRequest(f"column {column!r} is in a key of table {table.name!r}: a key is read as declared")
            return list(key)
    return [column]


def _descending(sql: str, dialect: str) -> str:
    """A query this agent built, its ORDER BY reversed (the last rows in key order first).

    >>> _descending('SELECT "t"."k" AS "c0" FROM "t" AS "t" ORDER BY "t"."k" LIMIT 3', "sqlite")
    'SELECT "t"."k" AS "c0" FROM "t" AS "t" ORDER BY "t"."k" DESC LIMIT 3'
    """
    tree = sqlglot.parse_one(sql, read=dialect)
    for ordered in tree.find_all(exp.Ordered):
        ordered.set("desc", not ordered.args.get("desc"))
        ordered.set("nulls_first", not ordered.args.get("nulls_first"))
    return tree.sql(dialect=dialect)


def sample_column(adapter: Adapter, tables: Mapping[str, TableInfo], request: ColumnSampleRequest) -> ColumnSampleOut:
    """Read at most `request.rows` values of one column as the asked type: half the first rows in key order,
    half the last (with a growing key, the oldest and the newest rows).

    The query is built here from exposed names and validated as a site query (403 for a
    table or column not exposed); the answer quotes the first value that does not read.
    """
    _strict(adapter)
    table = tables.get(request.table)
    if table is None:
        raise Forbidden(
            f"table {request.table!r} is not exposed by this agent (GET /v1/schema lists the tables it exposes)"
        )
    info = table.column(request.column)
    if info is None:
        raise Forbidden(f"column {request.column!r} of table {request.table!r} is not exposed by this agent")
    if info.policy is not None:
        raise UnsupportedQuery(
            f"column {request.table}.{request.column} is {info.policy}ed by this agent (--hash): it is read as text"
        )
    declared = _logical(request.read_from, "read_from")
    asked = _logical(request.type, "type")
    _pair(declared, asked)
    if info.type != declared:
        raise SourceDataError(
            f"column {request.table}.{request.column} is {info.type} at the source, not {declared}: ask again"
        )
    key = _sample_key(table, request.column)
    names = dict.fromkeys([*key, request.column])
    select = exp.select(
        *(exp.alias_(exp.column(n, "t", quoted=True), f"c{i}", quoted=True) for i, n in enumerate(names))
    ).from_(exp.table_(request.table, alias="t", quoted=True))
    outputs = [f"c{i}" for i in range(len(names))]
    query = validate_site_query(
        select.sql(dialect=adapter.dialect), outputs[: len(key)], tables, adapter.dialect, adapter.key_order
    )
    first = (request.rows + 1) // 2
    last = request.rows - first
    read = column_types.converter(declared, asked)
    with adapter.read() as reader:
        rows = reader.rows(query.chunk_sql(first, from_cursor=False), limit=first)
        if last:
            seen = {row[: len(key)] for row in rows}
            newest = _descending(query.chunk_sql(last, from_cursor=False), adapter.dialect)
            rows += [row for row in reader.rows(newest, limit=last) if row[: len(key)] not in seen]
    nulls = 0
    for row in rows:
        value = row[-1]
        if value is None:
            nulls += 1
            continue
        try:
            read(value)
        except (ValueError, TypeError, ArithmeticError) as exc:
            shown = {k: column_types.quoted(v) for k, v in zip(key, row)}
            bad = BadValue(value=column_types.quoted(value), key=shown, reason=str(exc))
            return ColumnSampleOut(rows_read=len(rows), nulls=nulls, bad=bad)
    return ColumnSampleOut(rows_read=len(rows), nulls=nulls)
