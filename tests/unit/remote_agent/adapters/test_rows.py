"""RowConverter's whole-column shortcut against converting value by value.

Columns whose raw values already are canonical (ints, floats, text, bytes, dates, ISO
date text) are built by Arrow in one call; every other column goes value by value. Both
routes must give the same Arrow values, and a value that cannot be read must still fail
with the value-by-value error.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deltasieve_protocol.types import LogicalType
from remote_agent.adapters.base import ColumnInfo
from remote_agent.adapters.convert import converter_for
from remote_agent.adapters.postgres import PostgresAdapter
from remote_agent.adapters.rows import RowConverter, _whole_column
from remote_agent.adapters.sqlite import SqliteAdapter
from remote_agent.errors import SourceDataError


class _Adapter:
    """Every column value by value (no wire types)."""

    def converter(self, column: ColumnInfo):
        return converter_for(column.type)

    def wire_type(self, column: ColumnInfo):
        return None


class _SqliteWire(_Adapter):
    """SQLite's wire types, as its adapter declares them."""

    def wire_type(self, column: ColumnInfo):
        return SqliteAdapter.wire_type(None, column)


class _TypedWire(_Adapter):
    """A driver whose values follow the column's type (psycopg): the canonical Arrow type."""

    def wire_type(self, column: ColumnInfo):
        return PostgresAdapter.wire_type(None, column)


RAW = st.one_of(
    st.none(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True),
    st.booleans(),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.dates(),
    st.sampled_from(["2024-01-05", "0000-01-01", " 2024-01-05", "2024-02-30", "1", "0", "3.0", "true"]),
)
KINDS = ["int", "float", "text", "bytes", "date", "bool", "decimal(6,2)"]


def one_by_one(kind: str, values: list) -> pa.Array | Exception:
    convert = converter_for(LogicalType.parse(kind))
    try:
        return pa.array([convert(v) for v in values], LogicalType.parse(kind).arrow())
    except (ValueError, TypeError, ArithmeticError, pa.ArrowException) as exc:
        return exc


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(
    values=st.lists(RAW, min_size=1, max_size=6)
    | st.lists(
        st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.floats(), st.text(max_size=4), st.dates()),
        min_size=1,
        max_size=6,
    )
)
def test_whole_columns_equal_value_by_value(kind, values):
    assert_same_as_value_by_value(_Adapter(), kind, values)


def assert_same_as_value_by_value(adapter, kind: str, values: list) -> None:
    """RowConverter gives the Arrow values (or the failure) of converting one by one,
    the column alone and between two wired columns."""
    column = ColumnInfo("c", LogicalType.parse(kind), True, kind)
    expected = one_by_one(kind, values)
    converter = RowConverter(adapter, [column])
    check_batch(converter, [(v,) for v in values], expected, 0)
    around = [
        ColumnInfo("a", LogicalType.parse("int"), True, "int"),
        column,
        ColumnInfo("z", LogicalType.parse("text"), True, "text"),
    ]
    converter = RowConverter(adapter, around)
    check_batch(converter, [(i, v, "z") for i, v in enumerate(values)], expected, 1)


def check_batch(converter: RowConverter, rows: list[tuple], expected, position: int) -> None:
    if isinstance(expected, Exception):
        with pytest.raises((SourceDataError, pa.ArrowException, TypeError, ValueError, OverflowError)):
            converter.batch(rows, [converter.columns[0].name])
    else:
        got = converter.batch(rows, [converter.columns[0].name]).column(position)
        # NaN equals nothing in Arrow's equals(): compare the values, NaN matching NaN
        assert got.type == expected.type
        assert all(a == b or (a != a and b != b) for a, b in zip(got.to_pylist(), expected.to_pylist(), strict=True))


@pytest.mark.parametrize(
    "values, kind, taken",
    [
        ([1, None, 2], "int", True),
        ([1, True], "int", False),  # bool is not int: converted one by one
        ([1.5, 2], "float", False),
        (["2024-01-05", None], "date", True),
        (["0000-01-01"], "date", False),  # Arrow reads year 0, Python's dates do not
        ([dt.datetime(2024, 1, 5)], "date", False),
        (["a", b"b"], "text", False),
    ],
)
def test_which_columns_take_the_shortcut(values, kind, taken):
    assert (_whole_column(kind, values, LogicalType.parse(kind).arrow()) is not None) is taken


#: What Python's sqlite3 hands over, whatever a column's declared type.
SQLITE_RAW = st.one_of(
    st.none(),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-(2**54), 2**54),
    st.floats(allow_nan=True),
    st.floats(-1000, 1000).map(lambda f: round(f, 2)),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.sampled_from(["2024-01-05", "0000-01-01", "1", "0", "3.0", "12.345", "true", b"\xff", -0.0, 1.005, 99.99]),
)


@pytest.mark.parametrize("kind", KINDS + ["decimal(38,10)", "decimal(18,0)", "timestamp"])
@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(values=st.lists(SQLITE_RAW, min_size=1, max_size=6))
def test_sqlite_wire_types_equal_value_by_value(kind, values):
    assert_same_as_value_by_value(_SqliteWire(), kind, values)


#: Values of each column type as psycopg hands them over.
TYPED = {
    "int": st.integers(-(2**63), 2**63 - 1),
    "float": st.floats(allow_nan=True, width=64),
    "text": st.text(max_size=8),
    "bytes": st.binary(max_size=8),
    "bool": st.booleans(),
    "date": st.dates(),
    "decimal(6,2)": st.decimals(allow_nan=False, allow_infinity=False, places=3, min_value=-99999, max_value=99999),
    "timestamp": st.datetimes(),
    "timestamptz": st.datetimes(timezones=st.sampled_from([dt.UTC, dt.timezone(dt.timedelta(hours=-5, minutes=-30))])),
}


@pytest.mark.parametrize("kind", list(TYPED))
@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(data=st.data())
def test_typed_wire_types_equal_value_by_value(kind, data):
    values = data.draw(st.lists(st.none() | TYPED[kind], min_size=1, max_size=6))
    assert_same_as_value_by_value(_TypedWire(), kind, values)
