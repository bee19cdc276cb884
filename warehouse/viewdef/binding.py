"""Binding: resolve the tables and columns of a view's SQL against its sources' schemas, and derive its key.

A view is a select-project-join block over tables written `source.table` (or
`source.schema.table` for a table outside the connection's default schema)::

    SELECT c.id, c.name, o.id AS order_id, o.amount
    FROM crm.customers AS c JOIN crm.orders AS o ON o.customer_id = c.id
    WHERE o.amount > 10

Its SQL is read in sqlglot's standard dialect (identifiers in double quotes, strings in
single quotes). Binding runs as ordered steps: parse -> bind tables -> bind columns ->
choose keys -> drop the keys the joins imply (keys.py); the result, a `BoundView`, is what
decomposition cuts into site queries.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from functools import partial

from sqlglot import exp

from deltasieve_protocol import sitenames, sitesql
from deltasieve_protocol.schema import ColumnInfo, SourceSchema
from warehouse.viewdef.bound import BoundRelation, BoundView, Output
from warehouse.viewdef.keys import derive
from warehouse.viewdef.model import UnknownSourceError, ViewDefinitionError

#: sqlglot dialect the view's own SQL is read in (None is sqlglot's standard dialect).
VIEW_DIALECT: str | None = None
#: What a view may look like, appended to every rejection.
VIEW_FORM = (
    "a view is SELECT t.column [AS name], ... FROM source.table [AS t] "
    "[[INNER | LEFT [OUTER]] JOIN source.table [AS u] ON condition]... [WHERE condition] "
    "(source.schema.table names a table outside the default schema)"
)


def _parse(sql: str) -> sitesql.SelectParts:
    parts = sitesql.parse_select(sql, VIEW_DIALECT, ViewDefinitionError, VIEW_FORM, left_joins=True)
    for ref in parts.tables:
        _source(ref)
    return parts


def _source(ref: sitesql.TableRef) -> str:
    """The source a table of the view is written with; a table not written source.table is refused."""
    if ref.catalog is not None:
        return ref.catalog
    if ref.db is None:
        raise ViewDefinitionError(
            f"table {ref.name!r} must be written source.table, naming the registered source it comes from: {VIEW_FORM}"
        )
    return ref.db


def _table_name(ref: sitesql.TableRef) -> str:
    """The name the agent exposes the table under: `schema.table` when written source.schema.table.

    >>> _table_name(sitesql.TableRef("orders", "erp", "crm", None)), _table_name(sitesql.TableRef("orders", "crm", None, None))
    ('erp.orders', 'orders')
    """
    return f"{ref.db}.{ref.name}" if ref.catalog is not None else ref.name


def missing_table_message(source: str, schema: SourceSchema, table: str) -> str:
    """Why `source.table` cannot be read: the agent does not expose it; what exposes it.

    >>> s = SourceSchema("postgres", {})
    >>> print(missing_table_message("crm", s, "erp.orders"))  # doctest: +ELLIPSIS
    source 'crm' has no table 'erp.orders' (its tables: none); the agent may not expose it: ... --allow erp.orders ...
    """
    tables = sitenames.name_list(sorted(schema.tables))
    hint = (
        f"the agent may not expose it: an agent started with --allow exposes only the tables it names, and a table "
        f"outside the connection's default schema (PostgreSQL schema, MySQL database) only when --allow names it as "
        f"schema.table; restart the agent with --allow {table} (the source's list of tables shows what it exposes)"
    )
    if schema.dialect == "sqlite":
        hint += "; a SQLite agent reads the tables of its one database file (attached databases are not read)"
    return f"source {source!r} has no table {table!r} (its tables: {tables}); {hint}"


def referenced_sources(sql: str) -> list[str]:
    """The sources the view's tables come from, in order of first use, as written.

    Raises ViewDefinitionError when the SQL is not a view at all, before any agent is asked.

    >>> referenced_sources("SELECT c.id FROM crm.customers c JOIN erp.orders o ON o.cid = c.id")
    ['crm', 'erp']
    """
    sources: list[str] = []
    for ref in _parse(sql).tables:
        if _source(ref) not in sources:
            sources.append(_source(ref))
    return sources


def referenced_tables(sql: str, schemas: Mapping[str, SourceSchema]) -> list[tuple[str, str]]:
    """(source, table) of each table the view reads, named as the schemas name them, in order.

    Raises:
        UnknownSourceError: a table's source is not in `schemas`.
        ViewDefinitionError: a table its source does not have.
    """
    return [(r.source, r.table.name) for r in _bind_tables(_parse(sql), schemas)]


def bind_view(sql: str, schemas: Mapping[str, SourceSchema]) -> BoundView:
    """Resolve every table and column of the view and choose its key.

    Args:
        sql: the view's SQL, tables written `source.table`.
        schemas: registered source name -> what its agent exposes.

    Raises:
        UnknownSourceError: a table's source is not in `schemas`.
        ViewDefinitionError: a name that does not resolve, or a table whose key is not selected.
    """
    parts = _parse(sql)
    return _bind_columns(parts, _bind_tables(parts, schemas))


def _bind_tables(parts: sitesql.SelectParts, schemas: Mapping[str, SourceSchema]) -> list[BoundRelation]:
    relations = []
    for ref in parts.tables:
        written = _source(ref)
        source = sitenames.pick_name(written, schemas, ViewDefinitionError, "source")
        if source is None:
            raise UnknownSourceError(written)
        tables = schemas[source].tables
        written_table = _table_name(ref)
        name = sitenames.pick_name(written_table, tables, ViewDefinitionError, f"table of source {source!r}")
        if name is None:
            raise ViewDefinitionError(missing_table_message(source, schemas[source], written_table))
        table = tables[name]
        # unaliased, a table is visible under its own name without the schema, as in SQL
        relations.append(BoundRelation(source, table, ref.alias or table.path[-1], ref.alias is not None))
    sitenames.check_unique_visible([_scope_entry(r) for r in relations], ViewDefinitionError)
    return relations


def _scope_entry(r: BoundRelation) -> sitenames.Relation:
    return sitenames.Relation(
        r.alias, r.table.name, tuple(c.name for c in r.table.columns), r.aliased, r.label, prefix=r.source
    )


def _bind_columns(parts: sitesql.SelectParts, relations: list[BoundRelation]) -> BoundView:
    scope = sitenames.Scope([_scope_entry(r) for r in relations], ViewDefinitionError, ViewDefinitionError)
    outputs = []
    for item in parts.items:
        if item.column is None:  # only a grouped site query has such an item (COUNT(*)), never a view
            raise ViewDefinitionError(f"the select list names columns only: {VIEW_FORM}")
        index, name = scope.resolve(item.column)
        outputs.append(Output(index, relations[index].table.known_column(name), item.alias or name))
    sitenames.check_output_names([o.name for o in outputs], ViewDefinitionError)

    def bind(col: exp.Column, joined: int | None = None) -> exp.Column:
        index, name = scope.resolve(col)
        if joined is not None and index > joined:
            raise ViewDefinitionError(
                f"the ON condition of the join with {relations[joined].label} refers to {relations[index].alias}.{name}, "
                f"which is joined later: an ON condition may only use the tables joined so far ({VIEW_FORM})"
            )
        return sitesql.column_ref(relations[index].alias, name)

    conditions: list[exp.Expression | None] = [None]
    for position, on in enumerate(parts.conditions[1:], start=1):
        conditions.append(None if on is None else sitesql.requalify(on, partial(bind, joined=position)))
    where = sitesql.requalify(parts.where, bind) if parts.where is not None else None
    keyless = tuple(not r.table.primary_key and not r.table.unique_keys for r in relations)
    keys = _choose_key(relations, outputs, multiset=any(keyless))
    view = BoundView(relations, outputs, conditions, where, keys, left=tuple(parts.left), keyless=keyless)
    _check_left_joins(view)
    if not view.multiset:  # a multiset has no key to derive: its rows are told apart by content
        view = replace(view, key_parts=tuple(derive(view)))
    return view


def _check_left_joins(view: BoundView) -> None:
    """A table joined by LEFT JOIN is read only in its own ON condition and the select list.

    Then the left joins commute with the rest: the view is the inner part, filtered by
    WHERE, with each left-joined table attached by its ON condition (NULLs where none matches).
    """
    for i, relation in enumerate(view.relations):
        if not view.is_left(i):
            continue
        places = [
            (f"the ON condition of the join with {view.relations[j].label}", on)
            for j, on in enumerate(view.conditions)
            if j != i and on is not None
        ]
        if view.where is not None:
            places.append(("WHERE", view.where))
        for place, predicate in places:
            for col in predicate.find_all(exp.Column):
                if col.table == relation.alias:
                    raise ViewDefinitionError(
                        f"{relation.label} is joined by LEFT JOIN, so its columns may be read only in its own ON condition "
                        f"and in the select list; {place} reads {relation.alias}.{col.name} (move the condition into "
                        f"the ON of the LEFT JOIN, or join the table with an inner JOIN)"
                    )


def _may_be_null(column: ColumnInfo | None) -> bool:
    """Whether a key column may hold NULL (a column the schema does not list may)."""
    return column is None or column.nullable


def _choose_key(relations: list[BoundRelation], outputs: list[Output], *, multiset: bool) -> list[list[str]]:
    """Each relation's primary key (else a unique key) as output names, relation by relation;
    none for a table without either (the view is then a multiset). In a multiset, whose
    rows are told apart by content, a table whose key is not selected has none either."""
    keys: list[list[str]] = []
    for index, relation in enumerate(relations):
        selected: dict[str, str] = {}
        for o in outputs:
            if o.relation == index:
                selected.setdefault(o.column.name, o.name)
        table = relation.table
        if table.primary_key:
            candidates = [table.primary_key]
        else:
            # NOT NULL unique keys first: a NULL in a key column breaks the sync at run time.
            candidates = sorted(table.unique_keys, key=lambda u: any(_may_be_null(table.column(c)) for c in u))
        if not candidates:
            keys.append([])
            continue
        chosen = next((k for k in candidates if all(c in selected for c in k)), None)
        if chosen is None and multiset:
            keys.append([])
            continue
        if chosen is None:
            raise ViewDefinitionError(_missing_key_message(relation, candidates))
        keys.append([selected[c] for c in chosen])
    return keys


def _missing_key_message(relation: BoundRelation, candidates: list[tuple[str, ...]]) -> str:
    rule = "every table of a view must contribute its primary key (or, without one, a unique key) to the select list; aliases are allowed"
    refs = lambda k: ", ".join(f"{relation.alias}.{c}" for c in k)  # noqa: E731
    if relation.table.primary_key:
        return f"{relation.label} has the primary key ({', '.join(relation.table.primary_key)}), which must be selected: add {refs(relation.table.primary_key)}; {rule}"
    options = " or ".join(f"({', '.join(k)})" for k in candidates)
    return f"{relation.label} has no primary key; the columns of one of its unique keys {options} must be selected: add for example {refs(candidates[0])}; {rule}"
