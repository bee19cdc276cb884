"""Validate a site query sent by the warehouse and regenerate the SQL the agent will run.

The text from the wire is parsed, checked against the shared grammar
(`deltasieve_protocol/sitesql.py`) and against the tables and columns this agent exposes, and then
thrown away: the SQL that runs is generated from a tree built here, every identifier
quoted and every literal re-escaped by sqlglot. Nothing in the request — not a table
name, an alias or a string — can add a statement, a function call or a table.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import SqlglotError

from deltasieve_protocol import grouped, sitenames, sitesql
from deltasieve_protocol.schema import columns_fingerprint
from deltasieve_protocol.types import LogicalType
from remote_agent.adapters.base import ColumnInfo, TableInfo
from remote_agent.errors import BadRequest, Forbidden, UnsupportedQuery

#: What a site query may look like, appended to every rejection.
SITE_FORM = (
    "a site query is SELECT alias.column AS name, ... FROM table [AS alias] "
    "[[INNER] JOIN table [AS alias] ON condition]... [WHERE condition], or that grouped "
    "by every column it selects, with COUNT(*) (a view over tables without a key)"
)


#: `Adapter.key_order`: (key column, its expression, whether it is unique) -> what to order by.
KeyOrder = Callable[[ColumnInfo, exp.Expression, bool], exp.Expression]


@dataclass(frozen=True)
class ValidatedQuery:
    """A site query the agent accepted, ready to run.

    `sql` takes no parameters. `columns` are the output columns (name = output name, with
    the source column's type, nullability, declared type and read_as); `key` names the
    output columns that form the key.
    """

    sql: str
    columns: list[ColumnInfo]
    key: list[str]
    dialect: str = field(repr=False)
    _tree: exp.Select = field(repr=False, compare=False)
    _key_exprs: tuple[exp.Expression, ...] = field(repr=False, compare=False)
    #: The exposed tables the query reads, in FROM order.
    tables: tuple[str, ...] = ()
    #: Where each output column comes from, as "table.column", parallel to `columns`.
    origins: tuple[str, ...] = ()
    #: The key columns as stored (no read_as): what chunks are ordered and cut by, so
    #: that the database can walk the key's index.
    _key_columns: tuple[exp.Expression, ...] = field(repr=False, compare=False, default=())
    #: A ranged read (`within`): the key intervals [lo, hi) to read, as bound parameters
    #: (None: unbounded); empty: the whole query.
    intervals: tuple[tuple[tuple | None, tuple | None], ...] = field(repr=False, compare=False, default=())
    #: A resumed read (`resumed_after`): the key, as bound parameters, whose rows and those
    #: before it are not read; None: from the first key.
    after: tuple | None = field(repr=False, compare=False, default=None)
    #: Whether the query is grouped (a multiset's distinct rows with their counts, sitesql.py).
    grouped: bool = False
    #: The fingerprint of the columns of the tables it reads (deltasieve_protocol.schema.columns_fingerprint),
    #: which each extraction answer names: the warehouse tells a change of those it does not read.
    fingerprint: str = ""
    #: What its hashed columns are keyed with (AGENT_HASH_KEY, policies.py); None when none is.
    hash_key: bytes | None = field(repr=False, compare=False, default=None)

    def within(
        self, intervals: Sequence[tuple[tuple | None, tuple | None]], ordered: Sequence[exp.Expression]
    ) -> ValidatedQuery:
        """The query read only over these key intervals, the key ordered and cut as `ordered`.

        `intervals` hold each bound's key values as statement parameters (never SQL); the
        chunked scan (chunks.py) walks each interval from its lower bound, its statements
        bounded above by `chunk_sql(..., below=True)`. `ordered` are the key columns as
        the adapter makes them sort as Python sorts the values (`Adapter.range_key`):
        chunks are ordered, cut and bounded by them.
        """
        if len(ordered) != len(self._key_columns):
            raise ValueError("one ordered expression per key column")
        return replace(self, intervals=tuple(intervals), _key_columns=tuple(e.copy() for e in ordered))

    def resumed_after(self, key: tuple) -> ValidatedQuery:
        """The query read only after `key` (its values as statement parameters): the chunked
        scan's first statement compares the key with `>`, as the database orders it."""
        if len(key) != len(self._key_columns) or self.intervals:
            raise ValueError("a resumed read is a whole read, after one value per key column")
        return replace(self, after=tuple(key))

    def key_column(self, name: str) -> exp.Expression:
        """The key column `name` as stored (no read_as), as chunks order and cut by it."""
        return self._key_columns[self.key.index(name)].copy()

    def where(self) -> str:
        """The tables read, for error messages: "table 'people'" or "tables 'a', 'b' (joined)"."""
        if len(self.tables) == 1:
            return f"table {self.tables[0]!r}"
        return f"tables {', '.join(map(repr, self.tables))} (joined)"

    @property
    def key_positions(self) -> list[int]:
        """Positions of the key columns in the select list."""
        names = [c.name for c in self.columns]
        return [names.index(k) for k in self.key]

    @property
    def nulls_first(self) -> bool:
        """Whether the dialect sorts NULL before every value in ascending order."""
        return Dialect.get_or_raise(self.dialect).NULL_ORDERING == "nulls_are_small"

    def narrowed(self, condition: Callable[[str], exp.Expression]) -> ValidatedQuery:
        """The same query kept to the rows for which `condition(alias)` holds for any of its
        tables (OR across a join's tables), AND-ed to its WHERE; the condition is the agent's own."""
        tree = self._tree.copy()
        aliases = dict.fromkeys(t.alias_or_name for t in tree.find_all(exp.Table))
        extra = exp.or_(*(exp.Paren(this=condition(alias)) for alias in aliases))
        tree = tree.where(exp.Paren(this=extra), append=True)
        return replace(self, sql=sitesql.render(tree, self.dialect), _tree=tree)

    def chunk_sql(self, limit: int, *, from_cursor: bool, below: bool = False, strictly: bool = False) -> str:
        """The query ordered by its key, cut to `limit` rows, from a cursor bound as parameters.

        `WHERE (original where) AND (k1, k2) >= (?, ?) ORDER BY k1, k2 LIMIT n` (keyset
        pagination); `k >= ?` for a one-column key; no cursor condition for the first chunk.
        The comparison is inclusive so that a second row with the cursor's key (a key that
        is not unique at the source) cannot fall between two chunks unseen. `below` adds
        `AND (k1, k2) < (?, ?)`, an interval's upper bound, bound after the cursor. `strictly`
        compares the cursor with `>`: a resumed read's first chunk (`resumed_after`).
        """
        if limit < 1:
            raise ValueError("a chunk holds at least one row")
        tree = self._tree.copy()
        conditions = [self._key_compare(exp.GT if strictly else exp.GTE)] if from_cursor else []
        if below:
            conditions.append(self._key_compare(exp.LT))
        if conditions:
            condition = exp.and_(*conditions)
            where = tree.args.get("where")
            if where is not None:
                condition = exp.and_(exp.Paren(this=where.this), condition)
            tree.set("where", exp.Where(this=condition))
        tree.set(
            "order",
            exp.Order(
                expressions=[exp.Ordered(this=c.copy(), nulls_first=self.nulls_first) for c in self._key_columns]
            ),
        )
        tree.set("limit", exp.Limit(expression=exp.Literal.number(limit)))
        return sitesql.render(tree, self.dialect)

    def _key_compare(self, op: type[exp.Binary]) -> exp.Binary:
        """`k op ?`, or the row value `(k1, k2) op (?, ?)` for a composite key."""
        columns = [c.copy() for c in self._key_columns]
        if len(columns) == 1:
            return op(this=columns[0], expression=exp.Placeholder())
        return op(
            this=exp.Tuple(expressions=columns),
            expression=exp.Tuple(expressions=[exp.Placeholder() for _ in columns]),
        )

    def null_key_sql(self) -> str:
        """The query restricted to rows with a NULL in a key column, at most one of them."""
        condition: exp.Condition = exp.or_(*(exp.Is(this=c.copy(), expression=exp.Null()) for c in self._key_columns))
        tree = self._tree.copy()
        where = tree.args.get("where")
        if where is not None:
            condition = exp.and_(exp.Paren(this=where.this), exp.Paren(this=condition))
        tree.set("where", exp.Where(this=condition))
        tree.set("limit", exp.Limit(expression=exp.Literal.number(1)))
        return sitesql.render(tree, self.dialect)

    def lookup_sql(self, n_keys: int) -> str:
        """The same query restricted to `n_keys` key values bound as parameters.

        `WHERE (original where) AND k IN (?, ...)`, or `(k1, k2) IN ((?, ?), ...)` for a
        composite key, with the dialect's placeholder. A key column is matched as it is
        output (after read_as), so the bound values are the ones the query returned.
        """
        if n_keys < 1:
            raise ValueError("a lookup needs at least one key")
        width = len(self._key_exprs)
        if width == 1:
            target: exp.Expression = self._key_exprs[0].copy()
            values: list[exp.Expression] = [exp.Placeholder() for _ in range(n_keys)]
        else:
            target = exp.Tuple(expressions=[e.copy() for e in self._key_exprs])
            values = [exp.Tuple(expressions=[exp.Placeholder() for _ in range(width)]) for _ in range(n_keys)]
        condition: exp.Condition = exp.In(this=target, expressions=values)
        tree = self._tree.copy()
        where = tree.args.get("where")
        if where is not None:
            condition = exp.and_(exp.Paren(this=where.this), condition)
        tree.set("where", exp.Where(this=condition))
        return sitesql.render(tree, self.dialect)


@dataclass(frozen=True)
class _TableUse:
    """One table the site query reads (FROM or JOIN): the exposed table and the alias it is read by."""

    table: TableInfo
    alias: str

    @property
    def label(self) -> str:
        """How error messages name this use: "exposed table 'a'", with its alias if it has one."""
        aliased = f" (alias {self.alias!r})" if self.alias != self.table.name else ""
        return f"exposed table {self.table.name!r}{aliased}"


@dataclass(frozen=True)
class _Tables:
    """The tables a site query reads, bound to the exposed ones, and the scope its columns resolve in."""

    uses: list[_TableUse]
    scope: sitenames.Scope

    def resolve(self, column: exp.Column) -> tuple[int, str]:
        """(position of the table use, exact column name) that `column` refers to."""
        return self.scope.resolve(column)

    def column(self, position: int, name: str) -> ColumnInfo:
        """The exposed column `name` (as `resolve` found it) of the table use at `position`."""
        found = self.uses[position].table.column(name)
        if found is None:
            raise Forbidden(f"column {name!r} is not exposed by this agent")
        return found

    def ref(self, position: int, name: str) -> exp.Column:
        """The column `name` of the table use at `position`, quoted and qualified by its alias."""
        return sitesql.column_ref(self.uses[position].alias, name)


@dataclass(frozen=True)
class _Output:
    """One output column of a site query: what the select list reads and where it comes from.

    `stored` is what the key compares when the column is in the key (before read_as; the
    count has none); `read` is the (table use, column) it selects, None for the count.
    """

    item: sitesql.SelectItem
    column: ColumnInfo
    select: exp.Expression
    stored: exp.Expression | None
    origin: str
    read: tuple[int, str] | None
    #: (alias, column) it reads, as key columns are matched against unique keys.
    source: tuple[str, str] | None


def validate_site_query(
    sql: str,
    key: Sequence[str],
    tables: Mapping[str, TableInfo],
    dialect: str,
    key_order: KeyOrder | None = None,
) -> ValidatedQuery:
    """Check a site query against the grammar and the exposed schema; build the SQL to run.

    The checks run in this order, each raising on the first thing it refuses: the grammar
    (`sitesql.parse_select`), the tables, the selected columns, the output names, a grouped
    query's shape and key, the key, the ON and WHERE columns, the dialect.

    Args:
        sql: the site query as received (untrusted).
        key: output names of the key columns.
        tables: the tables this agent exposes, already cut to the allowed columns.
        dialect: the adapter's sqlglot dialect.
        key_order: the adapter's `Adapter.key_order`: how a key column is ordered, cut and
            grouped by so that the database tells apart exactly the values Python does.

    Raises:
        UnsupportedQuery: the query is not a plain select-project-join (422).
        Forbidden: it names a table or column this agent does not expose (403).
        BadRequest: `key` does not name output columns (400).
    """
    ordered = _ordering(key_order)
    parts = sitesql.parse_select(sql, dialect, UnsupportedQuery, SITE_FORM, grouped=True)
    read = _exposed_tables(parts, tables)
    outputs = [_selected(item, read, dialect) for item in parts.items]
    _check_output_names(outputs)
    group = _grouping(parts, read, outputs, key, ordered)
    key_exprs = _key_expressions(key, outputs)
    joins, where = _qualified_conditions(parts, read)
    tree = sitesql.build_select(
        [(o.select, o.column.name) for o in outputs],
        [(u.table.path, u.alias) for u in read.uses],
        joins,
        where,
        group,
    )
    return ValidatedQuery(
        _rendered(tree, dialect),
        [o.column for o in outputs],
        list(key),
        dialect,
        tree,
        key_exprs,
        tables=tuple(dict.fromkeys(u.table.name for u in read.uses)),
        origins=tuple(o.origin for o in outputs),
        _key_columns=_key_columns(key, outputs, read, ordered, grouped=group is not None),
        grouped=group is not None,
        fingerprint=columns_fingerprint({u.table.name: u.table for u in read.uses}.values()),
    )


def _ordering(key_order: KeyOrder | None) -> KeyOrder:
    """The adapter's key order, or the column as it is where the adapter has none."""
    if key_order is None:
        return lambda column, expr, is_unique: expr
    return key_order


def _exposed_tables(parts: sitesql.SelectParts, tables: Mapping[str, TableInfo]) -> _Tables:
    """Check that every table read is exposed (403) and every visible name unique (422)."""
    uses = [_bind_table(ref, tables) for ref in parts.tables]
    entries = [
        sitenames.Relation(
            u.alias, u.table.name, tuple(c.name for c in u.table.columns), u.alias != u.table.name, u.label
        )
        for u in uses
    ]
    sitenames.check_unique_visible(entries, UnsupportedQuery)
    return _Tables(uses, sitenames.Scope(entries, UnsupportedQuery, Forbidden))


def _bind_table(ref: sitesql.TableRef, tables: Mapping[str, TableInfo]) -> _TableUse:
    if ref.catalog is not None:
        raise Forbidden(
            f"table {ref.written()!r} is not exposed by this agent: site queries name exposed tables as table or schema.table"
        )
    written = ref.written()
    name = sitenames.pick_name(written, tables, UnsupportedQuery, "table")
    if name is None:
        raise Forbidden(
            f"table {written!r} is not exposed by this agent (GET /v1/schema lists the tables it exposes; --allow "
            f"{written} exposes it, a table outside the default schema written schema.table)"
        )
    table = tables[name]
    return _TableUse(table, ref.alias or table.path[-1])


def _selected(item: sitesql.SelectItem, read: _Tables, dialect: str) -> _Output:
    """Check that a select item reads an exposed column (403); what it outputs."""
    out = item.alias or (item.column.name if item.column is not None else "")
    if item.kind == grouped.COUNT or item.column is None:
        count = ColumnInfo(out, LogicalType("int"), False, "bigint", None)
        return _Output(item, count, exp.Count(this=exp.Star()), None, "", None, None)
    position, name = read.resolve(item.column)
    use = read.uses[position]
    source = read.column(position, name)
    origin = f"{use.table.name}.{name}"
    column_ref = read.ref(position, name)
    ref: exp.Expression = column_ref
    if item.kind == grouped.NULL_FLAG:
        flag = exp.Is(this=ref, expression=exp.Null())
        column = ColumnInfo(out, LogicalType("bool"), False, "boolean", None)
        return _Output(item, column, flag, flag, origin, (position, name), (use.alias, name))
    stored = ref
    if source.read_as:
        ref = sitesql.wrap_read_as(source.read_as, column_ref, dialect)
    nullable = source.nullable
    if item.kind == grouped.COALESCED and item.filler is not None:
        # NULL made a value (its flag says it was NULL): ordered, cut and looked up as read
        ref = exp.Coalesce(this=ref, expressions=[item.filler.copy()])
        stored = ref
        nullable = False
    column = ColumnInfo(
        out,
        source.type,
        nullable,
        source.declared,
        source.read_as,
        policy=source.policy,
        policy_from=source.policy_from,
    )
    return _Output(item, column, ref, stored, origin, (position, name), (use.alias, name))


def _check_output_names(outputs: Sequence[_Output]) -> None:
    """Check that the output names are unique and none but the generated ones is reserved (422)."""
    generated = [
        o.column.name
        for o in outputs
        if o.item.kind in (grouped.COUNT, grouped.NULL_FLAG) and o.column.name.startswith(grouped.MULTISET_PREFIX)
    ]
    sitenames.check_output_names([o.column.name for o in outputs], UnsupportedQuery, generated)


def _grouping(
    parts: sitesql.SelectParts, read: _Tables, outputs: Sequence[_Output], key: Sequence[str], ordered: KeyOrder
) -> list[exp.Expression] | None:
    """A grouped query's GROUP BY, checked: it groups by exactly the columns it selects (422),
    its key is every output column but the count (400). None: the query is not grouped."""
    if parts.group is None:
        return None
    resolved = [read.resolve(g) for g in parts.group]
    group = [ordered(read.column(i, n), read.ref(i, n), False) for i, n in resolved]
    if set(resolved) != {o.read for o in outputs if o.read is not None}:
        raise UnsupportedQuery(f"a grouped site query groups by exactly the columns it selects: {grouped.GROUPED_HELP}")
    counted = next(o.column.name for o in outputs if o.item.kind == grouped.COUNT)
    names = {o.column.name for o in outputs}
    if set(key) != names - {counted} or len(key) != len(outputs) - 1:
        raise BadRequest(
            f"the key of a grouped site query is every output column but the count {counted!r}, not {list(key)}"
        )
    return group


def _key_expressions(key: Sequence[str], outputs: Sequence[_Output]) -> tuple[exp.Expression, ...]:
    """Check that the key names output columns, each once (400); their select expressions, for lookups by key."""
    if not key:
        raise BadRequest("the site query's key is empty: name the output columns that identify a row")
    if len(set(key)) != len(key):
        raise BadRequest(f"the site query's key {list(key)} names a column twice")
    by_name = {o.column.name: o.select for o in outputs}
    missing = [k for k in key if k not in by_name]
    if missing:
        raise BadRequest(
            f"key column(s) {', '.join(map(repr, missing))} are not output columns of the site query (those are: {', '.join(by_name)})"
        )
    return tuple(by_name[k] for k in key)


def _qualified_conditions(
    parts: sitesql.SelectParts, read: _Tables
) -> tuple[list[exp.Expression | None], exp.Expression | None]:
    """Check the columns of the ON and WHERE conditions (exposed, 403; an ON reads only the
    tables joined so far, 422); the conditions with every column qualified by its alias."""

    def qualified(col: exp.Column, limit: int | None = None) -> exp.Column:
        position, name = read.resolve(col)
        if limit is not None and position > limit:
            raise UnsupportedQuery(
                f"the ON condition of the join with {read.uses[limit].label} uses {read.uses[position].alias}.{name}, which is joined later: {SITE_FORM}"
            )
        return read.ref(position, name)

    joins: list[exp.Expression | None] = [None]
    for position, on in enumerate(parts.conditions[1:], start=1):
        joins.append(None if on is None else sitesql.requalify(on, functools.partial(qualified, limit=position)))
    where = sitesql.requalify(parts.where, qualified) if parts.where is not None else None
    return joins, where


def _rendered(tree: exp.Select, dialect: str) -> str:
    """The SQL to run; a query the dialect cannot write is refused (422)."""
    try:
        return sitesql.render(tree, dialect)
    except SqlglotError as exc:
        raise UnsupportedQuery(f"the site query cannot be written in the {dialect!r} dialect: {exc}") from None


def _key_columns(
    key: Sequence[str], outputs: Sequence[_Output], read: _Tables, ordered: KeyOrder, *, grouped: bool
) -> tuple[exp.Expression, ...]:
    """The key columns as stored, ordered as the adapter orders them; unique where a table's unique key lies in the key."""
    by_name = {o.column.name: o for o in reversed(outputs)}
    stored = {o.column.name: o.stored for o in outputs if o.stored is not None}
    unique = _unique_columns(read.uses, {by_name[k].source for k in key if k in by_name})
    return tuple(ordered(by_name[k].column, stored[k], not grouped and by_name[k].source in unique) for k in key)


def _unique_columns(uses: Sequence[_TableUse], key_columns: set[tuple[str, str] | None]) -> set[tuple[str, str] | None]:
    """The key's columns (alias, column) from table uses one of whose unique keys lies wholly in the key.

    Two rows of the query with equal values (as the database compares them) in such
    columns come from the same row of that table, so hold the same values, byte for byte.
    """
    found: set[tuple[str, str] | None] = set()
    for use in uses:
        mine = {c for c in key_columns if c is not None and c[0] == use.alias}
        keys = (use.table.primary_key, *use.table.unique_keys)
        if any(unique and {(use.alias, c) for c in unique} <= mine for unique in keys):
            found |= mine
    return found
