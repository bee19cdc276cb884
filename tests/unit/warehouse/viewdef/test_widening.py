"""Widening: a change called lossless keeps every value of the old type, exactly."""

from __future__ import annotations

import decimal
import itertools
import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from deltasieve_protocol.types import Column, LogicalType
from warehouse.viewdef import SiteQuery, ViewDef
from warehouse.viewdef.widening import type_changes, widens

#: Enough digits for any decimal(38,s) (the default context rounds to 28).
EXACT = decimal.Context(prec=60)
DECIMALS = [LogicalType("decimal", p, s) for p in (1, 5, 10, 14, 16, 18, 19, 38) for s in (0, 2, 4) if s <= p]


def _extremes(t: LogicalType) -> list:
    """The largest and smallest values of type `t` and a few in between."""
    if t.kind == "int":
        return [2**63 - 1, -(2**63), 0, 12345]
    rng = random.Random(t.precision * 100 + t.scale)
    units = [10**t.precision - 1, -(10**t.precision) + 1]
    units += [rng.randrange(-(10**t.precision) + 1, 10**t.precision) for _ in range(5)]
    return [decimal.Decimal(u).scaleb(-t.scale, EXACT) for u in units]


@pytest.mark.parametrize(("old", "new"), list(itertools.product([LogicalType("int"), *DECIMALS], repeat=2)))
def test_a_widening_keeps_every_value_and_anything_else_loses_one(old, new):
    if new.kind == "int" and old.kind == "int":
        return
    values = pa.array(_extremes(old), old.arrow())
    try:
        kept = pc.cast(values, new.arrow()).to_pylist() == values.to_pylist()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        kept = False
    if widens(old, new):
        assert kept, f"{old} -> {new} is called a widening but loses a value"
    elif old.kind == new.kind == "decimal":
        # every non-widening between decimals has a value it cannot hold: the largest, or one with more fraction digits
        assert not kept or new.scale < old.scale


def _view(*types: str) -> ViewDef:
    columns = [Column("id", LogicalType("int"))] + [Column(f"c{i}", LogicalType.parse(t)) for i, t in enumerate(types)]
    return ViewDef("SELECT ...", columns, ["id"], [SiteQuery("pg", "SELECT ...", columns, ["id"])])


def test_definitions_compared_column_by_column():
    changes = type_changes(_view("decimal(14,2)", "date"), _view("decimal(16,4)", "timestamp"))
    assert changes is not None and len(changes) == 4 and all(c.widened for c in changes)
    narrowed = type_changes(_view("decimal(14,2)"), _view("float"))
    assert narrowed is not None and [c.widened for c in narrowed] == [False, False]


def test_another_shape_is_no_widening():
    assert type_changes(_view("text"), _view("text", "int")) is None
    old, new = _view("text"), _view("text")
    assert type_changes(old, ViewDef(new.sql, new.columns, ["c0"], new.sites)) is None


@pytest.mark.parametrize("old", DECIMALS, ids=str)
def test_a_decimal_widens_to_text_and_its_text_reads_back_as_the_same_decimal(old):
    # PostgreSQL's unconstrained numeric, once decimal(38,10), is now read as its text
    assert widens(old, LogicalType("text"))
    assert not widens(LogicalType("text"), old)
    values = pa.array(_extremes(old), old.arrow())
    texts = pc.cast(values, pa.string()).to_pylist()  # what the widened copy stores (store/widened.py)
    assert [decimal.Decimal(t) for t in texts] == values.to_pylist()


def test_an_existing_decimal_38_10_column_seen_as_text_is_a_widening_taken_in_place():
    changes = type_changes(_view("decimal(38,10)", "int"), _view("text", "int"))
    assert changes is not None and [(c.column, str(c.new), c.widened) for c in changes] == [
        ("c0", "text", True),
        ("c0", "text", True),
    ]
    assert not any(c.widened for c in type_changes(_view("int"), _view("text")) or [])
