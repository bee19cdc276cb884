"""Kinds of values in a view's conditions: a comparison of unlike kinds is refused at definition.

A condition that compares a text column with a number (or a number column with the text
'high') is accepted by one database, refused by another at run time (PostgreSQL: "operator
does not exist: text = integer") and converted by a third. Found when the view is defined,
it is a 422 naming the comparison; found at the first sync, it would be a failed sync.
A string literal adapts to text, dates and timestamps, and to numbers where it reads as one.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from sqlglot import exp

from deltasieve_protocol.sqlnodes import snippet
from warehouse.viewdef.bound import BoundView

#: The kind of value each logical type holds, for comparisons.
FAMILY = {
    "int": "number",
    "float": "number",
    "decimal": "number",
    "text": "text",
    "bytes": "bytes",
    "bool": "boolean",
    "date": "date",
    "timestamp": "timestamp",
    "timestamptz": "timestamp",
}
#: Kinds a source compares with each other (a date with a timestamp, at midnight).
_ALIKE = {"date": "time", "timestamp": "time"}
#: What a string literal may stand for ('2024-01-31', 'true').
_STRING_ADAPTS_TO = {"text", "time", "boolean"}
_NUMBER = re.compile(r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$")
_COMPARISONS = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE)
HELP = "compare a column with a column or a literal of the same kind (numbers, text, dates and timestamps, booleans)"


def kind_of(node: exp.Expression, column_kind: Callable[[exp.Column], str]) -> str | None:
    """The kind of value `node` yields in a comparison: "number", "text", "time", "boolean",
    "bytes", "string" for a string literal (which adapts), or None when it cannot be told.

    >>> import sqlglot
    >>> [kind_of(sqlglot.parse_one(s), lambda c: "text") for s in ("5", "'x'", "c", "NULL", "c + 1", "TRUE")]
    ['number', 'string', 'text', None, 'number', 'boolean']
    """
    if isinstance(node, exp.Paren):
        return kind_of(node.this, column_kind)
    if isinstance(node, exp.Column):
        kind = column_kind(node)
        return _ALIKE.get(kind, kind)
    if isinstance(node, exp.Boolean):
        return "boolean"
    if isinstance(node, exp.Literal):
        return "string" if node.is_string else "number"
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Neg)):
        return "number"
    return None


def clash(left: str | None, right: str | None, literal: exp.Expression | None = None) -> str | None:
    """Why two kinds cannot be compared, or None when they can.

    >>> clash("number", "text"), clash("time", "string"), clash("number", "string")
    ('number and text', None, 'number and text')
    >>> import sqlglot
    >>> clash("number", "string", sqlglot.parse_one("'12.5'")) is None
    True
    >>> clash("boolean", "number", sqlglot.parse_one("1")) is None, clash("boolean", "number", sqlglot.parse_one("2"))
    (True, 'boolean and number')
    """
    if left is None or right is None or left == right:
        return None
    if {left, right} == {"boolean", "number"} and literal is not None and literal.name in ("0", "1"):
        return None  # a flag written 0 or 1, as SQLite and MySQL store booleans
    if "string" in (left, right):
        other = right if left == "string" else left
        if other in _STRING_ADAPTS_TO:
            return None
        if other == "number" and literal is not None and _NUMBER.match(literal.name):
            return None
        return f"{other} and text"
    return " and ".join(sorted((left, right)))


def check_kinds(bound: BoundView, error: Callable[[str], Exception]) -> None:
    """Raise `error` for the first comparison in the view's WHERE or ON conditions between
    values of unlike kinds."""

    def column_kind(column: exp.Column) -> str:
        return FAMILY[bound.type_of(column).kind]

    for condition in [bound.where, *bound.conditions]:
        if condition is None:
            continue
        for node in condition.walk():
            if isinstance(node, _COMPARISONS):
                operands = [node.this, node.expression]
            elif isinstance(node, exp.Between):
                operands = [node.this, node.args["low"], node.args["high"]]
            elif isinstance(node, exp.In):
                operands = [node.this, *node.expressions]
            else:
                continue
            first = operands[0]
            for other in operands[1:]:
                literal = next((o for o in (first, other) if isinstance(o, exp.Literal)), None)
                problem = clash(kind_of(first, column_kind), kind_of(other, column_kind), literal)
                if problem:
                    raise error(f"{snippet(as_written(node))} compares values of different kinds ({problem}): {HELP}")


def as_written(node: exp.Expression) -> exp.Expression:
    """`node` with its names quoted only where they must be, as a user writes them.

    >>> import sqlglot
    >>> as_written(sqlglot.parse_one('"p"."name" = 5')).sql()
    'p.name = 5'
    """
    return node.copy().transform(lambda n: exp.to_identifier(n.name) if isinstance(n, exp.Identifier) else n)
