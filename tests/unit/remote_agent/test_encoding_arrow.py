"""The whole-array encoder against the value-by-value definition, on generated columns.

encode_rows encodes each column with Arrow compute and numpy (fast); the per-value
encoders are the definition (and what the test vectors check). Generated columns with
nulls, sliced arrays, chunked arrays and every Arrow type a column may arrive in must give
the same bytes both ways.
"""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deltasieve_protocol.encoding import (
    _encode_column,
    _encode_column_arrow,
    _encode_column_python,
    encode_rows,
    row_hashes,
)
from deltasieve_protocol.types import Column, LogicalType

INT64 = st.integers(-(2**63), 2**63 - 1)
FLOATS = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(
    [0.0, -0.0, math.nan, -math.nan, math.inf, 5e-324]
)
TEXT = st.text(max_size=12)
BYTES = st.binary(max_size=12)
DATES = st.dates(min_value=dt.date(1, 1, 1), max_value=dt.date(9999, 12, 31))
NAIVE = st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30))
AWARE = st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30), timezones=st.just(dt.UTC))

#: (logical type, Arrow type the column arrives in, value strategy)
CASES = [
    ("int", pa.int64(), INT64),
    ("int", pa.int32(), st.integers(-(2**31), 2**31 - 1)),
    ("int", pa.int16(), st.integers(-(2**15), 2**15 - 1)),
    ("float", pa.float64(), FLOATS),
    ("float", pa.float32(), st.floats(width=32)),
    ("text", pa.string(), TEXT),
    ("text", pa.large_string(), TEXT),
    ("bytes", pa.binary(), BYTES),
    ("bytes", pa.large_binary(), BYTES),
    ("bool", pa.bool_(), st.booleans()),
    ("date", pa.date32(), DATES),
    ("date", pa.date64(), DATES),
    ("timestamp", pa.timestamp("us"), NAIVE),
    ("timestamp", pa.timestamp("us", tz="UTC"), AWARE),
    ("timestamptz", pa.timestamp("us", tz="UTC"), AWARE),
    ("timestamptz", pa.timestamp("us"), NAIVE),
    (
        "decimal(4,2)",
        pa.decimal128(4, 2),
        st.decimals(min_value=-99, max_value=99, places=2, allow_nan=False, allow_infinity=False),
    ),
    (
        "decimal(18,0)",
        pa.decimal128(18, 0),
        st.decimals(min_value=-(10**18) + 1, max_value=10**18 - 1, places=0, allow_nan=False, allow_infinity=False),
    ),
    (
        "decimal(18,6)",
        pa.decimal128(18, 6),
        st.decimals(min_value=-(10**12) + 1, max_value=10**12 - 1, places=6, allow_nan=False, allow_infinity=False),
    ),
    (
        "decimal(38,10)",
        pa.decimal128(38, 10),
        st.decimals(min_value=-(10**20), max_value=10**20, places=10, allow_nan=False, allow_infinity=False),
    ),
]


@pytest.mark.parametrize("logical, arrow_type, values", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(data=st.data())
def test_arrow_path_equals_the_value_by_value_definition(logical, arrow_type, values, data):
    rows = data.draw(st.lists(st.none() | values, max_size=40))
    array = pa.array(rows, arrow_type)
    start = data.draw(st.integers(0, len(rows)))
    sliced = array.slice(start)  # a non-zero offset into the buffers
    type_ = LogicalType.parse(logical)
    for column in (array, sliced, pa.chunked_array([sliced, array])):
        assert _encode_column(type_, column).to_pylist() == _encode_column_python(type_, column)


def test_the_arrow_path_covers_the_types_the_sites_deliver():
    """Every Arrow type LogicalType.arrow() gives, except decimals over 18 digits, is encoded whole-array."""
    for kind in ("int", "float", "text", "bytes", "bool", "date", "timestamp", "timestamptz", "decimal(18,2)"):
        type_ = LogicalType.parse(kind)
        assert _encode_column_arrow(type_, pa.nulls(3, type_.arrow())) is not None, kind
    wide = LogicalType.parse("decimal(38,2)")
    assert _encode_column_arrow(wide, pa.array([Decimal("1.50")], wide.arrow())) is None


def test_rows_join_their_columns_and_hash_as_before():
    columns = [
        Column("k", LogicalType.parse("int")),
        Column("s", LogicalType.parse("text")),
        Column("d", LogicalType.parse("decimal(6,2)")),
    ]
    table = pa.table(
        {
            "k": pa.array([1, None, 3], pa.int64()),
            "s": ["a", "bc", None],
            "d": pa.array([Decimal("1.50"), None, Decimal("-0.00")], pa.decimal128(6, 2)),
        }
    )
    expected = [
        b"".join(parts) for parts in zip(*(_encode_column_python(c.type, table.column(c.name)) for c in columns))
    ]
    assert encode_rows(table, columns) == expected
    import xxhash

    assert row_hashes(table, columns, 9, 128) == [xxhash.xxh3_128_intdigest(row, 9) for row in expected]


@settings(max_examples=80, deadline=None, derandomize=True, database=None)
@given(data=st.data())
def test_rows_of_mixed_columns_equal_the_value_by_value_definition(data):
    """Rows are assembled from all their columns at once (fixed-width parts side by side,
    text and bytes joined in): NULLs anywhere, columns of every kind in any order, a batch
    sliced off a longer one."""
    cases = data.draw(st.lists(st.sampled_from(CASES), min_size=1, max_size=6))
    size = data.draw(st.integers(0, 30))
    start = data.draw(st.integers(0, 5))
    columns, arrays = [], []
    for i, (logical, arrow_type, values) in enumerate(cases):
        rows = data.draw(st.lists(st.none() | values, min_size=start + size, max_size=start + size))
        columns.append(Column(f"c{i}", LogicalType.parse(logical)))
        arrays.append(pa.array(rows, arrow_type))
    batch = pa.record_batch(arrays, names=[c.name for c in columns]).slice(start)
    expected = [
        b"".join(parts)
        for parts in zip(*(_encode_column_python(c.type, batch.column(c.name)) for c in columns), strict=True)
    ]
    assert encode_rows(batch, columns) == expected


@pytest.mark.parametrize("precision, scale", [(1, 0), (3, 1), (4, 0), (4, 2), (4, 4)])
def test_small_decimals_by_lookup_equal_the_definition_for_every_value(precision, scale):
    """Decimals of up to four digits are encoded by table lookup: every value of the type,
    and NULL, sliced off at an offset, as the definition has them."""
    bound = 10**precision - 1
    step = Decimal(1).scaleb(-scale)
    values = [None, *(i * step for i in range(-bound, bound + 1)), None]
    array = pa.array(values, pa.decimal128(precision, scale)).slice(1)
    type_ = LogicalType.parse(f"decimal({precision},{scale})")
    assert _encode_column(type_, array).to_pylist() == _encode_column_python(type_, array)


def test_a_decimal_wider_than_its_type_is_not_looked_up():
    """An unscaled value with more digits than the type's precision (Arrow does not check
    them) takes the computed path, which encodes it as the definition does."""
    wide = pa.array([Decimal("123.45"), None], pa.decimal128(9, 2))
    narrow = wide.view(pa.decimal128(4, 2))  # 12345: five digits under a four-digit type
    type_ = LogicalType.parse("decimal(4,2)")
    assert _encode_column(type_, narrow).to_pylist() == _encode_column_python(type_, narrow)
    assert _encode_column_python(type_, narrow)[0] == b"n\x00\x00\x00\x0812345e-2"
