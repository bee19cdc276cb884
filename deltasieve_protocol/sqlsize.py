"""Bounds on how large and how deeply nested a query may be, checked around parsing.

sqlglot parses and renders recursively: a predicate nested some fifty parentheses deep
exhausts Python's stack. Both the service (a view's SQL) and the agent (a site query) read
SQL from outside, so both refuse what is too deep or too large with a clear message
instead of failing inside the parser. The bounds sit far above any view a person writes.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp
from sqlglot.tokens import Token, TokenType

from deltasieve_protocol.sqlnodes import Node

#: Deepest nesting of parentheses accepted (hand-written views rarely pass 5).
MAX_PARENTHESES = 24
#: Deepest expression nesting accepted (NOT NOT ... nests too); a chain of one binary
#: operator (a + b + c, x AND y AND z) counts as one level, as sqlglot walks it in a loop.
MAX_DEPTH = 48
#: Most expression nodes accepted in one query (a 1,000-item IN list is about 1,000).
MAX_NODES = 20_000
#: Longest SQL text accepted, in characters.
MAX_CHARS = 200_000


def parenthesis_depth(tokens: list[Token]) -> int:
    """The deepest nesting of parentheses among `tokens` (a parenthesis in a string literal
    or quoted name is no token of its own, so it does not count).

    >>> import sqlglot
    >>> parenthesis_depth(sqlglot.tokenize("SELECT a FROM t WHERE ((a = 1) OR (a = ')('))"))
    2
    """
    depth = deepest = 0
    for token in tokens:
        if token.token_type == TokenType.L_PAREN:
            depth += 1
            deepest = max(deepest, depth)
        elif token.token_type == TokenType.R_PAREN:
            depth -= 1
    return deepest


def shape(tree: Node) -> tuple[int, int]:
    """The nesting depth and node count of `tree`, walked without recursion.

    >>> import sqlglot
    >>> shape(sqlglot.parse_one("NOT NOT a"))  # Not, Not, Column, Identifier
    (4, 4)
    >>> shape(sqlglot.parse_one("a + b + c + d"))  # the chain of Add is one level
    (3, 11)
    """
    deepest = nodes = 0
    stack: list[tuple[Node, int]] = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        nodes += 1
        deepest = max(deepest, depth)
        for child in node.iter_expressions():
            chained = isinstance(node, exp.Binary) and type(child) is type(node)
            stack.append((child, depth if chained else depth + 1))
    return deepest, nodes


def check_text(sql: str, tokens: list[Token], error: Callable[[str], Exception]) -> None:
    """Raise `error` when `sql` is too long or its parentheses (`tokens`) nest too deeply to parse safely."""
    if len(sql) > MAX_CHARS:
        raise error(f"the SQL is {len(sql):,} characters long, more than the {MAX_CHARS:,} accepted")
    depth = parenthesis_depth(tokens)
    if depth > MAX_PARENTHESES:
        raise error(f"parentheses nest {depth} deep, more than the {MAX_PARENTHESES} accepted")


def check_tree(tree: Node, error: Callable[[str], Exception]) -> None:
    """Raise `error` when the parsed `tree` is too deep or too large to check and render safely."""
    depth, nodes = shape(tree)
    if depth > MAX_DEPTH:
        raise error(f"the expression nests {depth} levels deep, more than the {MAX_DEPTH} accepted")
    if nodes > MAX_NODES:
        raise error(f"the query has {nodes:,} expression nodes, more than the {MAX_NODES:,} accepted")
