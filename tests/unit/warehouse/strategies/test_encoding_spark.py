"""Rows read by Spark from Parquet hash as the vectors say (the warehouse's path), and the
sketch's key fingerprints of decimal and date keys are the agent's."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import xxhash

from deltasieve_protocol.fingerprints import key_fingerprints
from deltasieve_protocol.types import Column, LogicalType
from tests.support.vectors import SEED, VECTORS, arrow_column
from warehouse.names import spark_schema
from warehouse.spark import build_session
from warehouse.strategies.hashing import row_hashes_of


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
        hashed = row_hashes_of(
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
        (row,) = row_hashes_of(df, columns, [columns[0].name], SEED, bits).collect()
        assert row["__rh"].hex() == case[field], case["values"]


KEY_DAYS = [dt.date(1, 1, 1), dt.date(1969, 12, 31), dt.date(1970, 1, 1), dt.date(2000, 2, 29), dt.date(9999, 12, 31)]
KEY_PRICES = ["0", "0.01", "-0.01", "100", "1.1", "-6282.35", "99999999.99", "-99999999.99"]


@pytest.mark.parametrize(
    "types, values",
    [
        (["decimal(10,2)"], [[Decimal(v) for v in KEY_PRICES]]),
        (["decimal(19,4)"], [[Decimal(v) for v in KEY_PRICES] + [Decimal("999999999999999.9999")]]),
        (["date"], [KEY_DAYS]),
        (["date", "int"], [[d for d in KEY_DAYS for _ in (1, 2)], [b for _ in KEY_DAYS for b in (1, 2)]]),
    ],
    ids=["decimal(10,2)", "decimal(19,4)", "date", "date,int"],
)
def test_key_fingerprints_of_what_spark_hands_over_are_the_agents(spark, tmp_path, types, values):
    """The sketch's key fingerprints of decimal and date keys as the warehouse computes them
    (the fragment read by Spark, in mapInArrow's batches: the table's build, the deleted
    keys' look-up; and toArrow) equal the agent's, computed on the Arrow types it sends."""
    key = [Column(f"k{i}", LogicalType.parse(t)) for i, t in enumerate(types)]
    sent = pa.table({c.name: pa.array(v, c.type.arrow()) for c, v in zip(key, values)})
    agent = dict(zip(map(tuple, zip(*values)), key_fingerprints(sent, key, SEED).tolist()))
    assert len(set(agent.values())) == len(agent)
    returned = tmp_path / "returned.parquet"
    pq.write_table(sent, returned)  # as the sync's Sink writes the rows the agent sent
    fragment = tmp_path / "fragment"
    spark.read.schema(spark_schema(key)).parquet(str(returned)).repartition(3).write.parquet(str(fragment))
    snapshot = spark.read.schema(spark_schema(key)).parquet(str(fragment))

    def run(batches):
        for batch in batches:
            fps = key_fingerprints(batch, key, SEED).view(np.int64)
            yield pa.RecordBatch.from_arrays([*batch.columns, pa.array(fps)], names=[*batch.schema.names, "fp"])

    by_spark = snapshot.mapInArrow(run, f"{spark_schema(key)}, fp bigint").collect()
    got = {tuple(row[c.name] for c in key): np.int64(row["fp"]).view(np.uint64).item() for row in by_spark}
    assert got == agent
    table = snapshot.toArrow()
    got = dict(
        zip(
            map(tuple, zip(*(table.column(c.name).to_pylist() for c in key))),
            key_fingerprints(table, key, SEED).tolist(),
        )
    )
    assert got == agent
