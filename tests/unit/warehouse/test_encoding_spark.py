"""Rows read by Spark from Parquet hash as the vectors say (the warehouse's path)."""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import xxhash

from remote_agent.protocol.types import Column, LogicalType
from tests.support.vectors import SEED, VECTORS, arrow_column
from warehouse.hashing import spark_row_hashes
from warehouse.spark import build_session
from warehouse.strategies.base import spark_schema


@pytest.fixture(scope="module")
def spark():
    return build_session("local[2]")


def test_every_value_hashes_as_its_vector(spark, tmp_path):
    by_type = defaultdict(list)
    for case in VECTORS["values"]:
        by_type[case["type"]].append(case)
    for type_, cases in by_type.items():
        column = Column("v", LogicalType.parse(type_))
        path = tmp_path / f"{type_}.parquet"
        pq.write_table(
            pa.table(
                {"i": pa.array(range(len(cases)), pa.int64()), "v": arrow_column(type_, [c["value"] for c in cases])}
            ),
            path,
        )
        df = spark.read.schema(f"i bigint, {spark_schema([column])}").parquet(str(path))
        hashed = spark_row_hashes(
            df.withColumnRenamed("i", "k").select("k", "v"), [Column("k", LogicalType("int")), column], ["k"], SEED, 128
        ).collect()
        for row in hashed:
            case = cases[row["k"]]
            expected = xxhash.xxh3_128_intdigest(
                bytes.fromhex("69" + row["k"].to_bytes(8, "big", signed=True).hex() + case["encoding"]), SEED
            )
            assert int.from_bytes(row["__rh"], "big") == expected, (type_, case["value"])


@pytest.mark.parametrize("bits, field", [(128, "xxh3_128"), (64, "xxh3_64")])
def test_whole_rows_hash_as_their_vectors(spark, tmp_path, bits, field):
    for n, case in enumerate(VECTORS["rows"]):
        columns = [Column(f"c{i}", LogicalType.parse(t)) for i, t in enumerate(case["types"])]
        path = tmp_path / f"row{n}-{bits}.parquet"
        pq.write_table(
            pa.table({c.name: arrow_column(t, [v]) for c, t, v in zip(columns, case["types"], case["values"])}), path
        )
        df = spark.read.schema(spark_schema(columns)).parquet(str(path))
        (row,) = spark_row_hashes(df, columns, [columns[0].name], SEED, bits).collect()
        assert row["__rh"].hex() == case[field], case["values"]
