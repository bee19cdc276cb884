"""View definitions: check a view's SQL against the sources' schemas and cut it into site queries.

A view is a select-project-join block over tables written `source.table`::

    SELECT c.id, c.name, o.id AS order_id, o.amount
    FROM crm.customers AS c JOIN crm.orders AS o ON o.customer_id = c.id
    WHERE o.amount > 10

The view's SQL is read in sqlglot's standard dialect (identifiers in double quotes,
strings in single quotes); each site query is generated in its source's dialect. The
analysis runs as ordered steps: parse -> bind tables -> bind columns -> choose keys ->
decompose into site queries. Only single-source views decompose today; the relations
carry their source so that splitting by source is the only step a multi-source view needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from sqlglot import exp
from sqlglot.errors import SqlglotError

from remote_agent.adapters.base import ColumnInfo, TableInfo
from remote_agent.protocol import sitesql
from remote_agent.protocol.types import Column, LogicalType

#: sqlglot dialect the view's own SQL is read in (None is sqlglot's standard dialect).
VIEW_DIALECT: str | None = None
#: What a view may look like, appended to every rejection.
VIEW_FORM = (
    "a view is SELECT t.column [AS name], ... FROM source.table [AS t] "
    "[[INNER] JOIN source.table [AS u] ON condition]... [WHERE condition]"
)


class ViewDefinitionError(ValueError):
    """The view cannot be maintained; `detail` says why and what is supported (HTTP 422)."""

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


class UnknownSourceError(ViewDefinitionError):
    """The view names a source that is not registered."""

    def __init__(self, source: str):
        super().__init__(f"source {source!r} is not registered: register it with POST /v1/sources, then write its tables as {source}.table")
        self.source = source


@dataclass(frozen=True)
class SourceSchema:
    """What a source's agent exposes (its GET /v1/schema answer)."""

    dialect: str
    tables: dict[str, TableInfo]

    @classmethod
    def from_json(cls, data: dict) -> "SourceSchema":
        tables = {}
        for t in data["tables"]:
            columns = tuple(
                ColumnInfo(c["name"], LogicalType.parse(c["type"]), bool(c.get("nullable", True)), c.get("declared", ""), c.get("read_as"))
                for c in t["columns"]
            )
            tables[t["name"]] = TableInfo(t["name"], columns, tuple(t.get("primary_key") or ()), tuple(tuple(u) for u in t.get("unique_keys") or ()))
        return cls(data["dialect"], tables)

    def to_json(self) -> dict:
        return schema_to_json(self.dialect, list(self.tables.values()))


def schema_to_json(dialect: str, tables: list[TableInfo]) -> dict:
    """The body of the agent's GET /v1/schema for `tables`."""
    return {
        "dialect": dialect,
        "tables": [
            {
                "name": t.name,
                "columns": [{"name": c.name, "type": str(c.type), "nullable": c.nullable, "declared": c.declared, "read_as": c.read_as} for c in t.columns],
                "primary_key": list(t.primary_key),
                "unique_keys": [list(u) for u in t.unique_keys],
            }
            for t in tables
        ],
    }


@dataclass(frozen=True)
class SiteQuery:
    """The part of a view evaluated at one source, as SQL in the source's dialect."""

    source: str
    sql: str
    columns: list[Column]
    key: list[str]

    def to_json(self) -> dict:
        return {"source": self.source, "sql": self.sql, "columns": [c.to_json() for c in self.columns], "key": list(self.key)}

    @classmethod
    def from_json(cls, data: dict) -> "SiteQuery":
        return cls(data["source"], data["sql"], [Column.from_json(c) for c in data["columns"]], list(data["key"]))


@dataclass(frozen=True)
class ViewDef:
    """A checked view: its SQL, typed output columns, key, and one site query per source."""

    sql: str
    columns: list[Column]
    key: list[str]
    sites: list[SiteQuery]

    def to_json(self) -> dict:
        return {"sql": self.sql, "columns": [c.to_json() for c in self.columns], "key": list(self.key), "sites": [s.to_json() for s in self.sites]}

    @classmethod
    def from_json(cls, data: dict) -> "ViewDef":
        return cls(data["sql"], [Column.from_json(c) for c in data["columns"]], list(data["key"]), [SiteQuery.from_json(s) for s in data["sites"]])


@dataclass(frozen=True)
class _Relation:
    """A table occurrence of the view, bound to its source and schema."""

    source: str
    table: TableInfo
    alias: str  # the name it is visible under: its alias, else its table name
    aliased: bool

    @property
    def label(self) -> str:
        name = f"{self.source}.{self.table.name}"
        return f"table {name!r} (alias {self.alias!r})" if self.aliased else f"table {name!r}"


@dataclass(frozen=True)
class _Output:
    """One output column of the view: which relation and column it reads, and its name."""

    relation: int
    column: ColumnInfo
    name: str


@dataclass(frozen=True)
class _Bound:
    """The view with every name resolved."""

    relations: list[_Relation]
    outputs: list[_Output]
    conditions: list[exp.Expression | None]  # ON per relation, columns as "alias"."column"
    where: exp.Expression | None
    key: list[str]


def _parse(sql: str) -> sitesql.SelectParts:
    parts = sitesql.parse_select(sql, VIEW_DIALECT, ViewDefinitionError, VIEW_FORM)
    for ref in parts.tables:
        if ref.catalog is not None:
            raise ViewDefinitionError(f"table {ref.written()!r} has too many qualifiers: write tables as source.table ({VIEW_FORM})")
        if ref.db is None:
            raise ViewDefinitionError(f"table {ref.name!r} must be written source.table, naming the registered source it comes from: {VIEW_FORM}")
    return parts


def referenced_sources(sql: str) -> list[str]:
    """The sources the view's tables come from, in order of first use, as written.

    Raises ViewDefinitionError when the SQL is not a view at all, before any agent is asked.

    >>> referenced_sources("SELECT c.id FROM crm.customers c JOIN erp.orders o ON o.cid = c.id")
    ['crm', 'erp']
    """
    sources: list[str] = []
    for ref in _parse(sql).tables:
        if ref.db not in sources:
            sources.append(ref.db)
    return sources


def analyze_view(sql: str, schemas: Mapping[str, SourceSchema]) -> ViewDef:
    """Check a view against its sources' schemas and decompose it into site queries.

    Args:
        sql: the view's SQL, tables written `source.table`.
        schemas: registered source name -> what its agent exposes (at least every source
            `referenced_sources(sql)` names).

    Raises:
        UnknownSourceError: a table's source is not in `schemas`.
        ViewDefinitionError: anything else the warehouse cannot maintain.
    """
    parts = _parse(sql)
    relations = _bind_tables(parts, schemas)
    bound = _bind_columns(parts, relations)
    sites = _decompose(bound, schemas)
    columns = [Column(o.name, o.column.type) for o in bound.outputs]
    return ViewDef(sql.strip(), columns, bound.key, sites)


def _bind_tables(parts: sitesql.SelectParts, schemas: Mapping[str, SourceSchema]) -> list[_Relation]:
    relations = []
    for ref in parts.tables:
        source = sitesql.pick_name(ref.db, schemas, ViewDefinitionError, "source")
        if source is None:
            raise UnknownSourceError(ref.db)
        tables = schemas[source].tables
        name = sitesql.pick_name(ref.name, tables, ViewDefinitionError, f"table of source {source!r}")
        if name is None:
            raise ViewDefinitionError(f"source {source!r} has no table {ref.name!r} (its tables: {sitesql.name_list(sorted(tables))})")
        relations.append(_Relation(source, tables[name], ref.alias or name, ref.alias is not None))
    sitesql.check_unique_visible([_scope_entry(r) for r in relations], ViewDefinitionError)
    return relations


def _scope_entry(r: _Relation) -> sitesql.Relation:
    return sitesql.Relation(r.alias, r.table.name, tuple(c.name for c in r.table.columns), r.aliased, r.label, prefix=r.source)


def _bind_columns(parts: sitesql.SelectParts, relations: list[_Relation]) -> _Bound:
    scope = sitesql.Scope([_scope_entry(r) for r in relations], ViewDefinitionError, ViewDefinitionError)
    outputs = []
    for item in parts.items:
        index, name = scope.resolve(item.column)
        column = relations[index].table.column(name)
        outputs.append(_Output(index, column, item.alias or name))
    sitesql.check_output_names([o.name for o in outputs], ViewDefinitionError)

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
        conditions.append(sitesql.requalify(on, lambda col, p=position: bind(col, p)))
    where = sitesql.requalify(parts.where, bind) if parts.where is not None else None
    return _Bound(relations, outputs, conditions, where, _choose_key(relations, outputs))


def _choose_key(relations: list[_Relation], outputs: list[_Output]) -> list[str]:
    """Each relation's primary key (else a unique key) as output names, relation by relation."""
    key: list[str] = []
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
            candidates = sorted(table.unique_keys, key=lambda u: any(table.column(c) is None or table.column(c).nullable for c in u))
        chosen = next((k for k in candidates if all(c in selected for c in k)), None)
        if chosen is None:
            raise ViewDefinitionError(_missing_key_message(relation, candidates))
        key.extend(selected[c] for c in chosen)
    return key


def _missing_key_message(relation: _Relation, candidates: list[tuple[str, ...]]) -> str:
    rule = "every table of a view must contribute its primary key (or, without one, a unique key) to the select list; aliases are allowed"
    if not candidates:
        return f"{relation.label} has no primary key and no unique key, so its rows cannot be told apart: {rule}"
    refs = lambda k: ", ".join(f"{relation.alias}.{c}" for c in k)  # noqa: E731
    if relation.table.primary_key:
        return f"{relation.label} has the primary key ({', '.join(relation.table.primary_key)}), which must be selected: add {refs(relation.table.primary_key)}; {rule}"
    options = " or ".join(f"({', '.join(k)})" for k in candidates)
    return f"{relation.label} has no primary key; the columns of one of its unique keys {options} must be selected: add for example {refs(candidates[0])}; {rule}"


def _decompose(bound: _Bound, schemas: Mapping[str, SourceSchema]) -> list[SiteQuery]:
    """One site query per source. Several sources would need global-join columns; not yet."""
    sources = list(dict.fromkeys(r.source for r in bound.relations))
    if len(sources) > 1:
        raise ViewDefinitionError(
            f"views over several sources are not supported yet (this one reads {', '.join(sources)}): "
            f"all tables of a view must come from one source"
        )
    source = sources[0]
    dialect = schemas[source].dialect
    tree = sitesql.build_select(
        [(sitesql.column_ref(bound.relations[o.relation].alias, o.column.name), o.name) for o in bound.outputs],
        [(r.table.name, r.alias) for r in bound.relations],
        bound.conditions,
        bound.where,
    )
    try:
        text = sitesql.render(tree, dialect)
    except (SqlglotError, ValueError) as exc:  # a construct the dialect lacks, or an unknown dialect
        raise ViewDefinitionError(f"the site query cannot be written in the {dialect!r} dialect of source {source!r}: {exc}") from None
    columns = [Column(o.name, o.column.type) for o in bound.outputs]
    return [SiteQuery(source, text, columns, list(bound.key))]
