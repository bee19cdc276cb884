"""Bounds on query size and nesting: refused with a message, never a parser's crash."""

from __future__ import annotations

import pytest

from deltasieve_protocol import sitesql, sqlsize

FORM = "a view is SELECT ..."


def parse(where: str):
    return sitesql.parse_select(f"SELECT t.id FROM s.t WHERE {where}", None, ValueError, FORM)


def test_the_deepest_accepted_parentheses_parse():
    depth = sqlsize.MAX_PARENTHESES
    assert parse("(" * depth + "t.id = 1" + ")" * depth).where is not None


@pytest.mark.parametrize(
    "where, words",
    [
        ("(" * (sqlsize.MAX_PARENTHESES + 1) + "t.id = 1" + ")" * (sqlsize.MAX_PARENTHESES + 1), "parentheses nest"),
        ("(" * 5000 + "t.id = 1" + ")" * 5000, "parentheses nest 5000 deep"),
        ("NOT " * 60 + "t.id = 1", "nests 65 levels deep"),
        ("NOT " * 3000 + "t.id = 1", "nests too deeply"),
        ("t.id IN (" + ", ".join(["1"] * 30_000) + ")", "expression nodes"),
        ("t.name = '" + "x" * sqlsize.MAX_CHARS + "'", "characters long"),
    ],
    ids=["parentheses", "parentheses-5000", "not-chain", "not-chain-3000", "nodes", "chars"],
)
def test_too_deep_or_too_large_is_refused_by_name(where, words):
    with pytest.raises(ValueError, match=words):
        parse(where)


def test_a_long_chain_of_one_operator_is_one_level():
    parts = parse(" OR ".join(f"t.id = {i}" for i in range(3000)))
    assert parts.where is not None
