"""The exact delta and the update statistics ω±, on Spark with hand-made inputs."""

from __future__ import annotations

import pytest

from deltasieve_protocol.types import Column, LogicalType
from warehouse.deltas.site_delta import build_delta, view_delta
from warehouse.names import CHANGED, OP, TNO, UNO
from warehouse.spark import build_session

COLUMNS = [Column("k", LogicalType("int")), Column("v", LogicalType("text")), Column("x", LogicalType("float"))]
SNAP = "k bigint, v string, x double, __tno bigint, __uno bigint"
ROWS = "k bigint, v string, x double"
KEYS = "k bigint"


@pytest.fixture(scope="module")
def spark():
    return build_session("local[2]")


def run(spark, snapshot, grouped, returned, deleted):
    result = build_delta(
        spark.createDataFrame(snapshot, SNAP),
        COLUMNS,
        ["k"],
        grouped_keys=spark.createDataFrame([(k,) for k in grouped], KEYS),
        returned=spark.createDataFrame(returned, ROWS),
        deleted_keys=spark.createDataFrame([(k,) for k in deleted], KEYS),
    )
    try:
        fragment = {r["k"]: (r["v"], r["x"], r[TNO], r[UNO]) for r in result.fragment(COLUMNS).collect()}
        delta = {r["k"]: (r[OP], r["v"], r["x"]) for r in result.delta(COLUMNS).collect()}
        return result, fragment, delta
    finally:
        result.release()


def test_every_kind_of_tuple_gets_its_op_and_statistics(spark):
    snapshot = [
        (1, "same", 1.0, 3, 1),  # in an identical unit: not returned, kept
        (2, "old", 2.0, 5, 2),  # in a changed unit, really updated
        (3, "same", 3.0, 2, 1),  # in a changed unit, returned unchanged
        (4, "gone", 4.0, 4, 1),  # in a unit, reported deleted by the agent
        (5, "loose", 5.0, 1, 1),  # ungrouped, returned unchanged
        (6, "loose", 6.0, 2, 2),  # ungrouped, not returned: deleted
        (7, None, float("nan"), 6, 3),  # ungrouped, returned with NULL and NaN unchanged
    ]
    grouped = [1, 2, 3, 4]
    returned = [(2, "new", 2.0), (3, "same", 3.0), (5, "loose", 5.0), (7, None, float("nan")), (8, "fresh", None)]
    result, fragment, delta = run(spark, snapshot, grouped, returned, deleted=[4])
    assert (result.inserted, result.updated, result.deleted, result.kept, result.before) == (1, 1, 2, 4, 7)
    assert delta == {
        2: ("update", "new", 2.0),
        4: ("delete", "gone", 4.0),
        6: ("delete", "loose", 6.0),
        8: ("insert", "fresh", None),
    }
    # ω±: survivors tno + 1; really updated uno + 1; new tuples (1, 1); deleted ones leave.
    assert fragment[1] == ("same", 1.0, 4, 1)
    assert fragment[2] == ("new", 2.0, 6, 3)
    assert fragment[3] == ("same", 3.0, 3, 1)
    assert fragment[5] == ("loose", 5.0, 2, 1)
    assert fragment[7][2:] == (7, 3)
    assert fragment[8] == ("fresh", None, 1, 1)
    assert 4 not in fragment and 6 not in fragment


def test_first_load_inserts_everything(spark):
    result, fragment, delta = run(spark, [], [], [(1, "a", None), (2, "b", 0.5)], [])
    assert (result.inserted, result.updated, result.deleted) == (2, 0, 0)
    assert {k: v[2:] for k, v in fragment.items()} == {1: (1, 1), 2: (1, 1)}
    assert {k: v[0] for k, v in delta.items()} == {1: "insert", 2: "insert"}


def test_negative_zero_is_not_an_update(spark):
    # The canonical encoding maps -0.0 to 0.0; the comparison must agree with it.
    _, _, delta = run(spark, [(1, "a", 0.0, 2, 1)], [], [(1, "a", -0.0)], [])
    assert delta == {}


def test_view_delta_says_which_columns_each_update_changed(spark):
    old = spark.createDataFrame([(1, "a", 1.0), (2, None, 2.0), (3, "c", None), (4, "d", 4.0)], ROWS)
    new = spark.createDataFrame([(1, "a", 1.5), (2, "b", 2.0), (3, None, 3.0), (5, "e", 5.0)], ROWS)
    lines = {r["k"]: (r[OP], r[CHANGED]) for r in view_delta(old, new, ["k", "v", "x"], ["k"]).collect()}
    assert lines == {
        1: ("update", ["x"]),
        2: ("update", ["v"]),  # NULL to a value
        3: ("update", ["v", "x"]),  # a value to NULL, NULL to a value: every column
        4: ("delete", None),
        5: ("insert", None),
    }


def test_the_stored_delta_lists_the_changed_columns(spark, tmp_path):
    import pyarrow.parquet as pq

    result = build_delta(
        spark.createDataFrame([(1, "a", 1.0, 1, 1), (2, "b", None, 1, 1)], SNAP),
        COLUMNS,
        ["k"],
        grouped_keys=spark.createDataFrame([], KEYS),
        returned=spark.createDataFrame([(1, "a", 2.0), (2, "B", 3.0), (3, "c", None)], ROWS),
        deleted_keys=spark.createDataFrame([], KEYS),
    )
    try:
        result.write_delta(tmp_path / "delta", COLUMNS)
    finally:
        result.release()
    rows = pq.read_table(tmp_path / "delta").to_pylist()
    assert sorted((r["k"], r[OP], r[CHANGED]) for r in rows) == [
        (1, "update", ["x"]),
        (2, "update", ["v", "x"]),
        (3, "insert", None),
    ]
