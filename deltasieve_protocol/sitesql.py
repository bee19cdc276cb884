"""The SQL language of views and site queries, shared by the warehouse and the agent.

The warehouse writes a site query as SQL text; the agent never runs that text. Both sides
parse with sqlglot, check the tree against the same whitelist, resolve names against a
schema and regenerate the SQL from a tree they built themselves. Keeping the grammar here
means the service cannot accept a view that the agent would then refuse.

The language is a select-project-join block::

    SELECT t.col [AS name], ... FROM table [AS t] [[INNER] JOIN table [AS u] ON predicate]...
    [WHERE predicate]

and its grouped form for views over tables without a key (grouped.py).

Callers pass the exception class to raise, so the same checks surface as a 422 of the
service (`ViewDefinitionError`) or a 422/403 of the agent (`UnsupportedQuery`, `Forbidden`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ErrorLevel, ParseError, TokenError

from deltasieve_protocol import sqlsize
from deltasieve_protocol.grouped import COLUMN, group_columns, grouped_item, is_count_star, unaliased
from deltasieve_protocol.parse_errors import in_user_terms
from deltasieve_protocol.sqlnodes import Node, describe, is_literal, snippet

ErrorClass = Callable[[str], Exception]

#: What a predicate (WHERE, JOIN ... ON) may contain, for error messages.
PREDICATE_HELP = (
    "predicates may use column references, literals (numbers, strings, TRUE/FALSE, NULL), "
    "AND/OR/NOT, parentheses, = <> != < <= > >=, IS [NOT] NULL, [NOT] IN (list of literals), "
    "[NOT] BETWEEN, [NOT] LIKE, unary minus and + - * /"
)
SELECT_LIST_HELP = "the select list holds column references only, each optionally aliased (t.col AS name)"

#: Longest piece of SQL quoted back in an error message.

#: Numeric literals as sqlglot's tokenizer leaves them: digits, a point, an exponent.
_NUMBER_RE = re.compile(r"^(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")

#: Every node type a predicate may contain, with the arguments it may carry. Exact types:
#: subclasses (e.g. sqlglot's ByteString or RawString literals) are not admitted.
_PREDICATE_NODES: dict[type[Node], frozenset[str]] = {
    exp.Column: frozenset({"this", "table", "db", "catalog"}),
    exp.Identifier: frozenset({"this", "quoted"}),
    exp.Literal: frozenset({"this", "is_string"}),
    exp.Boolean: frozenset({"this"}),
    exp.Null: frozenset(),
    exp.And: frozenset({"this", "expression"}),
    exp.Or: frozenset({"this", "expression"}),
    exp.Not: frozenset({"this"}),
    exp.Paren: frozenset({"this"}),
    exp.EQ: frozenset({"this", "expression"}),
    exp.NEQ: frozenset({"this", "expression"}),
    exp.LT: frozenset({"this", "expression"}),
    exp.LTE: frozenset({"this", "expression"}),
    exp.GT: frozenset({"this", "expression"}),
    exp.GTE: frozenset({"this", "expression"}),
    exp.Is: frozenset({"this", "expression", "negate"}),  # negate: IS NOT NULL
    exp.In: frozenset({"this", "expressions"}),
    exp.Between: frozenset({"this", "low", "high"}),
    exp.Like: frozenset({"this", "expression", "negate"}),  # negate: NOT LIKE
    exp.Neg: frozenset({"this"}),
    exp.Add: frozenset({"this", "expression"}),
    exp.Sub: frozenset({"this", "expression"}),
    exp.Mul: frozenset({"this", "expression"}),
    exp.Div: frozenset({"this", "expression", "typed", "safe"}),
}
#: Clauses of a SELECT the language has, and the message for the ones it has not.
_ALLOWED_CLAUSES = frozenset({"expressions", "from_", "joins", "where"})
_CLAUSE_PROBLEMS = {
    "with_": "CTEs (WITH ...) are not supported",
    "group": "GROUP BY is not supported (aggregates cannot be maintained)",
    "having": "HAVING is not supported (aggregates cannot be maintained)",
    "distinct": "DISTINCT is not supported",
    "order": "ORDER BY is not supported",
    "limit": "LIMIT/OFFSET/FETCH FIRST are not supported",
    "offset": "LIMIT/OFFSET/FETCH FIRST are not supported",
    "fetch": "LIMIT/OFFSET/FETCH FIRST are not supported",
    "qualify": "QUALIFY is not supported",
    "windows": "window functions are not supported",
    "into": "SELECT INTO is not supported",
    "locks": "locking clauses (FOR UPDATE/SHARE) are not supported",
    "laterals": "LATERAL is not supported",
}
_TABLE_PROBLEMS = {
    "sample": "TABLESAMPLE is not supported",
    "hints": "table hints are not supported",
    "only": "ONLY is not supported",
    "version": "time-travel clauses are not supported",
    "pivots": "PIVOT/UNPIVOT is not supported",
    "laterals": "LATERAL is not supported",
    "joins": "parenthesized joins are not supported",
}
#: Readable names of operators outside the language, for messages.
#: Placeholder column name used to splice a column reference into an adapter's read_as SQL.
_READ_AS_SLOT = "__deltasieve_read_as_column__"


@dataclass(frozen=True)
class TableRef:
    """One table occurrence of the FROM clause, as written."""

    name: str
    db: str | None
    catalog: str | None
    alias: str | None

    def written(self) -> str:
        return ".".join(p for p in (self.catalog, self.db, self.name) if p)


@dataclass(frozen=True)
class SelectItem:
    """One entry of the select list: a column reference and its alias, if any.

    In a grouped site query `kind` says what the item makes of its column (COLUMN,
    COALESCED with `filler`, NULL_FLAG; COUNT has no column, `column` is None)."""

    column: exp.Column | None
    alias: str | None
    kind: str = COLUMN
    filler: exp.Expression | None = None


@dataclass(frozen=True)
class SelectParts:
    """A SELECT that passed the structural checks, cut into the pieces names are resolved in.

    `conditions[i]` is the ON predicate joining `tables[i]`; `conditions[0]` is None (FROM).
    `left[i]` says that `tables[i]` is joined by LEFT [OUTER] JOIN (only where the caller
    allows it); empty when every join is inner.
    """

    items: list[SelectItem]
    tables: list[TableRef]
    conditions: list[exp.Expression | None]
    where: exp.Expression | None
    left: list[bool] = field(default_factory=list)
    #: the GROUP BY columns of a grouped site query; None for a plain one
    group: list[exp.Column] | None = None


def check_predicate(node: Node, error: ErrorClass, clause: str) -> None:
    """Raise `error` unless every node of `node` is in the predicate whitelist.

    Args:
        node: the condition of a WHERE or JOIN ... ON.
        error: exception class called with the message.
        clause: where the predicate stands, for the message ("WHERE", "the ON condition ...").

    >>> check_predicate(sqlglot.parse_one("a = 1 AND b IN ('x', 'y')"), ValueError, "WHERE")
    >>> check_predicate(sqlglot.parse_one("a = upper(b)"), ValueError, "WHERE")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: function call upper(...) is not supported in WHERE: predicates may use ...
    """
    for sub in node.walk():
        allowed = _PREDICATE_NODES.get(type(sub))
        if allowed is None:
            raise error(f"{describe(sub)} is not supported in {clause}: {PREDICATE_HELP}")
        extra = [k for k, v in sub.args.items() if v not in (None, False, [], "") and k not in allowed]
        if extra:
            raise error(f"{snippet(sub)} uses {', '.join(extra)}, which is not supported in {clause}: {PREDICATE_HELP}")
        if isinstance(sub, exp.Column) and not isinstance(sub.this, exp.Identifier):
            raise error(f"{describe(sub.this)} is not supported in {clause}: {PREDICATE_HELP}")
        if type(sub) is exp.Literal and not sub.is_string and not _NUMBER_RE.match(sub.this):
            raise error(
                f"the number {sub.this!r} is not supported in {clause}, write plain decimal numbers; {PREDICATE_HELP}"
            )
        if type(sub) is exp.Literal and sub.is_string and "\\" in sub.this:
            # A server reading backslash escapes (PostgreSQL with standard_conforming_strings
            # off) would end the regenerated literal early, so no backslash goes out at all.
            raise error(
                f"string literals containing a backslash are not supported in {clause} (found {snippet(sub)}), databases disagree on what it means; {PREDICATE_HELP}"
            )
        if isinstance(sub, exp.Is) and type(sub.expression) is not exp.Null:
            raise error(
                f"IS {snippet(sub.expression)} is not supported in {clause}: only IS [NOT] NULL; {PREDICATE_HELP}"
            )
        if isinstance(sub, exp.In):
            for item in sub.expressions:
                if not is_literal(item):
                    raise error(
                        f"{describe(item)} in an IN list is not supported in {clause}: IN lists hold literals only; {PREDICATE_HELP}"
                    )


def parse_select(
    sql: str, dialect: str | None, error: ErrorClass, form: str, *, left_joins: bool = False, grouped: bool = False
) -> SelectParts:
    """Parse `sql` and check it is one plain select-project-join block.

    Args:
        sql: the SQL text (never trusted).
        dialect: sqlglot dialect to read it in; None for sqlglot's standard dialect.
        error: exception class called with the message of the first violation.
        form: what is supported, appended to every message ("a view is SELECT ...").
        left_joins: whether LEFT [OUTER] JOIN is accepted besides inner joins.
        grouped: whether the grouped form (GROUP BY, see the module's docstring) is accepted.

    Returns:
        the select list, the tables with their ON conditions, the WHERE predicate, and
        the GROUP BY columns of a grouped query.
    """
    statement = _one_statement(sql, dialect, error, form)
    select = _plain_select(statement, error, form, grouped)
    group_by = select.args.get("group")
    group_nodes = group_by.expressions if group_by is not None else []
    is_grouped = bool(group_nodes)
    _check_everywhere(select, error, form, is_grouped)
    items = [_select_item(e, error, is_grouped) for e in select.expressions]
    if not items:
        raise error(f"the select list is empty: {form}")
    group = group_columns(group_nodes, [i.kind for i in items], error) if is_grouped else None
    from_ = select.args.get("from_")
    if from_ is None or from_.this is None:
        raise error(f"a FROM clause is required: {form}")
    tables = [_table_ref(from_.this, error, form)]
    conditions: list[exp.Expression | None] = [None]
    left = [False]
    for join in select.args.get("joins") or []:
        tables.append(_table_ref(join.this, error, form))
        on, is_left = _join_condition(join, error, form, left_joins)
        check_predicate(on, error, f"the ON condition of the join with {tables[-1].written()!r}")
        conditions.append(on)
        left.append(is_left)
    where = select.args.get("where")
    predicate = where.this if where is not None else None
    if predicate is not None:
        check_predicate(predicate, error, "WHERE")
    return SelectParts(items, tables, conditions, predicate, left if any(left) else [], group)


def _one_statement(sql: str, dialect: str | None, error: ErrorClass, form: str) -> Node:
    try:
        reader = Dialect.get_or_raise(dialect)
        tokens = reader.tokenize(sql)  # read once: for the size bounds, then by the parser
        sqlsize.check_text(sql, tokens, lambda problem: error(f"{problem}: {form}"))
        statements = [s for s in reader.parser().parse(tokens, sql) if s is not None]
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        where = f" (line {first.get('line')}, column {first.get('col')})" if first.get("line") else ""
        problem = in_user_terms(first.get("description", "syntax error"), first.get("highlight"))
        raise error(f"the SQL cannot be parsed{where}: {problem}; {form}") from None
    except TokenError:
        raise error(f"the SQL cannot be parsed: a quote is not closed or a character is not SQL; {form}") from None
    except RecursionError:
        raise error(f"the SQL cannot be parsed: it nests too deeply; {form}") from None
    if not statements:
        raise error(f"the SQL is empty: {form}")
    if len(statements) > 1:
        raise error(f"exactly one statement is supported, found {len(statements)}: {form}")
    sqlsize.check_tree(statements[0], lambda problem: error(f"{problem}: {form}"))
    return statements[0]


def _plain_select(statement: Node, error: ErrorClass, form: str, grouped: bool = False) -> exp.Select:
    if isinstance(statement, exp.SetOperation):
        raise error(f"UNION/INTERSECT/EXCEPT are not supported: {form}")
    if isinstance(statement, exp.Subquery):
        raise error(f"a parenthesized query is not supported: {form}")
    if not isinstance(statement, exp.Select):
        kind = (
            statement.key.upper()
            if isinstance(statement, (exp.Insert, exp.Update, exp.Delete, exp.Merge))
            else type(statement).__name__.upper()
        )
        raise error(f"{kind} statements are not supported, only a SELECT: {form}")
    for key, value in statement.args.items():
        if key in _ALLOWED_CLAUSES or value in (None, False, [], "") or (grouped and key == "group"):
            continue
        raise error(f"{_CLAUSE_PROBLEMS.get(key, f'the {key.upper()} clause is not supported')}: {form}")
    return statement


def _check_everywhere(select: exp.Select, error: ErrorClass, form: str, grouped: bool = False) -> None:
    """Constructs refused wherever they appear, reported by name rather than by position
    (but the COUNT(*) of a grouped query's select list)."""
    counts = {id(unaliased(e)) for e in select.expressions if grouped and is_count_star(unaliased(e))}
    checks: list[tuple[tuple[type[Node], ...], str]] = [
        ((exp.Window,), "window functions are not supported"),
        ((exp.AggFunc,), "aggregates are not supported"),
        ((exp.Query, exp.Subquery, exp.Exists), "subqueries are not supported"),
        ((exp.Placeholder, exp.Parameter), "query parameters (placeholders) are not supported"),
    ]
    for types, problem in checks:
        for node in select.walk():
            if node is not select and isinstance(node, types) and id(node) not in counts:
                raise error(f"{problem} (found {snippet(node)}): {form}")


def _select_item(node: exp.Expression, error: ErrorClass, grouped: bool = False) -> SelectItem:
    alias = None
    target = node
    if isinstance(node, exp.Alias):
        alias = node.alias
        target = node.this
        if not alias:
            raise error(f"empty alias in the select list: {SELECT_LIST_HELP}")
    if grouped:
        item = grouped_item(target, alias, error)
        if item is not None:
            return SelectItem(item[1], alias, item[0], item[2])
    if isinstance(target, exp.Star) or (isinstance(target, exp.Column) and isinstance(target.this, exp.Star)):
        raise error(f"SELECT * is not supported, list the columns: {SELECT_LIST_HELP}")
    if type(target) is not exp.Column or not isinstance(target.this, exp.Identifier):
        raise error(f"expressions in the select list are not supported (found {describe(target)}): {SELECT_LIST_HELP}")
    return SelectItem(target, alias)


def _table_ref(node: exp.Expression, error: ErrorClass, form: str) -> TableRef:
    if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier):
        what = describe(node.this if isinstance(node, exp.Table) else node)
        raise error(f"only tables can be read, found {what}: {form}")
    for key, value in node.args.items():
        if key in ("this", "db", "catalog", "alias") or value in (None, False, [], ""):
            continue
        raise error(f"{_TABLE_PROBLEMS.get(key, f'{key.upper()} on a table is not supported')}: {form}")
    alias = node.args.get("alias")
    if alias is not None and alias.args.get("columns"):
        raise error(f"column aliases on a table (AS t(a, b)) are not supported: {form}")
    for part in ("db", "catalog"):
        value = node.args.get(part)
        if value is not None and not isinstance(value, exp.Identifier):
            raise error(f"the table name {snippet(node)} is not supported: {form}")
    return TableRef(node.name, node.text("db") or None, node.text("catalog") or None, node.alias or None)


def _join_condition(join: exp.Join, error: ErrorClass, form: str, left_joins: bool) -> tuple[exp.Expression, bool]:
    """The ON condition of an inner join (or, if `left_joins`, a LEFT [OUTER] JOIN), and
    whether the join is a left one."""
    side = (join.args.get("side") or "").upper()
    kind = (join.args.get("kind") or "").upper()
    method = (join.args.get("method") or "").upper()
    is_left = left_joins and side == "LEFT" and kind in ("", "OUTER")
    if is_left:
        join = join.copy()
        join.set("side", None)
        join.set("kind", None)
        side = kind = ""
    elif left_joins and (side or kind == "OUTER"):
        raise error(
            f"{side or kind} OUTER JOIN is not supported: inner joins and LEFT [OUTER] JOIN are, "
            f"which the warehouse maintains exactly (write a RIGHT JOIN as a LEFT JOIN with the tables swapped): {form}"
        )
    elif side or kind == "OUTER":
        raise error(f"outer joins ({side or kind} JOIN) are not supported, only inner joins: {form}")
    if method:
        raise error(f"{method} joins are not supported, only inner joins with ON: {form}")
    if kind == "CROSS":
        raise error(f"cross joins are not supported, join with JOIN ... ON condition: {form}")
    if kind not in ("", "INNER"):
        raise error(f"{kind} joins are not supported, only inner joins: {form}")
    if join.args.get("using"):
        raise error(f"JOIN ... USING is not supported, write JOIN ... ON t.a = u.a: {form}")
    for key, value in join.args.items():
        if key in ("this", "kind", "on") or value in (None, False, [], ""):
            continue
        raise error(f"{key.upper()} on a join is not supported: {form}")
    on = join.args.get("on")
    if on is None:
        raise error(
            f"cross joins (a join without ON, or FROM a, b) are not supported, join with JOIN ... ON condition: {form}"
        )
    return on, is_left


def exposed_name(table: exp.Table) -> str:
    """The name the agent exposes a table of a site query under: `schema.table` outside the default schema.

    >>> exposed_name(sqlglot.parse_one('SELECT 1 FROM "erp"."orders" AS "o"').find(exp.Table))
    'erp.orders'
    """
    return ".".join(part for part in (table.text("db"), table.name) if part)


def column_ref(alias: str, name: str) -> exp.Column:
    """`"alias"."name"` as a tree."""
    return exp.Column(this=exp.to_identifier(name, quoted=True), table=exp.to_identifier(alias, quoted=True))


def requalify(predicate: Node, resolve: Callable[[exp.Column], exp.Expression]) -> exp.Expression:
    """A copy of `predicate` with every column reference replaced by `resolve(column)`."""
    return predicate.transform(lambda node: resolve(node) if isinstance(node, exp.Column) else node)


def wrap_read_as(read_as: str, column: exp.Column, dialect: str) -> exp.Expression:
    """The adapter's `read_as` SQL (e.g. "CAST({col} AS TEXT)") around `column`.

    `read_as` comes from the adapter, not from the wire; the column is spliced in as a
    tree, so nothing from the request is ever parsed as part of it.
    """
    template = sqlglot.parse_one(read_as.replace("{col}", _READ_AS_SLOT), read=dialect)
    return template.transform(
        lambda node: column.copy() if isinstance(node, exp.Column) and node.name == _READ_AS_SLOT else node
    )


def build_select(
    items: Sequence[tuple[Node, str]],
    tables: Sequence[tuple[tuple[str, ...], str]],
    conditions: Sequence[Node | None],
    where: Node | None,
    group: Sequence[Node] | None = None,
) -> exp.Select:
    """A fresh SELECT tree from resolved pieces.

    Args:
        items: (expression, output name) per select item.
        tables: (the table's exact name as its parts, `TableInfo.path`, and its alias) per
            table occurrence, FROM first.
        conditions: ON predicate per table occurrence (the first is ignored).
        where: the WHERE predicate, or None.
        group: the GROUP BY columns of a grouped query, or None.
    """
    select = exp.Select(expressions=[exp.alias_(e, name, quoted=True) for e, name in items])
    first, *rest = tables
    select.set("from_", exp.From(this=_table(*first)))
    joins = [exp.Join(this=_table(*t), on=on) for t, on in zip(rest, conditions[1:])]
    if joins:
        select.set("joins", joins)
    if where is not None:
        select.set("where", exp.Where(this=where))
    if group:
        select.set("group", exp.Group(expressions=[g.copy() for g in group]))
    return select


def _table(path: tuple[str, ...], alias: str) -> exp.Table:
    *schema, name = path
    return exp.Table(
        this=exp.to_identifier(name, quoted=True),
        db=exp.to_identifier(schema[0], quoted=True) if schema else None,
        alias=exp.TableAlias(this=exp.to_identifier(alias, quoted=True)),
    )


def render(tree: exp.Expression, dialect: str) -> str:
    """SQL text of `tree` in `dialect`: every identifier quoted, no comments, nothing dropped.

    Division is marked as the dialect's own so that it is not rewritten with casts: a
    predicate means what it means in the database that evaluates it.
    """
    tree = tree.copy()  # the generator may rewrite nodes in place
    native = Dialect.get_or_raise(dialect)
    for div in tree.find_all(exp.Div):
        div.set("typed", native.TYPED_DIVISION)
        div.set("safe", native.SAFE_DIVISION)
    return tree.sql(dialect=dialect, identify=True, comments=False, unsupported_level=ErrorLevel.RAISE)
