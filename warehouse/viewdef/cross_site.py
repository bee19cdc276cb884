"""Conditions across sites: what the warehouse may evaluate of a view's conditions itself.

A condition that reads tables of several sites runs in the warehouse, on Spark SQL over the
fragments (decomposition.py). Division, LIKE and comparisons of values of different kinds
mean different things in SQLite, PostgreSQL and Spark, so such a condition is checked here
when the view is defined, rather than found to differ at every sync.
"""

from __future__ import annotations

from sqlglot import exp

from deltasieve_protocol.sqlnodes import snippet
from warehouse.viewdef.bound import BoundView
from warehouse.viewdef.kinds import FAMILY
from warehouse.viewdef.model import ViewDefinitionError

#: What a condition across sites may contain, appended to its rejections.
CROSS_SITE_HELP = (
    "conditions across sites (tables of several sources, or of one source not joined there) "
    "run in the warehouse on Spark SQL and may use columns, literals, = <> != < <= > >= "
    "between values of the same kind (numbers, text, dates, ...), [NOT] BETWEEN, [NOT] IN, "
    "IS [NOT] NULL, AND/OR/NOT and + - * on numbers; division and LIKE are supported in "
    "conditions that read one site only, which run at the source"
)


_COMPARISONS = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE)


def check_cross_site(condition: exp.Expression, bound: BoundView) -> None:
    """Reject a condition across sites that Spark would evaluate differently from the sources.

    Spark runs it on the fragments: division (integer or not, by zero or not) and LIKE
    (case, escapes) differ between SQLite, PostgreSQL and Spark, and a comparison between
    values of different kinds fails in Spark's ANSI mode or casts differently, so those
    are refused here rather than at every sync.
    """

    def fail(problem: str) -> None:
        raise ViewDefinitionError(
            f"the condition {snippet(condition)} reads tables of several sites, so the warehouse evaluates it, where {problem}; {CROSS_SITE_HELP}"
        )

    def family(node: exp.Expression) -> str | None:
        """The kind of value `node` yields; None for NULL and string literals, which adapt."""
        if isinstance(node, exp.Paren):
            return family(node.this)
        if isinstance(node, exp.Column):
            return FAMILY[bound.type_of(node).kind]
        if isinstance(node, exp.Boolean):
            return "boolean"
        if isinstance(node, exp.Null) or (isinstance(node, exp.Literal) and node.is_string):
            return None
        if isinstance(node, exp.Literal):
            return "number"
        if isinstance(node, exp.Div):
            fail(f"division is not supported ({snippet(node)})")
        if isinstance(node, exp.Like):
            fail(f"LIKE is not supported ({snippet(node)})")
        if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Neg)):
            for operand in (node.this, node.args.get("expression")):
                kind = family(operand) if operand is not None else None
                if kind not in (None, "number"):
                    fail(f"arithmetic works on numbers only ({snippet(node)} uses a {kind} value)")
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
            fail(f"{snippet(node)} compares values of different kinds ({' and '.join(sorted(kinds))})")

    def truth(node: exp.Expression) -> None:
        kind = family(node)
        if kind not in (None, "boolean"):
            fail(f"{snippet(node)} is a {kind} value, not a condition")

    truth(condition)
