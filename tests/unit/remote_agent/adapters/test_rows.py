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

from remote_agent.adapters.base import ColumnInfo
from remote_agent.adapters.convert import converter_for
from remote_agent.adapters.rows import RowConverter, _whole_column
from remote_agent.errors import SourceDataError
from remote_agent.protocol.types import LogicalType


class _Adapter:
    def converter(self, column: ColumnInfo):
        return converter_for(column.type)


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
    column = ColumnInfo("c", LogicalType.parse(kind), True, kind)
    expected = one_by_one(kind, values)
    converter = RowConverter(_Adapter(), [column])
    rows = [(v,) for v in values]
    if isinstance(expected, Exception):
        with pytest.raises((SourceDataError, pa.ArrowException, TypeError, ValueError, OverflowError)):
            converter.batch(rows, ["c"])
    else:
        got = converter.batch(rows, ["c"]).column(0)
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
