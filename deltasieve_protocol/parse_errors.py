"""sqlglot's parse errors retold in the terms of the SQL the user wrote.

sqlglot describes a failed parse by its own classes ("Required keyword: 'this' missing for
<class 'sqlglot.expressions.query.Where'>"); a user who wrote `... WHERE` with nothing
after it should read that the WHERE clause has no condition.
"""

from __future__ import annotations

import re

#: What an incomplete construct is called, by sqlglot class name.
_INCOMPLETE = {
    "Where": "the WHERE clause has no condition",
    "Order": "ORDER BY names nothing to order by",
    "Group": "GROUP BY names no columns",
    "Between": "BETWEEN needs both bounds (x BETWEEN low AND high)",
    "Join": "a JOIN names no table",
    "Alias": "AS gives no name",
    "Cast": "CAST names no type (CAST(x AS type))",
    "In": "IN has no list",
}
#: Binary operators, as written in SQL.
_OPERATORS = {
    "EQ": "=", "NEQ": "<>", "GT": ">", "GTE": ">=", "LT": "<", "LTE": "<=",
    "Add": "+", "Sub": "-", "Mul": "*", "Div": "/", "Mod": "%",
    "And": "AND", "Or": "OR", "Like": "LIKE", "ILike": "ILIKE", "Is": "IS", "DPipe": "||",
}  # fmt: skip
_REQUIRED = re.compile(r"Required keyword: '(\w+)' missing for <class '[\w.]*?(\w+)'>")
_TOKEN = re.compile(r"<Token token_type: TokenType\.(\w+), text: (.*?), line: \d+, col: \d+[^>]*>")
_CLASS = re.compile(r"<class '[\w.]*?(\w+)'>")


def in_user_terms(description: str, highlight: str | None = None) -> str:
    """`description` of a parse error (and the text it points at) said without sqlglot's names.

    >>> in_user_terms("Required keyword: 'this' missing for <class 'sqlglot.expressions.query.Where'>")
    'the WHERE clause has no condition'
    >>> in_user_terms("Required keyword: 'expression' missing for <class 'sqlglot.expressions.core.EQ'>")
    'the operator = has nothing on its right'
    >>> in_user_terms("Expected table name but got <Token token_type: TokenType.SENTINEL, text: SENTINEL, line: 1, col: 1, start: 0, end: 0, comments: []>")
    'expected table name but the SQL ends'
    >>> in_user_terms("Invalid expression / Unexpected token", "SELEC")
    "unexpected text 'SELEC'"
    """
    required = _REQUIRED.fullmatch(description.strip())
    if required:
        part, name = required.groups()
        if name in _OPERATORS:
            side = "right" if part == "expression" else "left"
            return f"the operator {_OPERATORS[name]} has nothing on its {side}"
        return _INCOMPLETE.get(name, f"an incomplete {name.upper()} expression")
    if description.startswith("Invalid expression / Unexpected token"):
        return f"unexpected text {highlight!r}" if highlight else "unexpected text"

    def token(found: re.Match) -> str:
        kind, text = found.groups()
        return "the SQL ends" if kind == "SENTINEL" else repr(text)

    text = _TOKEN.sub(lambda m: token(m), description)
    text = re.sub(r"but got the SQL ends", "but the SQL ends", text)
    text = _CLASS.sub(lambda m: m.group(1).upper(), text)
    return text[:1].lower() + text[1:]
