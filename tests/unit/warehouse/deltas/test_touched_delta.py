"""The delta from the touched tuples alone (Arrow, on the driver) against build_delta over
the whole snapshot (Spark): randomized snapshots and answers, the same ops, rows and ω±."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from deltasieve_protocol.types import Column, LogicalType, arrow_schema
from warehouse.deltas.site_delta import build_delta
from warehouse.deltas.touched_delta import classify, stored_schema
from warehouse.names import CHANGED, OP, TNO, UNO
from warehouse.spark import build_session

COLUMNS = [
    Column("k", LogicalType("int")),
    Column("v", LogicalType("text")),
    Column("x", LogicalType("float")),
    Column("d", LogicalType("decimal", 10, 2)),
]
KEY = ["k"]
SNAP = "k bigint, v string, x double, d decimal(10,2), __tno bigint, __uno bigint"
ROWS = "k bigint, v string, x double, d decimal(10,2)"


@pytest.fixture(scope="module")
def spark():
    return build_session("local[2]")


def _value(rng: random.Random) -> tuple:
    from decimal import Decimal

    return (
        rng.choice(["a", "b", None, "é"]),
        rng.choice([1.0, 2.5, None, float("nan"), -0.0]),
        rng.choice([Decimal("1.10"), Decimal("-3.00"), None]),
    )


@pytest.mark.parametrize("seed", range(4))
def test_touched_tuples_classify_as_the_whole_snapshot_does(spark, seed):
    rng = random.Random(seed)
    snapshot = [(k, *_value(rng), rng.randint(1, 9), 1) for k in range(60)]
    snapshot = [(k, v, x, d, t, rng.randint(1, t)) for k, v, x, d, t, _ in snapshot]
    changed = rng.sample(range(60), 25)
    returned = [(k, *_value(rng)) for k in changed] + [(k, *_value(rng)) for k in range(60, 70)]
    deleted = rng.sample([k for k in range(60) if k not in changed], 8) + [99]  # 99: never stored

    whole = build_delta(
        spark.createDataFrame(snapshot, SNAP),
        COLUMNS,
        KEY,
        grouped_keys=spark.createDataFrame([(r[0],) for r in snapshot], "k bigint"),
        returned=spark.createDataFrame(returned, ROWS),
        deleted_keys=spark.createDataFrame([(k,) for k in deleted], "k bigint"),
    )
    try:
        expected_delta = sorted(map(repr, (tuple(r) for r in whole.delta(COLUMNS).collect())))
        news = whole.classified.filter(f"{OP} in ('insert', 'update')")
        expected_new = {r["k"]: tuple(r) for r in news.drop(CHANGED).collect()}
        expected_changed = {r["k"]: r[CHANGED] for r in news.collect()}
        counts = (whole.inserted, whole.updated, whole.deleted, whole.kept, whole.before)
    finally:
        whole.release()

    touched_keys = {r[0] for r in returned} | set(deleted)
    old = pa.Table.from_pylist(
        [dict(zip(stored_schema(COLUMNS).names, r, strict=True)) for r in snapshot if r[0] in touched_keys],
        schema=stored_schema(COLUMNS),
    )
    rows = pa.Table.from_pylist(
        [dict(zip(arrow_schema(COLUMNS).names, r, strict=True)) for r in returned], schema=arrow_schema(COLUMNS)
    )
    gone = pa.table({"k": pa.array(deleted, pa.int64())})
    touched = classify(old, rows, gone, COLUMNS, KEY, before=len(snapshot))

    assert (touched.inserted, touched.updated, touched.deleted, touched.kept, touched.before) == counts
    assert sorted(map(repr, (tuple(r.values()) for r in touched.delta.to_pylist()))) == expected_delta
    # both say alike which columns each update changed (null on inserts and deletes)
    lines = touched.delta.append_column(CHANGED, touched.changed_columns).to_pylist()
    assert {r["k"]: r[CHANGED] for r in lines if r[OP] != "delete"} == expected_changed
    new = {r["k"]: tuple(r.values()) for r in touched.changed.select([OP, "k", "v", "x", "d", TNO, UNO]).to_pylist()}
    assert new.keys() == expected_new.keys()
    for k, row in new.items():  # NaN != NaN as tuples compare: compare their reprs
        assert repr(row) == repr(expected_new[k]), k
    assert {r["k"] for r in touched.left.to_pylist()} == {k for k, r in new.items() if r[0] == "update"} | (
        set(deleted) & {r[0] for r in snapshot}
    ) - {r[0] for r in returned}
