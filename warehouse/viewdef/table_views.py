"""Table views: a view given as `source.table` (or `source.schema.table`) instead of SQL.

A table view is every column of its table, keyed by the table's primary key, else by its
first unique key over NOT NULL columns, else by none (a multiset view). What it stands for
is a SELECT the view is analyzed as, like any other view: the functions here give that
SELECT and key from the table's description alone, so that a sync that sees the table's
columns change can compute the view's new definition the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from sqlglot import exp

from deltasieve_protocol import sitenames
from deltasieve_protocol.schema import SourceSchema, TableInfo
from warehouse.viewdef.binding import VIEW_DIALECT, missing_table_message
from warehouse.viewdef.decomposition import analyze_view
from warehouse.viewdef.model import UnknownSourceError, ViewDef, ViewDefinitionError

#: How a table view's `table` is written, for messages.
TABLE_FORM = "a table view names its table as source.table, or source.schema.table outside the default schema"


def table_source(written: str) -> str:
    """The source a table view's `table` names (ViewDefinitionError when it names none).

    >>> table_source("crm.erp.orders")
    'crm'
    """
    source, dot, table = written.partition(".")
    if not (source and dot and table):
        raise ViewDefinitionError(f"table {written!r} names no source: {TABLE_FORM}")
    return source


def table_view_key(table: TableInfo) -> tuple[str, ...]:
    """The key of the view of `table`: its primary key, else its first unique key over NOT NULL
    columns, else none (the view is then a multiset). A unique key over a nullable column
    does not key a row that holds NULL in it.

    >>> from deltasieve_protocol.schema import ColumnInfo
    >>> from deltasieve_protocol.types import LogicalType
    >>> col = lambda name, nullable: ColumnInfo(name, LogicalType("int"), nullable, "integer")
    >>> t = TableInfo("t", (col("a", True), col("b", False), col("c", False)), (), (("a",), ("b", "c")))
    >>> table_view_key(t), table_view_key(replace(t, primary_key=("c",))), table_view_key(replace(t, unique_keys=(("a",),)))
    (('b', 'c'), ('c',), ())
    """
    if table.primary_key:
        return table.primary_key
    for unique in table.unique_keys:
        if all((c := table.column(name)) is not None and not c.nullable for name in unique):
            return unique
    return ()


def table_view_sql(source: str, table: TableInfo) -> str:
    """The SELECT a view of every column of `table` at `source` stands for.

    >>> from deltasieve_protocol.schema import ColumnInfo
    >>> from deltasieve_protocol.types import LogicalType
    >>> cols = tuple(ColumnInfo(n, LogicalType("int"), False, "integer") for n in ("id", "Total", "order"))
    >>> print(table_view_sql("crm", TableInfo("orders", cols, ("id",))))
    SELECT "id", "Total", "order" FROM "crm"."orders"
    >>> print(table_view_sql("crm", TableInfo("erp.orders", cols[:1], ("id",), schema="erp")))
    SELECT "id" FROM "crm"."erp"."orders"
    """
    if not table.columns:
        raise ViewDefinitionError(f"table {source}.{table.name} exposes no column: a table view needs one")
    *schema, name = table.path
    node = exp.Table(
        this=exp.to_identifier(name, quoted=True),
        db=exp.to_identifier(schema[0] if schema else source, quoted=True),
        catalog=exp.to_identifier(source, quoted=True) if schema else None,
    )
    select = exp.select(*(exp.column(c.name, quoted=True) for c in table.columns)).from_(node)
    return select.sql(dialect=VIEW_DIALECT)


def keyed_as_view(table: TableInfo) -> TableInfo:
    """`table` with no key but the one its view is keyed by (`table_view_key`), so that
    binding keys the view by it, or makes it a multiset when there is none.

    >>> from deltasieve_protocol.schema import ColumnInfo
    >>> from deltasieve_protocol.types import LogicalType
    >>> t = TableInfo("t", (ColumnInfo("a", LogicalType("int"), True, "integer"),), (), (("a",),))
    >>> keyed_as_view(t).unique_keys
    ()
    """
    key = table_view_key(table)
    if key == table.primary_key:
        return replace(table, unique_keys=())
    return replace(table, unique_keys=(key,) if key else ())


def without_columns(table: TableInfo, exclude: Sequence[str], *, strict: bool) -> TableInfo:
    """`table` without the columns `exclude` names (`exclude_columns`: a column the tool cannot
    read, or one the warehouse should not hold). `strict`: a name the table lacks is refused
    (a view being defined); otherwise it is passed over (a column since dropped at the source).

    >>> from deltasieve_protocol.schema import ColumnInfo
    >>> from deltasieve_protocol.types import LogicalType
    >>> t = TableInfo("t", tuple(ColumnInfo(n, LogicalType("int"), False, "integer") for n in ("id", "a", "b")), ("id",))
    >>> [c.name for c in without_columns(t, ["b", "gone"], strict=False).columns]
    ['id', 'a']
    >>> without_columns(t, ["id"], strict=False)
    Traceback (most recent call last):
    ...
    warehouse.viewdef.model.ViewDefinitionError: exclude_columns names 'id', a column of the key ['id'] of table 't': a view keeps its key's columns; leave it out of exclude_columns
    """
    if not exclude:
        return table
    names = {c.name for c in table.columns}
    unknown = [name for name in exclude if name not in names]
    if strict and unknown:
        raise ViewDefinitionError(
            f"exclude_columns names {', '.join(map(repr, unknown))}, which table {table.name!r} does not have (its "
            f"columns: {', '.join(sorted(names))})"
        )
    key = table_view_key(table)
    held = [name for name in exclude if name in key]
    if held:
        raise ViewDefinitionError(
            f"exclude_columns names {', '.join(map(repr, held))}, a column of the key {list(key)} of table "
            f"{table.name!r}: a view keeps its key's columns; leave it out of exclude_columns"
        )
    left = tuple(c for c in table.columns if c.name not in exclude)
    if not left:
        raise ViewDefinitionError(f"exclude_columns leaves no column of table {table.name!r}: a view needs one")
    return replace(table, columns=left, unique_keys=tuple(u for u in table.unique_keys if not set(u) & set(exclude)))


def analyze_table_view(
    written: str, schemas: Mapping[str, SourceSchema], exclude: Sequence[str] = (), *, strict: bool = False
) -> ViewDef:
    """The definition of the view of every column of the table `written` (source.table or
    source.schema.table) but those `exclude` names, with its `table` as `source.table` exactly
    as the agent names it (`strict`: see `without_columns`).

    Raises:
        UnknownSourceError: the source is not in `schemas`.
        ViewDefinitionError: the source exposes no such table (the message names --allow), or
            `exclude` names a key column.
    """
    written_source = table_source(written)
    source = sitenames.pick_name(written_source, schemas, ViewDefinitionError, "source")
    if source is None:
        raise UnknownSourceError(written_source)
    schema = schemas[source]
    wanted = written.partition(".")[2]
    name = sitenames.pick_name(wanted, schema.tables, ViewDefinitionError, f"table of source {source!r}")
    if name is None:
        raise ViewDefinitionError(missing_table_message(source, schema, wanted))
    table = without_columns(schema.tables[name], exclude, strict=strict)
    keyed = {**schemas, source: replace(schema, tables={**schema.tables, name: keyed_as_view(table)})}
    definition = analyze_view(table_view_sql(source, table), keyed)
    return replace(definition, table=f"{source}.{name}", exclude_columns=tuple(exclude))
