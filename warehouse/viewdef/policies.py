"""A view's column policies: `columns` {"table.column": "block" | "hash" | "mask"} and `row_filter`
{"table": "predicate"}, bound into its site queries for the agents to apply inside the read.

The warehouse never sees a policed value raw, so everything here only shapes what it asks:

- a blocked column is taken out of the schemas the view is bound against (a table view
  leaves it out; an SQL view that reads it is refused), and each site names it in
  `SiteQuery.blocked`, which the agent reads as unexposed;
- a hashed column is bound as text (the agent sends HMAC-SHA-256 hex digests) and a masked one
  as the text it is; each site names them in `SiteQuery.policies`, by output column;
- a row filter is written into the site query of every site reading the table, qualified
  by the table's alias, so that the agent validates it with the rest of the query.

No policy may touch a key column (the source orders and looks up keys by their raw values),
and a hashed or masked column may not be compared in the view's WHERE (that would ask the
source about its raw values).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from deltasieve_protocol import sitesql
from deltasieve_protocol.schema import SourceSchema, TableInfo
from deltasieve_protocol.types import LogicalType
from warehouse.viewdef.model import SiteQuery, ViewDef, ViewDefinitionError

#: The policies a column may have.
POLICIES = ("block", "hash", "mask")
HELP = (
    'columns maps "table.column" (or "source.table.column") of a table the view reads to "block", "hash" or '
    '"mask"; row_filter maps "table" (or "source.table") to a predicate on that table\'s columns, in the '
    "grammar of a view's WHERE"
)
TEXT = LogicalType("text")


@dataclass(frozen=True)
class Policies:
    """A view's column policies as given (the names as the caller wrote them)."""

    columns: dict[str, str]
    row_filter: dict[str, str]

    def __bool__(self) -> bool:
        return bool(self.columns or self.row_filter)

    def to_json(self) -> dict:
        return {"columns": dict(self.columns), "row_filter": dict(self.row_filter)}

    @classmethod
    def given(
        cls, columns: Mapping[str, str] | None, row_filter: Mapping[str, str] | None, kept: Policies | None = None
    ) -> Policies:
        """The policies a request gives; those it leaves out (None) are `kept` (a redefinition keeps them).

        >>> Policies.given(None, {"t": "a > 1"}, Policies({"t.b": "hash"}, {})).to_json()
        {'columns': {'t.b': 'hash'}, 'row_filter': {'t': 'a > 1'}}
        """
        kept = kept or NONE
        return cls(
            dict(columns) if columns is not None else dict(kept.columns),
            dict(row_filter) if row_filter is not None else dict(kept.row_filter),
        )

    @classmethod
    def from_json(cls, data: Mapping | None) -> Policies:
        data = data or {}
        return cls(dict(data.get("columns") or {}), dict(data.get("row_filter") or {}))


NONE = Policies({}, {})


def table_policies(policies: Policies, source: str, tables: list[str]) -> dict[str, Policies]:
    """A mirror's policies cut per table of `tables` (entries written table.column or source.table.column).

    >>> p = Policies({"people.ssn": "hash", "s.people.name": "mask"}, {"orders": "total > 0"})
    >>> cut = table_policies(p, "s", ["people", "orders"])
    >>> cut["people"].columns, cut["orders"].row_filter
    ({'people.ssn': 'hash', 's.people.name': 'mask'}, {'orders': 'total > 0'})
    >>> table_policies(Policies({"nope.a": "block"}, {}), "s", ["people"])
    Traceback (most recent call last):
    ...
    warehouse.viewdef.model.ViewDefinitionError: columns names 'nope.a', no column of a table mirrored (people); write table.column
    """

    def table_of(written: str) -> str | None:
        for t in tables:
            if written in (t, f"{source}.{t}"):
                return t
        return None

    out: dict[str, Policies] = {}
    for given, policy in policies.columns.items():
        t = table_of(given.rpartition(".")[0])
        if t is None:
            raise ViewDefinitionError(
                f"columns names {given!r}, no column of a table mirrored ({', '.join(tables)}); write table.column"
            )
        out.setdefault(t, Policies({}, {})).columns[given] = policy
    for given, predicate in policies.row_filter.items():
        t = table_of(given)
        if t is None:
            raise ViewDefinitionError(f"row_filter names {given!r}, no table mirrored ({', '.join(tables)})")
        out.setdefault(t, Policies({}, {})).row_filter[given] = predicate
    return out


def _table_of(written: str, schemas: Mapping[str, SourceSchema], sources: list[str], what: str) -> tuple[str, str]:
    """(source, table) that `written` ("table" or "source.table") names among the view's sources.

    >>> from deltasieve_protocol.schema import TableInfo
    >>> s = {"s": SourceSchema("sqlite", {"people": TableInfo("people", (), ())})}
    >>> _table_of("people", s, ["s"], "row_filter"), _table_of("s.people", s, ["s"], "row_filter")
    (('s', 'people'), ('s', 'people'))
    """
    found = [(src, written) for src in sources if written in schemas[src].tables]
    for src in sources:
        rest = written[len(src) + 1 :] if written.startswith(f"{src}.") else None
        if rest and rest in schemas[src].tables:
            found.append((src, rest))
    if not found:
        raise ViewDefinitionError(f"{what} names table {written!r}, which the view does not read; {HELP}")
    if len(found) > 1:
        raise ViewDefinitionError(f"{what} names table {written!r}, which several sources have: write source.table")
    return found[0]


def resolve_columns(
    policies: Policies, schemas: Mapping[str, SourceSchema], sources: list[str]
) -> dict[tuple[str, str, str], str]:
    """(source, table, column) -> policy for each entry of `policies.columns`, each checked.

    Raises:
        ViewDefinitionError: an unknown policy, table or column; a key column; a mask on a column that is not text.
    """
    out = {}
    for given, policy in policies.columns.items():
        if policy not in POLICIES:
            raise ViewDefinitionError(f"columns: {given!r} has policy {policy!r}; {HELP}")
        written, _, column = given.rpartition(".")
        if not written or not column:
            raise ViewDefinitionError(f"columns: {given!r} is not written table.column; {HELP}")
        source, table = _table_of(written, schemas, sources, f"columns ({given!r})")
        info = schemas[source].tables[table]
        col = info.column(column)
        if col is None:
            raise ViewDefinitionError(
                f"columns: table {table!r} has no column {column!r} (its columns: {[c.name for c in info.columns]})"
            )
        keys = [info.primary_key, *info.unique_keys] if info.primary_key else list(info.unique_keys)
        if keys and column in keys[0]:
            raise ViewDefinitionError(
                f"columns: {given!r} is a column of the key {list(keys[0])} of table {table!r}, which cannot be "
                f"{policy}ed: the source orders and looks up rows by their raw key, which the warehouse never sees "
                "(keyset pagination); hash another column, or keep the key"
            )
        if policy == "mask" and col.type.kind != "text":
            raise ViewDefinitionError(
                f"columns: {given!r} is {col.type}: only text columns can be masked (all but their last four "
                'characters replaced by "*"); hash it, or block it'
            )
        if col.policy == "hash" and policy == "mask":
            policy = "hash"  # the agent hashes it anyway (--hash): no view lifts that
        out[(source, table, col.name)] = policy
    return out


def policed_schemas(
    schemas: Mapping[str, SourceSchema], columns: Mapping[tuple[str, str, str], str]
) -> dict[str, SourceSchema]:
    """The schemas as a view with these policies binds to: blocked columns gone, hashed ones text."""
    out = dict(schemas)
    for source in {s for s, _, _ in columns}:
        tables = dict(schemas[source].tables)
        for name, table in tables.items():
            ruled = {c: p for (s, t, c), p in columns.items() if s == source and t == name}
            if ruled:
                tables[name] = _policed_table(table, ruled)
        out[source] = replace(schemas[source], tables=tables)
    return out


def _policed_table(table: TableInfo, ruled: Mapping[str, str]) -> TableInfo:
    cols = tuple(
        replace(c, type=TEXT) if ruled.get(c.name) == "hash" else c
        for c in table.columns
        if ruled.get(c.name) != "block"
    )
    blocked = {c for c, p in ruled.items() if p == "block"}
    return replace(table, columns=cols, unique_keys=tuple(u for u in table.unique_keys if not set(u) & blocked))


def bind_policed(
    bind: Callable[[Mapping[str, SourceSchema]], ViewDef], schemas: Mapping[str, SourceSchema], policies: Policies
) -> ViewDef:
    """The view bound by `bind` with its policies: checked on the view as bound to `schemas`,
    then bound again to the policed schemas, and each site query told its policies.

    Raises:
        ViewDefinitionError: a policy that names no column the view's tables have, touches a key,
            blocks a column the view reads, or a row filter outside the grammar (422).
    """
    raw = bind(schemas)
    if not policies:
        return raw
    sources = list(dict.fromkeys(s.source for s in raw.sites))
    columns = resolve_columns(policies, schemas, sources)
    filters = {_table_of(t, schemas, sources, f"row_filter ({t!r})"): p for t, p in policies.row_filter.items()}
    transformed = {k for k, p in columns.items() if p != "block"}
    if transformed and raw.multiset:
        raise ViewDefinitionError(
            "columns: a view over tables without a key is read grouped by its raw values, so its columns cannot be "
            "hashed or masked (block them, or give the tables a key)"
        )
    for site in raw.sites:  # a table view leaves its blocked columns out by itself
        _check_reads(site, columns, blocks=raw.table is None)
    policed = policed_schemas(schemas, columns)
    definition = bind(policed)
    sites = [_site_with(site, columns, filters, policed) for site in definition.sites]
    return replace(definition, sites=sites, policies=policies.to_json())


def _aliases(tree: exp.Select) -> dict[str, str]:
    return {t.alias_or_name: sitesql.exposed_name(t) for t in tree.find_all(exp.Table)}


def _check_reads(site: SiteQuery, columns: Mapping[tuple[str, str, str], str], blocks: bool = True) -> None:
    """Refuse a site query that reads a blocked column, or compares a hashed or masked one in its WHERE."""
    tree = site.parse()
    aliases = _aliases(tree)
    where = tree.args.get("where")
    in_where = {id(c) for c in where.find_all(exp.Column)} if where is not None else set()
    for col in tree.find_all(exp.Column):
        key = (site.source, aliases.get(col.table, col.table), col.name)
        policy = columns.get(key)
        if policy == "block" and blocks:
            raise ViewDefinitionError(
                f"the view reads {key[1]}.{key[2]}, which its columns policy blocks: a blocked column is never read; "
                "leave it out of the view's SQL (a table view leaves it out by itself)"
            )
        if policy in ("hash", "mask") and id(col) in in_where:
            raise ViewDefinitionError(
                f"the view's WHERE compares {key[1]}.{key[2]}, which its columns policy {policy}es: that would ask "
                "the source about its raw values; filter on another column (row_filter is the place for a policy's filter)"
            )


def _site_with(
    site: SiteQuery,
    columns: Mapping[tuple[str, str, str], str],
    filters: Mapping[tuple[str, str], str],
    schemas: Mapping[str, SourceSchema],
) -> SiteQuery:
    """The site query naming its policed output columns and blocked columns, its row filters written in."""
    tree = site.parse()
    aliases = _aliases(tree)
    read = set(aliases.values())
    out = {}
    for item in tree.expressions:
        inner = item.this if isinstance(item, exp.Alias) else item
        if isinstance(inner, exp.Column):
            policy = columns.get((site.source, aliases.get(inner.table, inner.table), inner.name))
            if policy in ("hash", "mask"):
                out[item.alias_or_name] = policy
    blocked = sorted(f"{t}.{c}" for (s, t, c), p in columns.items() if s == site.source and t in read and p == "block")
    sql = site.sql
    for (source, table), predicate in filters.items():
        if source == site.source and table in read:
            tree = _filtered(tree, table, predicate, schemas[source].tables[table], site.dialect)
            sql = site.render(tree)
    return replace(site, sql=sql, policies=out, blocked=blocked)


def _qualifier(alias: str, names: Mapping[str, str]) -> Callable[[exp.Column], exp.Expression]:
    """A row filter's column reference as the site query reads it: by the table's alias, exactly named."""

    def qualified(column: exp.Column) -> exp.Expression:
        return sitesql.column_ref(alias, names[column.name.casefold()])

    return qualified


def _filtered(tree: exp.Select, table: str, predicate: str, info: TableInfo, dialect: str | None) -> exp.Select:
    """`tree` with `predicate` (on `table`'s columns) ANDed into its WHERE for each alias reading the table.

    >>> from deltasieve_protocol.schema import ColumnInfo
    >>> t = TableInfo("p", (ColumnInfo("id", LogicalType("int"), False, "int"), ColumnInfo("age", LogicalType("int"), True, "int")), ("id",))
    >>> tree = sqlglot.parse_one('SELECT "x"."id" AS "id" FROM "p" AS "x" WHERE "x"."id" > 0')
    >>> _filtered(tree, "p", "age >= 18 or age is null", t, None).sql()
    'SELECT "x"."id" AS "id" FROM "p" AS "x" WHERE "x"."id" > 0 AND ("x"."age" >= 18 OR "x"."age" IS NULL)'
    """
    what = f"row_filter of table {table!r}"
    try:
        parsed = sqlglot.parse_one(predicate, read=dialect)
    except SqlglotError as exc:
        raise ViewDefinitionError(
            f"{what} does not parse: {str(exc).splitlines()[0]}; {sitesql.PREDICATE_HELP}"
        ) from None
    sitesql.check_predicate(parsed, ViewDefinitionError, what)
    names = {c.name.casefold(): c.name for c in info.columns}
    short = table.rpartition(".")[2]
    for col in parsed.find_all(exp.Column):
        if col.table and col.table not in (table, short):
            raise ViewDefinitionError(f"{what} names {col.sql()}: a row filter names columns of its own table only")
        if col.name.casefold() not in names:
            raise ViewDefinitionError(
                f"{what} names column {col.name!r}, which the table does not expose to this view (its columns: "
                f"{sorted(names.values())})"
            )
    for join in tree.args.get("joins") or []:
        joined = join.this
        if isinstance(joined, exp.Table) and sitesql.exposed_name(joined) == table and join.side:
            raise ViewDefinitionError(
                f"{what}: the view reads {table!r} by {join.side} JOIN, whose missing rows it keeps as NULLs; a row "
                "filter applies to tables read by FROM or an inner JOIN"
            )
    tree = tree.copy()
    for t in list(tree.find_all(exp.Table)):
        if sitesql.exposed_name(t) != table:
            continue
        condition = sitesql.requalify(parsed.copy(), _qualifier(t.alias_or_name, names))
        tree = tree.where(exp.paren(condition, copy=False) if isinstance(condition, exp.Or) else condition, copy=False)
    return tree
