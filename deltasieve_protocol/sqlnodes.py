"""How error messages name pieces of SQL: short renderings and the user's names for constructs.

Shared by the site-query grammar (sitesql.py) and its grouped form (grouped.py), and by the
warehouse's checks of view conditions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp
from sqlglot.errors import SqlglotError

if TYPE_CHECKING:
    from sqlglot.expressions import Expr as Node
else:
    #: Any node of a sqlglot tree. sqlglot 30 roots its tree at Expr, and abstract kinds
    #: (Condition, Func, AggFunc, Query) derive from Expr only; before 30 the root is Expression.
    Node = getattr(exp, "Expr", exp.Expression)

#: Longest rendering of an expression quoted in an error message.
_SNIPPET_CHARS = 80
#: Operators named the way a user would say them.
_OPERATOR_NAMES: dict[type[Node], str] = {
    exp.ILike: "ILIKE",
    exp.Escape: "LIKE ... ESCAPE",
    exp.Mod: "the % operator",
    exp.NullSafeEQ: "IS NOT DISTINCT FROM",
    exp.NullSafeNEQ: "IS DISTINCT FROM",
    exp.SimilarTo: "SIMILAR TO",
    exp.RegexpLike: "regular expression matching",
    exp.Distinct: "DISTINCT",
}


def snippet(node: Node) -> str:
    """A short rendering of `node` for error messages."""
    try:
        text = node.sql(comments=False)
    except SqlglotError:
        text = type(node).__name__
    return text if len(text) <= _SNIPPET_CHARS else text[: _SNIPPET_CHARS - 3] + "..."


def describe(node: Node) -> str:
    """Name the construct `node` stands for, the way a user would call it.

    >>> import sqlglot
    >>> describe(sqlglot.parse_one("SELECT pg_sleep(1)").expressions[0])
    'function call pg_sleep(...)'
    >>> describe(sqlglot.parse_one("SELECT CAST(x AS INT)").expressions[0])
    'a cast (CAST(x AS INT))'
    """
    if isinstance(node, exp.Window):
        return f"a window function ({snippet(node)})"
    if isinstance(node, exp.AggFunc):
        return f"an aggregate ({snippet(node)})"
    if isinstance(node, (exp.Cast, exp.TryCast)):
        return f"a cast ({snippet(node)})"
    if isinstance(node, exp.Case):
        return "a CASE expression"
    if isinstance(node, (exp.Query, exp.Subquery, exp.Exists)):
        return "a subquery"
    if isinstance(node, (exp.Placeholder, exp.Parameter)):
        return f"a query parameter ({snippet(node)})"
    if isinstance(node, exp.Star):
        return "*"
    if isinstance(node, exp.Column):
        return f"the column reference {snippet(node)}"
    if isinstance(node, (exp.Concat, exp.DPipe)):
        return "string concatenation"
    if isinstance(node, exp.Anonymous):
        return f"function call {node.name}(...)"
    if isinstance(node, exp.Func):
        return f"function call {node.sql_name().lower()}(...)"
    if isinstance(node, exp.Literal) or type(node).__name__.endswith("String"):
        return f"the literal {snippet(node)}"
    named = _OPERATOR_NAMES.get(type(node))
    if named:
        return f"{named} ({snippet(node)})"
    return snippet(node)


def is_literal(node: exp.Expression) -> bool:
    """Whether `node` is a literal (a negative number counts).

    >>> import sqlglot
    >>> is_literal(sqlglot.parse_one("-3")), is_literal(sqlglot.parse_one("x"))
    (True, False)
    """
    if type(node) in (exp.Literal, exp.Boolean, exp.Null):
        return True
    return type(node) is exp.Neg and type(node.this) is exp.Literal and not node.this.is_string
