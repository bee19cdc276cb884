"""The grouped form of a site query: how a view over tables without a key is read.

The warehouse writes it (viewdef/grouped_site.py) and the agent alone accepts it, never as
a view's own SQL: each distinct row once with the number of its occurrences, NULL read as a
literal beside a flag so that every key column is non-NULL (see sitesql.py, which parses it
with the plain form, for the whole grammar).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeGuard

from sqlglot import exp

from deltasieve_protocol.sqlnodes import Node, describe, is_literal, snippet

#: Output names of the columns a grouped site query adds start with this (sitenames.py
#: reserves every other name starting with '__').
MULTISET_PREFIX = "__ds_"
#: The output column of a grouped site query holding how often its row occurs.
COUNT_COLUMN = MULTISET_PREFIX + "count"
#: Select items of a grouped site query: a column, a column with NULL replaced, its NULL flag, the count.
COLUMN, COALESCED, NULL_FLAG, COUNT = "column", "coalesced", "null_flag", "count"
GROUPED_HELP = (
    "a grouped site query selects columns, COALESCE(column, literal), column IS NULL and one COUNT(*), "
    "each expression aliased, and groups by exactly the columns it selects"
)


def null_flag(name: str) -> str:
    """The output name of the NULL flag of a grouped site query's column `name`.

    >>> null_flag("city")
    '__ds_null_city'
    """
    return f"{MULTISET_PREFIX}null_{name}"


def unaliased(node: exp.Expression) -> exp.Expression:
    return node.this if isinstance(node, exp.Alias) else node


def is_count_star(node: exp.Expression) -> bool:
    return type(node) is exp.Count and isinstance(node.this, exp.Star) and not node.args.get("distinct")


def is_plain_column(node: Node | None) -> TypeGuard[exp.Column]:
    return type(node) is exp.Column and isinstance(node.this, exp.Identifier)


def grouped_item(target: exp.Expression, alias: str | None, error: Callable[[str], Exception]):
    """(kind, column, filler) of a grouped query's select item that is an expression (COUNT
    has no column), or None for a plain column."""

    kind: str | None = None
    column = filler = None
    if is_count_star(target):
        kind = COUNT
    elif type(target) is exp.Coalesce and len(target.expressions) == 1 and is_plain_column(target.this):
        filler = target.expressions[0]
        if not is_literal(filler) or type(filler) is exp.Null:
            raise error(
                f"COALESCE in a grouped site query takes a column and a literal, not {snippet(filler)}: {GROUPED_HELP}"
            )
        kind, column = COALESCED, target.this
    elif type(target) is exp.Is and type(target.expression) is exp.Null and is_plain_column(target.this):
        kind, column = NULL_FLAG, target.this
    if kind is None:
        return None
    if not alias:
        raise error(f"{snippet(target)} needs an alias: {GROUPED_HELP}")
    return kind, column, filler


def group_columns(nodes: list[Node], kinds: list[str], error: Callable[[str], Exception]) -> list[exp.Column]:
    """The GROUP BY entries, each a plain column, of a query whose select items are of `kinds`
    (COUNT(*) among them exactly once)."""

    columns = []
    for node in nodes:
        if not is_plain_column(node):
            raise error(f"GROUP BY {describe(node)} is not supported: {GROUPED_HELP}")
        columns.append(node)
    if kinds.count(COUNT) != 1:
        raise error(f"a grouped site query selects COUNT(*) exactly once: {GROUPED_HELP}")
    return columns
