"""layers.lookup: the stored rows of some keys read with Arrow equal what the Spark frame of
the same version holds for them — base, removed keys, upserts and the tno offset applied,
with a composite key whose first column alone matches more rows than are asked for."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from deltasieve_protocol.types import Column, LogicalType
from warehouse.names import TNO, UNO
from warehouse.spark import build_session
from warehouse.store import layers
from warehouse.store.read_ahead import ReadAhead
from warehouse.store.versions import ViewStore

COLUMNS = [
    Column("region", LogicalType("int")),
    Column("code", LogicalType("text")),
    Column("amount", LogicalType.parse("decimal(10,2)")),
    Column("seen", LogicalType("timestamp")),
]
KEY = ["region", "code"]
OMEGA = pa.schema(
    [*(pa.field(c.name, c.type.arrow()) for c in COLUMNS), pa.field(TNO, pa.int64()), pa.field(UNO, pa.int64())]
)


def rows(region: int, codes: range, tno: int) -> list[dict]:
    return [
        {
            "region": region,
            "code": f"c{i}",
            "amount": None if i % 7 == 0 else Decimal(i) + Decimal("0.25"),
            "seen": dt.datetime(2026, 1, 1) + dt.timedelta(minutes=i),
            TNO: tno,
            UNO: 1 + i % 3,
        }
        for i in codes
    ]


def table(found: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(found, schema=OMEGA)


@pytest.fixture(scope="module")
def version(tmp_path_factory):
    """A version whose fragment is a base of regions 1-3, less removed keys, plus upserts, tno offset 2."""
    store = ViewStore(tmp_path_factory.mktemp("store"), "v")
    store.staging("s1")
    staged = store.staged_version("s1", 1)
    base = table(rows(1, range(0, 300), 4) + rows(2, range(0, 300), 5) + rows(3, range(0, 50), 1))
    staged.fragment(0).mkdir(parents=True)
    pq.write_table(base.slice(0, 400), staged.fragment(0) / "part-0.parquet")
    pq.write_table(base.slice(400), staged.fragment(0) / "part-1.parquet")
    removed = pa.table({"region": [1, 1, 2], "code": ["c5", "c6", "c7"]}, schema=pa.schema(list(OMEGA)[:2]))
    layers.write_part(removed, staged.site_dir(0) / "removed")
    upserts = table(rows(1, range(5, 6), 0) + rows(4, range(0, 3), 1))  # c5 of region 1 replaced, region 4 new
    layers.write_part(upserts, staged.site_dir(0) / "upserts")
    layers.Layers(base.num_rows, upserts.num_rows, removed.num_rows, 2, {}).save(staged.site_dir(0))
    return store.commit(staged, {})


def test_lookup_equals_the_spark_frame(version):
    spark = build_session("local[2]")
    keys = pa.table(
        {
            # asked: kept base rows, a removed one, a replaced one, upserts only, absent keys
            "region": [1, 1, 1, 2, 2, 3, 4, 4, 9],
            "code": ["c1", "c5", "c6", "c7", "c299", "c49", "c0", "c2", "c1"],
        }
    )
    got = layers.lookup(version, 0, COLUMNS, KEY, keys)
    probe = spark.createDataFrame(keys.to_pandas())
    want = layers.frame(spark, version, 0, COLUMNS, KEY).join(probe, KEY, "left_semi").toArrow()
    assert got.schema == OMEGA
    order = [("region", "ascending"), ("code", "ascending")]
    assert got.sort_by(order).to_pylist() == want.select(OMEGA.names).cast(OMEGA).sort_by(order).to_pylist()
    found = {(r["region"], r["code"]): r[TNO] for r in got.to_pylist()}
    # c6 was removed, c7 of region 2 too, region 9 never was; the tno offset (2) counts on both layers
    assert found == {(1, "c1"): 6, (1, "c5"): 2, (2, "c299"): 7, (3, "c49"): 3, (4, "c0"): 3, (4, "c2"): 3}


@pytest.mark.parametrize("budget", [1 << 30, 1], ids=["whole", "one_group"])
def test_a_lookup_takes_the_row_groups_read_ahead(version, budget):
    """What a read-ahead decoded (all of it, or its first row group alone) stands in for the
    lookup's own reads: the same rows come back."""
    keys = pa.table({"region": [1, 1, 2, 3, 4, 9], "code": ["c1", "c5", "c299", "c49", "c2", "c1"]})
    ahead = ReadAhead(
        [version.fragment(0), version.site_dir(0) / "upserts"], layers.read_ahead_columns(COLUMNS), budget=budget
    )
    assert ahead.wait(60)
    held = ahead.take()
    assert ahead.report()["row_groups"] == (3 if budget > 1 else 1) == len(held)
    order = [("region", "ascending"), ("code", "ascending")]
    want = layers.lookup(version, 0, COLUMNS, KEY, keys).sort_by(order)
    assert layers.lookup(version, 0, COLUMNS, KEY, keys, held).sort_by(order).equals(want)
    assert want.num_rows == 5


def test_a_lookup_does_not_decode_again_what_is_held(version):
    """The held row groups are what the lookup reads: a row left out of them is not found."""
    ahead = layers.read_ahead(version, 0, COLUMNS)
    assert ahead.wait(60)
    held = dict(ahead.take())
    for at, group in held.items():
        held[at] = group.filter(pc.invert(pc.and_(pc.equal(group["region"], 1), pc.equal(group["code"], "c1"))))
    keys = pa.table({"region": [1, 1], "code": ["c1", "c2"]})
    assert [r["code"] for r in layers.lookup(version, 0, COLUMNS, KEY, keys, held).to_pylist()] == ["c2"]
