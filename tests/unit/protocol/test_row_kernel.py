"""The compiled row encoding (row_kernel.py) against its definition.

`encoded_rows` and `row_fingerprints` run compiled; `reference_encoded_rows` (NumPy and
Arrow, value by value where it must) and `reference_row_fingerprints` (the xxhash package,
row by row) are what they must match bit for bit: on generated batches of every logical
type, in every Arrow type a column may arrive in, with NULLs anywhere, sliced and chunked;
and on the test vectors of openapi/row-encoding-vectors.json.
"""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from deltasieve_protocol.encoding import encoded_rows, reference_encoded_rows
from deltasieve_protocol.fingerprints import reference_row_fingerprints, row_fingerprints
from deltasieve_protocol.types import Column, LogicalType
from tests.support.vectors import SEED, VECTORS, arrow_column

#: each test twice: the ahead-of-time kernels the agent loads, and numba's JIT of the same source
pytestmark = pytest.mark.usefixtures("kernels")

SEEDS = st.integers(0, 2**64 - 1)
MIN_INT64, MAX_INT64 = -(2**63), 2**63 - 1
NAIVE = st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30))
AWARE = st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30), timezones=st.just(dt.UTC))


def _decimals(precision: int, scale: int) -> st.SearchStrategy:
    """Decimals of the type; its largest and smallest, its least step and zero more often than by chance."""
    # built from digits and negated by copy_negate: arithmetic would round them to 28 digits
    bound, step = Decimal((0, (9,) * precision, -scale)), Decimal((0, (1,), -scale))
    exact = st.decimals(
        min_value=bound.copy_negate(), max_value=bound, places=scale, allow_nan=False, allow_infinity=False
    )
    return exact | st.sampled_from([bound, bound.copy_negate(), step, step.copy_negate(), Decimal((0, (0,), -scale))])


#: (logical type, Arrow type the column arrives in, its values). The decimals wider than 18
#: digits, and timestamps in another unit, take the path the kernel copies verbatim.
COLUMN_TYPES = [
    ("int", pa.int64(), st.integers(MIN_INT64, MAX_INT64) | st.sampled_from([MIN_INT64, MAX_INT64, 0, -1])),
    ("int", pa.int32(), st.integers(-(2**31), 2**31 - 1)),
    ("int", pa.uint8(), st.integers(0, 255)),
    (
        "float",
        pa.float64(),
        st.floats() | st.sampled_from([0.0, -0.0, math.nan, -math.nan, math.inf, -math.inf, 5e-324]),
    ),
    ("float", pa.float32(), st.floats(width=32)),
    ("decimal(1,0)", pa.decimal128(1, 0), _decimals(1, 0)),
    ("decimal(4,2)", pa.decimal128(4, 2), _decimals(4, 2)),
    ("decimal(9,9)", pa.decimal128(9, 9), _decimals(9, 9)),
    ("decimal(10,2)", pa.decimal128(10, 2), _decimals(10, 2)),
    ("decimal(18,0)", pa.decimal128(18, 0), _decimals(18, 0)),
    ("decimal(18,6)", pa.decimal128(18, 6), _decimals(18, 6)),
    ("decimal(19,3)", pa.decimal128(19, 3), _decimals(19, 3)),
    ("decimal(38,10)", pa.decimal128(38, 10), _decimals(38, 10)),
    ("decimal(38,0)", pa.decimal128(38, 0), _decimals(38, 0)),
    ("text", pa.string(), st.text(max_size=40) | st.sampled_from(["", "é", "é", "日本語", "🚀✨"])),
    ("text", pa.large_string(), st.text(max_size=12)),
    ("bytes", pa.binary(), st.binary(max_size=300)),
    ("bytes", pa.large_binary(), st.binary(max_size=12)),
    ("bool", pa.bool_(), st.booleans()),
    ("date", pa.date32(), st.dates()),
    ("date", pa.date64(), st.dates()),
    ("timestamp", pa.timestamp("us"), NAIVE),
    ("timestamp", pa.timestamp("ns"), st.datetimes(dt.datetime(1700, 1, 1), dt.datetime(2200, 1, 1))),
    ("timestamptz", pa.timestamp("us", tz="UTC"), AWARE),
    ("timestamptz", pa.timestamp("us"), NAIVE),
]


@st.composite
def batches(draw: st.DrawFn) -> tuple[pa.Table, list[Column]]:
    """A table of up to 8 columns of the matrix and up to 20 rows, NULLs anywhere; sliced
    (Arrow offsets) or cut into two chunks, and its columns named in another order."""
    rows = draw(st.integers(0, 20))
    picked = draw(st.lists(st.integers(0, len(COLUMN_TYPES) - 1), min_size=1, max_size=8))
    columns, arrays = [], {}
    for i, index in enumerate(picked):
        logical, arrow_type, values = COLUMN_TYPES[index]
        arrays[f"c{i}"] = pa.array(draw(st.lists(st.none() | values, min_size=rows, max_size=rows)), arrow_type)
        columns.append(Column(f"c{i}", LogicalType.parse(logical)))
    table = pa.table(arrays)
    cut = draw(st.integers(0, rows))
    if draw(st.booleans()):
        table = table.slice(cut)
    else:
        table = pa.concat_tables([table.slice(0, cut), table.slice(cut)])
    return table, draw(st.permutations(columns))


@settings(max_examples=150, deadline=None)
@given(batches(), SEEDS)
def test_compiled_rows_and_fingerprints_are_the_reference_ones(batch, seed):
    table, columns = batch
    got = encoded_rows(table, columns)
    assert got.type == pa.binary()
    assert got.to_pylist() == reference_encoded_rows(table, columns).to_pylist()
    assert row_fingerprints(table, columns, seed).tolist() == reference_row_fingerprints(table, columns, seed).tolist()


@st.composite
def wide_batches(draw: st.DrawFn) -> tuple[pa.RecordBatch, list[Column]]:
    """A record batch (what the agent's scan hands over) with a column of every type of the
    matrix and up to 1000 rows, each column's drawn from a few values and NULL."""
    rows = draw(st.integers(0, 1000))
    rng = np.random.default_rng(draw(st.integers(0, 2**32)))
    columns = [Column(f"c{i}", LogicalType.parse(logical)) for i, (logical, _, _) in enumerate(COLUMN_TYPES)]
    arrays = {}
    for column, (_, arrow_type, values) in zip(columns, COLUMN_TYPES):
        pool = draw(st.lists(values, min_size=1, max_size=4)) + [None]
        arrays[column.name] = pa.array([pool[i] for i in rng.integers(0, len(pool), rows)], arrow_type)
    return pa.record_batch(arrays), columns


@settings(max_examples=10, deadline=None)
@given(wide_batches(), SEEDS)
def test_wide_record_batches(batch, seed):
    batch, columns = batch
    assert encoded_rows(batch, columns).to_pylist() == reference_encoded_rows(batch, columns).to_pylist()
    assert row_fingerprints(batch, columns, seed).tolist() == reference_row_fingerprints(batch, columns, seed).tolist()


def test_zero_rows_and_zero_columns():
    table = pa.table({"a": pa.array([], pa.int64())})
    a = [Column("a", LogicalType("int"))]
    assert encoded_rows(table, a).to_pylist() == []
    assert row_fingerprints(table, a, 1).dtype == np.uint64 and len(row_fingerprints(table, a, 1)) == 0
    three = pa.table({"a": [1, 2, 3]})
    assert encoded_rows(three, []).to_pylist() == [b""] * 3
    assert row_fingerprints(three, [], 9).tolist() == [xxhash.xxh3_64_intdigest(b"", 9)] * 3


@pytest.mark.parametrize("case", VECTORS["values"], ids=lambda c: f"{c['type']}:{c['value']!r}")
def test_value_vectors(case):
    table = pa.table({"v": arrow_column(case["type"], [case["value"]])})
    assert encoded_rows(table, [Column("v", LogicalType.parse(case["type"]))])[0].as_py().hex() == case["encoding"]


@pytest.mark.parametrize("case", VECTORS["rows"], ids=lambda c: ",".join(c["types"]))
def test_row_vectors(case):
    columns = [Column(f"c{i}", LogicalType.parse(t)) for i, t in enumerate(case["types"])]
    table = pa.table({c.name: arrow_column(t, [v]) for c, t, v in zip(columns, case["types"], case["values"])})
    assert encoded_rows(table, columns)[0].as_py().hex() == case["encoding"]
    assert row_fingerprints(table, columns, SEED).tolist() == [int(case["xxh3_64"], 16)]
