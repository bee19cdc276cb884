"""Decomposition: cut a bound view into one site query per site and the assembly that joins them.

Decomposition as in Lu, Liu and Hyland, "Delta Extraction Optimization for View Maintenance
in a Limited Collaborative Environment"; push-down as in Carnes and Hanson, "Query-Based
Change Detection". A *site* is a connected component of
the local join graph: tables of one source linked by conditions that read only tables of
that source. Tables of one source that the view does not join locally become separate
sites against the same source. Every AND term of the ON and WHERE predicates that reads
one site only is pushed down into that site's query; the others (joins and filters across
sites) are evaluated in the warehouse by the *assembly*, a Spark SQL query over the site
fragments `site_0`, `site_1`, ... Each site query projects the view's columns from its
tables, the columns the assembly's conditions need, and every key of its tables, and is
generated in its source's dialect. A view with a single site has no assembly: its site
query is the view.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import ErrorLevel, SqlglotError

from deltasieve_protocol import sitesql
from deltasieve_protocol.grouped import COUNT_COLUMN, null_flag
from deltasieve_protocol.schema import SourceSchema
from deltasieve_protocol.sqlnodes import Node
from deltasieve_protocol.types import Column
from warehouse.viewdef.binding import bind_view
from warehouse.viewdef.bound import BoundView
from warehouse.viewdef.cross_site import CROSS_SITE_HELP, check_cross_site
from warehouse.viewdef.grouped_site import combination_items, grouped_items, grouped_site, nulls_restored
from warehouse.viewdef.kinds import check_kinds
from warehouse.viewdef.model import SiteQuery, ViewDef, ViewDefinitionError

#: sqlglot dialect of the assembly, the warehouse-side query that joins the site fragments.
ASSEMBLY_DIALECT = "spark"


def site_table(number: int) -> str:
    """Name under which the assembly reads the fragment of site `number`.

    >>> site_table(1)
    'site_1'
    """
    return f"site_{number}"


def assembly_over(assembly: str, tables: list[str]) -> str:
    """The assembly reading site i's rows from the table named `tables[i]`.

    >>> assembly_over("SELECT `s0`.`a` AS `a` FROM `site_0` AS `s0` CROSS JOIN `site_1` AS `s1`", ["x", "y"])
    'SELECT `s0`.`a` AS `a` FROM `x` AS `s0` CROSS JOIN `y` AS `s1`'
    """
    tree = sqlglot.parse_one(assembly, read=ASSEMBLY_DIALECT)
    for table in tree.find_all(exp.Table):
        for number, name in enumerate(tables):
            if table.name == site_table(number):
                table.set("this", exp.to_identifier(name, quoted=True))
                break
    return tree.sql(dialect=ASSEMBLY_DIALECT, identify=True, comments=False)


Link = tuple[int, str, int, str]  # site, column = other site, column


def join_terms(assembly: str) -> list[tuple[int, exp.Expression | None]]:
    """(site joined, AND term of its join condition) for every join of the assembly, in
    order; the term None for a join without condition (a cross join)."""
    out: list[tuple[int, exp.Expression | None]] = []
    for join in sqlglot.parse_one(assembly, read=ASSEMBLY_DIALECT).args.get("joins") or []:
        joined, on = int(join.this.alias.removeprefix("s")), join.args.get("on")
        out += [(joined, term) for term in split_and(on)] if on is not None else [(joined, None)]
    return out


def equality(term: exp.Expression) -> Link | None:
    """The sites and columns of a term `si.a = sj.b` between two sites, else None.

    >>> equality(exp.condition("`s1`.`id` = `s0`.`b`", dialect=ASSEMBLY_DIALECT)), equality(exp.condition("s0.a > 1"))
    ((1, 'id', 0, 'b'), None)
    """
    left, right = term.this, term.args.get("expression")
    if not (isinstance(term, exp.EQ) and isinstance(left, exp.Column) and isinstance(right, exp.Column)):
        return None
    a, b = int(left.table.removeprefix("s")), int(right.table.removeprefix("s"))
    return (a, left.name, b, right.name) if a != b else None


def site_equalities(assembly: str) -> list[Link]:
    """Every `si.a = sj.b` that is an AND term of a join condition of the assembly: a row
    of the view has equal values there.

    >>> site_equalities("SELECT `s0`.`a` AS `a` FROM `site_0` AS `s0` JOIN `site_1` AS `s1` "
    ...                 "ON `s1`.`id` = `s0`.`b` AND `s0`.`c` > 1 OR `s1`.`x` = `s0`.`y`")
    []
    >>> site_equalities("SELECT `s0`.`a` AS `a` FROM `site_0` AS `s0` LEFT JOIN `site_1` AS `s1` "
    ...                 "ON `s1`.`id` = `s0`.`b` AND `s0`.`c` > 1")
    [(1, 'id', 0, 'b')]
    """
    links = [equality(term) for _, term in join_terms(assembly) if term is not None]
    return [link for link in links if link is not None]


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
    bound = bind_view(sql, schemas)
    conjuncts = _conjuncts(bound)
    groups = _local_sites(bound, conjuncts)
    columns = [Column(o.name, o.column.type) for o in bound.outputs]
    # conditions across sites are checked for the warehouse's evaluation first (cross_site.py)
    decomposed = _decompose(bound, conjuncts, groups, schemas) if len(groups) > 1 else None
    check_kinds(bound, ViewDefinitionError)
    if bound.multiset and decomposed is None:
        tree, columns_read, key, multiset = grouped_site(bound)
        source = bound.relations[0].source
        site = SiteQuery(source, _render_site(tree, source, schemas), columns_read, key, _dialect(source, schemas))
        return ViewDef(sql.strip(), columns, [], [site], multiset=multiset)
    derivation = [p.to_json() for p in bound.key_parts]
    if decomposed is None:
        return ViewDef(sql.strip(), columns, bound.key, [_single_site(bound, schemas)], key_derivation=derivation)
    sites, assembly, left = decomposed
    if bound.multiset:  # kept as combinations of the sites' grouped rows (multiset.py)
        read = {c.name for s in sites for c in s.columns}
        nulls = {c.name: null_flag(c.name) for c in columns if null_flag(c.name) in read}
        return ViewDef(sql.strip(), columns, [], sites, assembly, None, left, {"count": COUNT_COLUMN, "nulls": nulls})
    return ViewDef(sql.strip(), columns, bound.key, sites, assembly, derivation, left)


def _single_site(bound: BoundView, schemas: Mapping[str, SourceSchema]) -> SiteQuery:
    """The site query of a view whose tables form one site: the view itself, as written."""
    source = bound.relations[0].source
    tree = sitesql.build_select(
        [(sitesql.column_ref(bound.relations[o.relation].alias, o.column.name), o.name) for o in bound.outputs],
        [(r.table.path, r.alias) for r in bound.relations],
        bound.conditions,
        bound.where,
    )
    columns = [Column(o.name, o.column.type) for o in bound.outputs]
    return SiteQuery(source, _render_site(tree, source, schemas), columns, list(bound.key), _dialect(source, schemas))


def _dialect(source: str, schemas: Mapping[str, SourceSchema]) -> str | None:
    """The dialect a site query of `source` is kept with: MySQL's only (`SiteQuery.dialect`)."""
    dialect = schemas[source].dialect
    return dialect if dialect == "mysql" else None


def _render_site(tree: exp.Select, source: str, schemas: Mapping[str, SourceSchema]) -> str:
    dialect = schemas[source].dialect
    try:
        return sitesql.render(tree, dialect)
    except (SqlglotError, ValueError) as exc:  # a construct the dialect lacks, or an unknown dialect
        raise ViewDefinitionError(
            f"the site query cannot be written in the {dialect!r} dialect of source {source!r}: {exc}"
        ) from None


# --- several sites ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Conjunct:
    """One AND term of an ON or WHERE predicate and the relations it reads."""

    expr: exp.Expression
    relations: frozenset[int]
    origin: int  # the relation whose ON held it; 0 for WHERE


def split_and(predicate: exp.Expression) -> list[exp.Expression]:
    """The AND terms of `predicate`, parentheses around ANDs opened.

    >>> [t.sql() for t in split_and(exp.condition("(a = 1 AND (b = 2 OR c = 3)) AND NOT d"))]
    ['a = 1', 'b = 2 OR c = 3', 'NOT d']
    """
    if isinstance(predicate, exp.Paren):
        return split_and(predicate.this)
    if isinstance(predicate, exp.And):
        return split_and(predicate.this) + split_and(predicate.expression)
    return [predicate]


def _conjuncts(bound: BoundView) -> list[_Conjunct]:
    """Every AND term of the ON predicates (in FROM order), then of WHERE."""
    predicates = [(i, on) for i, on in enumerate(bound.conditions) if on is not None]
    if bound.where is not None:
        predicates.append((0, bound.where))
    return [
        _Conjunct(term, frozenset(bound.relation_of(c) for c in term.find_all(exp.Column)), origin)
        for origin, predicate in predicates
        for term in split_and(predicate)
    ]


def _local_sites(bound: BoundView, conjuncts: list[_Conjunct]) -> list[list[int]]:
    """The sites: relations of one source linked by conditions over that source only; a
    relation joined by LEFT JOIN alone.

    Returns each site's relations in FROM order; sites ordered by their first relation.
    """
    parent = list(range(len(bound.relations)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for c in conjuncts:
        if any(bound.is_left(r) for r in c.relations):
            continue  # a table joined by LEFT JOIN is a site of its own: the warehouse pads it
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
        tied = next(
            (m for m in rest if any(m in link and link <= taken | {m} for link in links if len(link) > 1)), None
        )
        pick = rest[0] if tied is None else tied
        order.append((pick, tied is None))
        taken.add(pick)
        rest.remove(pick)
    return order


def _conjunction(terms: list[exp.Expression]) -> Node | None:
    return exp.and_(*terms) if terms else None


def _decompose(
    bound: BoundView, conjuncts: list[_Conjunct], groups: list[list[int]], schemas: Mapping[str, SourceSchema]
) -> tuple[list[SiteQuery], str, list[int]]:
    """One site query per site, the assembly that joins their results into the view, and
    the sites it joins by LEFT JOIN."""
    site_of = {r: s for s, members in enumerate(groups) for r in members}
    pushed: list[list[_Conjunct]] = [[] for _ in groups]
    central: list[_Conjunct] = []
    for c in conjuncts:
        # A term without columns (ON TRUE, 1 = 1) filters as well at the site that held it.
        touched = {site_of[r] for r in c.relations} or {site_of[c.origin]}
        if bound.is_left(c.origin) and c.relations - {c.origin}:
            # the ON of a LEFT JOIN decides which rows match, not which rows stay: every term
            # that reads another table is evaluated by the left join in the warehouse
            check_cross_site(c.expr, bound)
            central.append(c)
        elif len(touched) == 1:
            pushed[touched.pop()].append(c)
        else:
            check_cross_site(c.expr, bound)
            central.append(c)
    names, extras = _site_column_names(bound, central, site_of, len(groups))
    sites = [_site_query(bound, members, pushed[s], extras[s], schemas) for s, members in enumerate(groups)]
    left = [s for s, members in enumerate(groups) if bound.is_left(members[0])]
    return sites, _assembly(bound, central, site_of, names, sites), left


def _site_column_names(
    bound: BoundView, central: list[_Conjunct], site_of: dict[int, int], n_sites: int
) -> tuple[dict[tuple[int, str], str], list[list[tuple[int, str, str]]]]:
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


def _site_query(
    bound: BoundView,
    members: list[int],
    pushed: list[_Conjunct],
    extras: list[tuple[int, str, str]],
    schemas: Mapping[str, SourceSchema],
) -> SiteQuery:
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
    read = [(bound.relations[o.relation].alias, o.column, o.name) for o in selected]
    read += [
        (bound.relations[r].alias, bound.relations[r].table.known_column(column), name) for r, column, name in extras
    ]
    refs = [sitesql.column_ref(alias, column.name) for alias, column, _ in read]
    items: Sequence[tuple[Node, str]] = [(ref, name) for ref, (_, _, name) in zip(refs, read)]
    columns = [Column(name, column.type) for _, column, name in read]
    key = [name for r in members for name in bound.keys[r]]
    group = None
    if bound.multiset:  # each distinct row once, with its count (grouped_site.py)
        g = grouped_items([(ref, c, column.nullable) for ref, c, (_, column, _) in zip(refs, columns, read)])
        items, columns, key, group = g.items, g.columns, g.key, g.group
    tree = sitesql.build_select(
        items,
        [(bound.relations[r].table.path, bound.relations[r].alias) for r, _ in order],
        conditions,
        _conjunction(where),
        group,
    )
    if not key:  # _choose_key gives every table a key; a site without one could not be extracted
        labels = ", ".join(bound.relations[r].label for r in members)
        raise ViewDefinitionError(
            f"the part of the view read from source {source!r} ({labels}) has no key column: every table of a view must contribute its key to the select list"
        )
    return SiteQuery(source, _render_site(tree, source, schemas), columns, key, _dialect(source, schemas))


def _assembly(
    bound: BoundView,
    central: list[_Conjunct],
    site_of: dict[int, int],
    names: dict[tuple[int, str], str],
    queries: list[SiteQuery],
) -> str:
    """The Spark SQL query joining the sites' results into the view.

    Site i is read as `site_i` AS `si`; each condition across sites is an ON of the last
    site it reads; a site no condition ties to the others is a CROSS JOIN. A site joined by
    LEFT JOIN comes last, its ON the terms of its ON that read other sites. A multiset's
    assembly selects combinations of the grouped site rows (grouped_site.py), its
    conditions reading NULL where a site's flag says a value was NULL.
    """
    n_sites = len(queries)
    flags = [{c.name for c in q.columns} for q in queries]

    def ref(site: int, name: str) -> exp.Column:
        return exp.Column(this=exp.to_identifier(name, quoted=True), table=exp.to_identifier(f"s{site}", quoted=True))

    def table(site: int) -> exp.Table:
        return exp.Table(
            this=exp.to_identifier(site_table(site), quoted=True),
            alias=exp.TableAlias(this=exp.to_identifier(f"s{site}", quoted=True)),
        )

    def relink(col: exp.Column) -> exp.Expression:
        relation = bound.relation_of(col)
        site, name = site_of[relation], names[(relation, col.name)]
        flag = null_flag(name) if bound.multiset and null_flag(name) in flags[site] else None
        return nulls_restored(ref(site, name), flag)

    left = {site_of[r] for r in range(len(bound.relations)) if bound.is_left(r)}
    inner = [c for c in central if not bound.is_left(c.origin)]
    links = [frozenset(site_of[r] for r in c.relations) for c in inner]
    order = _join_order([s for s in range(n_sites) if s not in left], links)
    position = {s: p for p, (s, _) in enumerate(order)}
    on: dict[int, list[exp.Expression]] = {s: [] for s in range(n_sites)}
    for c, sites in zip(inner, links):
        on[max(sites, key=position.__getitem__)].append(sitesql.requalify(c.expr, relink))
    for c in central:
        if bound.is_left(c.origin):
            on[site_of[c.origin]].append(sitesql.requalify(c.expr, relink))
    if bound.multiset:
        select = exp.Select(expressions=combination_items([q.columns for q in queries], ref))
    else:
        select = exp.Select(
            expressions=[exp.alias_(ref(site_of[o.relation], o.name), o.name, quoted=True) for o in bound.outputs]
        )
    select.set("from_", exp.From(this=table(order[0][0])))
    joins = []
    for site, _ in order[1:]:
        condition = _conjunction(on[site])
        joins.append(
            exp.Join(this=table(site), on=condition)
            if condition is not None
            else exp.Join(this=table(site), kind="CROSS")
        )
    for site in sorted(left):  # after the inner joins: nothing else reads a left-joined table
        joins.append(exp.Join(this=table(site), on=_conjunction(on[site]) or exp.true(), side="LEFT"))
    select.set("joins", joins)
    try:
        return select.sql(dialect=ASSEMBLY_DIALECT, identify=True, comments=False, unsupported_level=ErrorLevel.RAISE)
    except SqlglotError as exc:
        raise ViewDefinitionError(
            f"the conditions across sources cannot be written in Spark SQL: {exc}; {CROSS_SITE_HELP}"
        ) from None
