"""View definitions: check a view's SQL against the sources' schemas and cut it into site queries.

A view is a select-project-join block over tables written `source.table`::

    SELECT c.id, c.name, o.id AS order_id, o.amount
    FROM crm.customers AS c JOIN crm.orders AS o ON o.customer_id = c.id
    WHERE o.amount > 10

The view's SQL is read in sqlglot's standard dialect (identifiers in double quotes,
strings in single quotes); each site query is generated in its source's dialect. The
analysis runs as ordered steps: parse -> bind tables -> bind columns -> choose keys ->
decompose into site queries.

Decomposition (003 §IV.A, push-down as in 002 §3.1). A *site* is a connected component of
the local join graph: tables of one source linked by conditions that read only tables of
that source. Tables of one source that the view does not join locally become separate
sites against the same source. Every AND term of the ON and WHERE predicates that reads
one site only is pushed down into that site's query; the others (joins and filters across
sites) are evaluated in the warehouse by the *assembly*, a Spark SQL query over the site
fragments `site_0`, `site_1`, ... Each site query projects the view's columns from its
tables, the columns the assembly's conditions need, and every key of its tables. A view
with a single site has no assembly: its site query is the view.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import sqlglot
from sqlglot import exp
from sqlglot.errors import ErrorLevel, SqlglotError

from remote_agent.protocol import sitesql
from remote_agent.protocol.schema import ColumnInfo, SourceSchema, TableInfo, schema_to_json
from remote_agent.protocol.types import Column, LogicalType

#: sqlglot dialect the view's own SQL is read in (None is sqlglot's standard dialect).
VIEW_DIALECT: str | None = None
#: What a view may look like, appended to every rejection.
VIEW_FORM = (
    "a view is SELECT t.column [AS name], ... FROM source.table [AS t] "
    "[[INNER] JOIN source.table [AS u] ON condition]... [WHERE condition]"
)
#: sqlglot dialect of the assembly, the warehouse-side query that joins the site fragments.
ASSEMBLY_DIALECT = "spark"
#: What a condition across sites may contain, appended to its rejections.
CROSS_SITE_HELP = (
    "conditions across sites (tables of several sources, or of one source not joined there) "
    "run in the warehouse on Spark SQL and may use columns, literals, = <> != < <= > >= "
    "between values of the same kind (numbers, text, dates, ...), [NOT] BETWEEN, [NOT] IN, "
    "IS [NOT] NULL, AND/OR/NOT and + - * on numbers; division and LIKE are supported in "
    "conditions that read one site only, which run at the source"
)


def site_table(number: int) -> str:
    """Name under which the assembly reads the fragment of site `number`.

    >>> site_table(1)
    'site_1'
    """
    return f"site_{number}"


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
class SiteQuery:
    """The part of a view evaluated at one source, as SQL in the source's dialect."""

    source: str
    sql: str
    columns: list[Column]
    key: list[str]

    def to_json(self) -> dict:
        return {"source": self.source, "sql": self.sql, "columns": [c.to_json() for c in self.columns], "key": list(self.key)}

    def where(self) -> str:
        """The source tables it reads, for messages: "table 'people'" or "tables 'a', 'b' (joined)"."""
        try:
            names = list(dict.fromkeys(t.name for t in sqlglot.parse_one(self.sql).find_all(exp.Table)))
        except SqlglotError:
            names = []
        if not names:
            return "the site query"
        if len(names) == 1:
            return f"table {names[0]!r}"
        return f"tables {', '.join(map(repr, names))} (joined)"

    @classmethod
    def from_json(cls, data: dict) -> "SiteQuery":
        return cls(data["source"], data["sql"], [Column.from_json(c) for c in data["columns"]], list(data["key"]))


@dataclass(frozen=True)
class ViewDef:
    """A checked view: its SQL, typed output columns, key, and one site query per site.

    `assembly` is None when the view has one site (the site query computes the view).
    With several sites it is a Spark SQL query over the tables `site_0`, `site_1`, ...
    (the site queries' results, columns named as in `sites[i].columns`) that computes the
    view's rows, columns named and ordered as `columns`.
    """

    sql: str
    columns: list[Column]
    key: list[str]
    sites: list[SiteQuery]
    assembly: str | None = None

    def to_json(self) -> dict:
        data = {"sql": self.sql, "columns": [c.to_json() for c in self.columns], "key": list(self.key), "sites": [s.to_json() for s in self.sites]}
        if self.assembly is not None:  # single-site definitions keep the form stored before assemblies existed
            data["assembly"] = self.assembly
        return data

    @classmethod
    def from_json(cls, data: dict) -> "ViewDef":
        sites = [SiteQuery.from_json(s) for s in data["sites"]]
        return cls(data["sql"], [Column.from_json(c) for c in data["columns"]], list(data["key"]), sites, data.get("assembly"))


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
    keys: list[list[str]]  # per relation, its key columns' output names

    @property
    def key(self) -> list[str]:
        """The view's key: every relation's key, relation by relation."""
        return [name for key in self.keys for name in key]

    def relation_of(self, column: exp.Column) -> int:
        """Index of the relation a bound column reference ("alias"."column") reads."""
        return next(i for i, r in enumerate(self.relations) if r.alias == column.table)

    def type_of(self, column: exp.Column) -> LogicalType:
        return self.relations[self.relation_of(column)].table.column(column.name).type


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
    conjuncts = _conjuncts(bound)
    groups = _local_sites(bound, conjuncts)
    columns = [Column(o.name, o.column.type) for o in bound.outputs]
    if len(groups) == 1:
        return ViewDef(sql.strip(), columns, bound.key, [_single_site(bound, schemas)])
    sites, assembly = _decompose(bound, conjuncts, groups, schemas)
    return ViewDef(sql.strip(), columns, bound.key, sites, assembly)


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


def _choose_key(relations: list[_Relation], outputs: list[_Output]) -> list[list[str]]:
    """Each relation's primary key (else a unique key) as output names, relation by relation."""
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
            candidates = sorted(table.unique_keys, key=lambda u: any(table.column(c) is None or table.column(c).nullable for c in u))
        chosen = next((k for k in candidates if all(c in selected for c in k)), None)
        if chosen is None:
            raise ViewDefinitionError(_missing_key_message(relation, candidates))
        keys.append([selected[c] for c in chosen])
    return keys


def _missing_key_message(relation: _Relation, candidates: list[tuple[str, ...]]) -> str:
    rule = "every table of a view must contribute its primary key (or, without one, a unique key) to the select list; aliases are allowed"
    if not candidates:
        return f"{relation.label} has no primary key and no unique key, so its rows cannot be told apart: {rule}"
    refs = lambda k: ", ".join(f"{relation.alias}.{c}" for c in k)  # noqa: E731
    if relation.table.primary_key:
        return f"{relation.label} has the primary key ({', '.join(relation.table.primary_key)}), which must be selected: add {refs(relation.table.primary_key)}; {rule}"
    options = " or ".join(f"({', '.join(k)})" for k in candidates)
    return f"{relation.label} has no primary key; the columns of one of its unique keys {options} must be selected: add for example {refs(candidates[0])}; {rule}"


def _single_site(bound: _Bound, schemas: Mapping[str, SourceSchema]) -> SiteQuery:
    """The site query of a view whose tables form one site: the view itself, as written."""
    source = bound.relations[0].source
    tree = sitesql.build_select(
        [(sitesql.column_ref(bound.relations[o.relation].alias, o.column.name), o.name) for o in bound.outputs],
        [(r.table.name, r.alias) for r in bound.relations],
        bound.conditions,
        bound.where,
    )
    columns = [Column(o.name, o.column.type) for o in bound.outputs]
    return SiteQuery(source, _render_site(tree, source, schemas), columns, list(bound.key))


def _render_site(tree: exp.Select, source: str, schemas: Mapping[str, SourceSchema]) -> str:
    dialect = schemas[source].dialect
    try:
        return sitesql.render(tree, dialect)
    except (SqlglotError, ValueError) as exc:  # a construct the dialect lacks, or an unknown dialect
        raise ViewDefinitionError(f"the site query cannot be written in the {dialect!r} dialect of source {source!r}: {exc}") from None


# --- several sites ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Conjunct:
    """One AND term of an ON or WHERE predicate and the relations it reads."""

    expr: exp.Expression
    relations: frozenset[int]
    origin: int  # the relation whose ON held it; 0 for WHERE


def _split_and(predicate: exp.Expression) -> list[exp.Expression]:
    """The AND terms of `predicate`, parentheses around ANDs opened.

    >>> [t.sql() for t in _split_and(exp.condition("(a = 1 AND (b = 2 OR c = 3)) AND NOT d"))]
    ['a = 1', 'b = 2 OR c = 3', 'NOT d']
    """
    if isinstance(predicate, exp.Paren):
        return _split_and(predicate.this)
    if isinstance(predicate, exp.And):
        return _split_and(predicate.this) + _split_and(predicate.expression)
    return [predicate]


def _conjuncts(bound: _Bound) -> list[_Conjunct]:
    """Every AND term of the ON predicates (in FROM order), then of WHERE."""
    predicates = [(i, on) for i, on in enumerate(bound.conditions) if on is not None]
    if bound.where is not None:
        predicates.append((0, bound.where))
    return [
        _Conjunct(term, frozenset(bound.relation_of(c) for c in term.find_all(exp.Column)), origin)
        for origin, predicate in predicates
        for term in _split_and(predicate)
    ]


def _local_sites(bound: _Bound, conjuncts: list[_Conjunct]) -> list[list[int]]:
    """The sites: relations of one source linked by conditions over that source only.

    Returns each site's relations in FROM order; sites ordered by their first relation.
    """
    parent = list(range(len(bound.relations)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for c in conjuncts:
        if len(c.relations) > 1 and len({bound.relations[r].source for r in c.relations}) == 1:
            first, *rest = sorted(c.relations)
            for r in rest:
                parent[root(r)] = root(first)
    groups: dict[int, list[int]] = {}
    for i in range(len(bound.relations)):
        groups.setdefault(root(i), []).append(i)
    return sorted(groups.values(), key=lambda g: g[0])


def _join_order(members: list[int], links: list[frozenset[int]]) -> list[tuple[int, bool]]:
    """`members` reordered so that each joins on a condition over itself and those before it.

    Starts with the first member, then repeatedly takes the earliest member some link ties
    to the ones already taken; when none is tied, the earliest left, flagged as a cross join.

    >>> _join_order([0, 1, 2], [frozenset({0, 2}), frozenset({1, 2})])
    [(0, False), (2, False), (1, False)]
    >>> _join_order([0, 1], [])
    [(0, False), (1, True)]
    """
    order = [(members[0], False)]
    taken = {members[0]}
    rest = list(members[1:])
    while rest:
        tied = next((m for m in rest if any(m in link and link <= taken | {m} for link in links if len(link) > 1)), None)
        pick = rest[0] if tied is None else tied
        order.append((pick, tied is None))
        taken.add(pick)
        rest.remove(pick)
    return order


def _conjunction(terms: list[exp.Expression]) -> exp.Expression | None:
    return exp.and_(*terms) if terms else None


def _decompose(bound: _Bound, conjuncts: list[_Conjunct], groups: list[list[int]], schemas: Mapping[str, SourceSchema]) -> tuple[list[SiteQuery], str]:
    """One site query per site, and the assembly that joins their results into the view."""
    site_of = {r: s for s, members in enumerate(groups) for r in members}
    pushed: list[list[_Conjunct]] = [[] for _ in groups]
    central: list[_Conjunct] = []
    for c in conjuncts:
        # A term without columns (ON TRUE, 1 = 1) filters as well at the site that held it.
        touched = {site_of[r] for r in c.relations} or {site_of[c.origin]}
        if len(touched) == 1:
            pushed[touched.pop()].append(c)
        else:
            _check_cross_site(c.expr, bound)
            central.append(c)
    names, extras = _site_column_names(bound, central, site_of, len(groups))
    sites = [_site_query(bound, members, pushed[s], extras[s], schemas) for s, members in enumerate(groups)]
    return sites, _assembly(bound, central, site_of, names, len(groups))


def _site_column_names(bound: _Bound, central: list[_Conjunct], site_of: dict[int, int], n_sites: int) -> tuple[dict[tuple[int, str], str], list[list[tuple[int, str, str]]]]:
    """Output name of every column a site projects, and each site's extra columns.

    A column the view outputs keeps its output name. A column that only the warehouse's
    conditions read is projected as `<alias>_<column>` (suffixed `_2`, `_3`, ... if that
    clashes, ignoring case, with an output name or another such column): site outputs may
    not start with '__', which the agent reserves.

    Returns:
        (relation, column) -> name, and per site the extras as (relation, column, name).
    """
    names: dict[tuple[int, str], str] = {}
    for o in bound.outputs:
        names.setdefault((o.relation, o.column.name), o.name)
    taken = {o.name.casefold() for o in bound.outputs}
    extras: list[list[tuple[int, str, str]]] = [[] for _ in range(n_sites)]
    for c in central:
        for col in c.expr.find_all(exp.Column, bfs=False):
            relation = bound.relation_of(col)
            if (relation, col.name) in names:
                continue
            base = f"{bound.relations[relation].alias}_{col.name}".lstrip("_") or "column"
            name, n = base, 1
            while name.casefold() in taken:
                n += 1
                name = f"{base}_{n}"
            taken.add(name.casefold())
            names[(relation, col.name)] = name
            extras[site_of[relation]].append((relation, col.name, name))
    return names, extras


def _site_query(bound: _Bound, members: list[int], pushed: list[_Conjunct], extras: list[tuple[int, str, str]], schemas: Mapping[str, SourceSchema]) -> SiteQuery:
    """The query of one site: its tables joined locally, its conditions pushed down.

    A condition over several of its tables is an ON of the last of them to be joined; the
    others go to WHERE (the same for inner joins).
    """
    source = bound.relations[members[0]].source
    order = _join_order(members, [c.relations for c in pushed])
    position = {r: p for p, (r, _) in enumerate(order)}
    on: dict[int, list[exp.Expression]] = {r: [] for r in members}
    where: list[exp.Expression] = []
    for c in pushed:
        if len(c.relations) > 1:
            on[max(c.relations, key=position.__getitem__)].append(c.expr)
        else:
            where.append(c.expr)
    # A table tied to the others only by a condition over three or more of them joins ON TRUE.
    conditions = [None] + [_conjunction(on[r]) or exp.true() for r, _ in order[1:]]
    selected = [o for o in bound.outputs if o.relation in position]
    items = [(sitesql.column_ref(bound.relations[o.relation].alias, o.column.name), o.name) for o in selected]
    items += [(sitesql.column_ref(bound.relations[r].alias, column), name) for r, column, name in extras]
    tree = sitesql.build_select(items, [(bound.relations[r].table.name, bound.relations[r].alias) for r, _ in order], conditions, _conjunction(where))
    columns = [Column(o.name, o.column.type) for o in selected] + [Column(name, bound.relations[r].table.column(column).type) for r, column, name in extras]
    key = [name for r in members for name in bound.keys[r]]
    if not key:  # _choose_key gives every table a key; a site without one could not be extracted
        labels = ", ".join(bound.relations[r].label for r in members)
        raise ViewDefinitionError(f"the part of the view read from source {source!r} ({labels}) has no key column: every table of a view must contribute its key to the select list")
    return SiteQuery(source, _render_site(tree, source, schemas), columns, key)


def _assembly(bound: _Bound, central: list[_Conjunct], site_of: dict[int, int], names: dict[tuple[int, str], str], n_sites: int) -> str:
    """The Spark SQL query joining the sites' results into the view.

    Site i is read as `site_i` AS `si`; each condition across sites is an ON of the last
    site it reads; a site no condition ties to the others is a CROSS JOIN.
    """

    def ref(site: int, name: str) -> exp.Column:
        return exp.Column(this=exp.to_identifier(name, quoted=True), table=exp.to_identifier(f"s{site}", quoted=True))

    def table(site: int) -> exp.Table:
        return exp.Table(this=exp.to_identifier(site_table(site), quoted=True), alias=exp.TableAlias(this=exp.to_identifier(f"s{site}", quoted=True)))

    def relink(col: exp.Column) -> exp.Column:
        relation = bound.relation_of(col)
        return ref(site_of[relation], names[(relation, col.name)])

    links = [frozenset(site_of[r] for r in c.relations) for c in central]
    order = _join_order(list(range(n_sites)), links)
    position = {s: p for p, (s, _) in enumerate(order)}
    on: dict[int, list[exp.Expression]] = {s: [] for s in range(n_sites)}
    for c, sites in zip(central, links):
        on[max(sites, key=position.__getitem__)].append(sitesql.requalify(c.expr, relink))
    select = exp.Select(expressions=[exp.alias_(ref(site_of[o.relation], o.name), o.name, quoted=True) for o in bound.outputs])
    select.set("from_", exp.From(this=table(order[0][0])))
    joins = []
    for site, _ in order[1:]:
        condition = _conjunction(on[site])
        joins.append(exp.Join(this=table(site), on=condition) if condition is not None else exp.Join(this=table(site), kind="CROSS"))
    select.set("joins", joins)
    try:
        return select.sql(dialect=ASSEMBLY_DIALECT, identify=True, comments=False, unsupported_level=ErrorLevel.RAISE)
    except SqlglotError as exc:
        raise ViewDefinitionError(f"the conditions across sources cannot be written in Spark SQL: {exc}; {CROSS_SITE_HELP}") from None


#: Kinds of values a condition across sites may compare with each other.
_FAMILY = {"int": "number", "float": "number", "decimal": "number", "text": "text", "bytes": "bytes", "bool": "boolean", "date": "date", "timestamp": "timestamp", "timestamptz": "timestamp"}
_COMPARISONS = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE)


def _check_cross_site(condition: exp.Expression, bound: _Bound) -> None:
    """Reject a condition across sites that Spark would evaluate differently from the sources.

    Spark runs it on the fragments: division (integer or not, by zero or not) and LIKE
    (case, escapes) differ between SQLite, PostgreSQL and Spark, and a comparison between
    values of different kinds fails in Spark's ANSI mode or casts differently, so those
    are refused here rather than at every sync.
    """

    def fail(problem: str) -> None:
        raise ViewDefinitionError(f"the condition {sitesql.snippet(condition)} reads tables of several sites, so the warehouse evaluates it, where {problem}; {CROSS_SITE_HELP}")

    def family(node: exp.Expression) -> str | None:
        """The kind of value `node` yields; None for NULL and string literals, which adapt."""
        if isinstance(node, exp.Paren):
            return family(node.this)
        if isinstance(node, exp.Column):
            return _FAMILY[bound.type_of(node).kind]
        if isinstance(node, exp.Boolean):
            return "boolean"
        if isinstance(node, exp.Null) or (isinstance(node, exp.Literal) and node.is_string):
            return None
        if isinstance(node, exp.Literal):
            return "number"
        if isinstance(node, exp.Div):
            fail(f"division is not supported ({sitesql.snippet(node)})")
        if isinstance(node, exp.Like):
            fail(f"LIKE is not supported ({sitesql.snippet(node)})")
        if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Neg)):
            for operand in (node.this, node.args.get("expression")):
                kind = family(operand) if operand is not None else None
                if kind not in (None, "number"):
                    fail(f"arithmetic works on numbers only ({sitesql.snippet(node)} uses a {kind} value)")
            return "number"
        if isinstance(node, _COMPARISONS):
            same(node, node.this, node.expression)
        elif isinstance(node, exp.Between):
            same(node, node.this, node.args["low"], node.args["high"])
        elif isinstance(node, exp.In):
            same(node, node.this, *node.expressions)
        elif isinstance(node, exp.Is):
            family(node.this)
        elif isinstance(node, (exp.And, exp.Or, exp.Not)):
            for operand in (node.this, node.args.get("expression")):
                if operand is not None:
                    truth(operand)
        return "boolean"

    def same(node: exp.Expression, *operands: exp.Expression) -> None:
        kinds = {k for k in map(family, operands) if k is not None}
        if len(kinds) > 1:
            fail(f"{sitesql.snippet(node)} compares values of different kinds ({' and '.join(sorted(kinds))})")

    def truth(node: exp.Expression) -> None:
        kind = family(node)
        if kind not in (None, "boolean"):
            fail(f"{sitesql.snippet(node)} is a {kind} value, not a condition")

    truth(condition)
