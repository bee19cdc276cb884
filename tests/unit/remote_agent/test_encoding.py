"""encoding.py against the test vectors, which are computed independently of it."""

from __future__ import annotations

import pyarrow as pa
import pytest
import xxhash

from deltasieve_protocol.encoding import (
    canonical_decimal,
    combine,
    encode_rows,
    encode_value,
    hash_from_bytes,
    row_hashes,
)
from deltasieve_protocol.types import Column, LogicalType
from tests.support.vectors import SEED, VECTORS, arrow_column, value


@pytest.mark.parametrize("case", VECTORS["values"], ids=lambda c: f"{c['type']}:{c['value']!r}")
def test_value_encodings(case):
    assert encode_value(LogicalType.parse(case["type"]), value(case["type"], case["value"])).hex() == case["encoding"]


@pytest.mark.parametrize("case", VECTORS["values"], ids=lambda c: f"{c['type']}:{c['value']!r}")
def test_value_encodings_through_arrow(case):
    table = pa.table({"v": arrow_column(case["type"], [case["value"]])})
    assert encode_rows(table, [Column("v", LogicalType.parse(case["type"]))])[0].hex() == case["encoding"]


@pytest.mark.parametrize("case", VECTORS["rows"], ids=lambda c: ",".join(c["types"]))
def test_row_encodings_and_hashes(case):
    columns = [Column(f"c{i}", LogicalType.parse(t)) for i, t in enumerate(case["types"])]
    table = pa.table({c.name: arrow_column(t, [v]) for c, t, v in zip(columns, case["types"], case["values"])})
    assert encode_rows(table, columns)[0].hex() == case["encoding"]
    assert row_hashes(table, columns, SEED, 128)[0] == int(case["xxh3_128"], 16)
    assert row_hashes(table, columns, SEED, 64)[0] == int(case["xxh3_64"], 16)


def test_same_logical_row_same_bytes_and_length_prefixes_separate_fields():
    rows = VECTORS["rows"]
    assert rows[0]["encoding"] == rows[1]["encoding"]  # 12.50 and 12.5
    assert rows[4]["encoding"] != rows[5]["encoding"]  # ("ab", "c") vs ("a", "bc")


def test_group_hash_is_the_sum_of_row_hashes_and_subtracts():
    group = VECTORS["groups"][0]
    hashes = [int(VECTORS["rows"][i]["xxh3_128"], 16) for i in group["rows"]]
    assert combine(hashes) == int(group["hash"], 16)
    # Removing a row's hash leaves the hash of the rest: what regrouping relies on.
    assert combine([combine(hashes) - hashes[0]]) == combine(hashes[1:])
    assert hash_from_bytes(bytes.fromhex(group["hash"])) == combine(hashes)


def test_seed_changes_every_hash():
    data = bytes.fromhex(VECTORS["rows"][0]["encoding"])
    assert xxhash.xxh3_128_intdigest(data, SEED) != xxhash.xxh3_128_intdigest(data, SEED + 1)


def test_canonical_decimal_forms():
    from decimal import Decimal

    assert canonical_decimal(Decimal("0.000")) == "0"
    assert canonical_decimal(Decimal("-1.2300")) == "-123e-2"
    assert canonical_decimal(Decimal("1E+3")) == "1e3"
