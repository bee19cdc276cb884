"""The difference a redefinition's sync stages, and the statistics it carries (pipeline/redefine.py).

Hand-made stored and staged versions of a one-site view, on a local Spark: the old rows are
read with the new columns (a missing one NULL) and matched by the new key; rows that stay
with equal values give no line; without the new key in the old rows, every row leaves and
enters. The keys that survive keep their update statistics, one sync more. Of multiset
views (one grouped site, or combinations of two), the count difference of each distinct
row, NULL equal to NULL.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltasieve_protocol.types import arrow_schema
from warehouse.formats import STORAGE_FORMAT
from warehouse.multisets import combinations
from warehouse.multisets.multiset import _cols
from warehouse.names import CHANGED, OP, TNO, UNO
from warehouse.pipeline import redefine
from warehouse.spark import build_session
from warehouse.store.versions import Version
from warehouse.viewdef import SiteQuery, ViewDef


@pytest.fixture(scope="module")
def spark():
    return build_session("local[2]")


def _view(key: list[str], *columns: str) -> ViewDef:
    cols = _cols(*columns)
    return ViewDef("", cols, key, [SiteQuery("s", "SELECT ...", cols, key)])


def _version(root, number: int, view: ViewDef, rows: list[dict], stats: list[tuple[int, int]]) -> Version:
    version = Version(number, f"sync{number}", root / str(number))
    schema = arrow_schema(view.columns)
    table = pa.Table.from_pylist(rows, schema=schema)
    table = table.append_column(TNO, pa.array([t for t, _ in stats], pa.int64()))
    table = table.append_column(UNO, pa.array([u for _, u in stats], pa.int64()))
    version.fragment(0).mkdir(parents=True)
    pq.write_table(table, version.fragment(0) / "part-0.parquet")
    return version


def _lines(target) -> dict:
    table = pq.read_table(target)
    return {r["id"]: (r[OP], {k: v for k, v in r.items() if k not in (OP, CHANGED)}) for r in table.to_pylist()}


OLD = _view(["id"], "id int", "a text")
NEW = _view(["id"], "id int", "a text", "b text")
OLD_ROWS = [{"id": 1, "a": "x"}, {"id": 2, "a": "y"}, {"id": 3, "a": "z"}]


def test_the_difference_matches_rows_by_key_and_reads_a_new_column_as_null(tmp_path, spark):
    stored = _version(tmp_path, 1, OLD, OLD_ROWS, [(3, 1), (2, 2), (5, 1)])
    new_rows = [
        {"id": 1, "a": "x", "b": None},  # the same once b is read as NULL: no line
        {"id": 2, "a": "y", "b": "new"},  # b filled in: an update
        {"id": 4, "a": "w", "b": None},  # entered (the new WHERE)
    ]  # id 3 left
    staged = _version(tmp_path, 2, NEW, new_rows, [(1, 1)] * 3)
    target = tmp_path / "delta"
    counts = redefine.difference(spark, stored, staged, OLD, NEW, target)
    assert counts == (1, 1, 1)
    assert _lines(target) == {
        2: ("update", {"id": 2, "a": "y", "b": "new"}),
        4: ("insert", {"id": 4, "a": "w", "b": None}),
        3: ("delete", {"id": 3, "a": "z", "b": None}),
    }
    # the update says what changed, the old row read in the new columns (b was NULL)
    assert {r["id"]: r[CHANGED] for r in pq.read_table(target).to_pylist()} == {2: ["b"], 3: None, 4: None}
    # the keys that survive keep their statistics, one sync more; a new key starts afresh
    assert redefine.carry_statistics(spark, stored, staged, OLD, NEW) == [0]
    carried = {r["id"]: (r[TNO], r[UNO]) for r in pq.read_table(staged.fragment(0)).to_pylist()}
    assert carried == {1: (4, 1), 2: (3, 2), 4: (1, 1)}
    assert (staged.site_dir(0) / "omega.parquet").exists()


def test_without_the_new_key_in_the_old_rows_every_row_leaves_and_enters(tmp_path, spark):
    stored = _version(tmp_path, 1, OLD, OLD_ROWS[:2], [(1, 1)] * 2)
    keyed_by_b = _view(["b"], "b int", "a text")
    staged = _version(tmp_path, 2, keyed_by_b, [{"b": 7, "a": "x"}], [(1, 1)])
    target = tmp_path / "delta"
    assert redefine.difference(spark, stored, staged, OLD, keyed_by_b, target) == (1, 0, 2)
    ops = sorted((r[OP], r["b"], r["a"]) for r in pq.read_table(target).to_pylist())
    assert ops == [("delete", None, "x"), ("delete", None, "y"), ("insert", 7, "x")]
    assert redefine.carry_statistics(spark, stored, staged, OLD, keyed_by_b) == []  # another key


def test_a_projection_keeps_rows_and_statistics_and_reads_nothing(tmp_path, spark):
    stored = _version(tmp_path, 1, NEW, [{"id": 1, "a": "x", "b": "q"}], [(6, 2)])
    (stored.site_dir(0) / "deletions").mkdir()
    (stored.path / "meta.json").write_text(json.dumps({"format": STORAGE_FORMAT, "rows": 1}))
    staged = Version(2, "sync2", tmp_path / "2")
    assert redefine.project(spark, stored, staged, NEW, OLD) == 1
    assert pq.read_table(staged.fragment(0)).to_pylist() == [{"id": 1, "a": "x", TNO: 6, UNO: 2}]
    assert (staged.site_dir(0) / "deletions").is_dir()


def _multiset(*columns: str) -> ViewDef:
    """A multiset view of one grouped site: every column nullable (a flag beside it), a count."""
    cols = _cols(*columns)
    flags = _cols(*(f"__ds_null_{c.name} bool" for c in cols))
    site = [*cols, *flags, *_cols("__ds_count int")]
    nulls = {c.name: f.name for c, f in zip(cols, flags, strict=True)}
    key = [c.name for c in cols + flags]
    return ViewDef(
        "", cols, [], [SiteQuery("s", "SELECT ...", site, key)], multiset={"count": "__ds_count", "nulls": nulls}
    )


def _grouped(root, number: int, view: ViewDef, rows: list[tuple]) -> Version:
    """A stored version of a multiset view holding `rows`, each as often as it comes."""
    names = [c.name for c in view.columns]
    counted: dict = {}
    for row in rows:
        counted[row] = counted.get(row, 0) + 1
    fillers = {"int": 0, "text": ""}
    grouped = []
    for row, n in counted.items():
        line = {
            name: fillers[c.type.kind] if v is None else v for name, c, v in zip(names, view.columns, row, strict=True)
        }
        line |= {f"__ds_null_{name}": v is None for name, v in zip(names, row, strict=True)}
        grouped.append(line | {"__ds_count": n})
    return _version(root, number, view.sites[0], grouped, [(1, 1)] * len(grouped))


def test_a_multiset_difference_is_the_count_difference_of_each_row_null_equal_to_null(tmp_path, spark):
    old = _multiset("a int", "b text")
    new = _multiset("a int", "b text", "c int")
    before = [(1, "x"), (1, "x"), (1, "x"), (2, None), (2, None), (3, "z"), (4, "w")]
    after = [(1, "x", None), (2, None, None), (2, None, None), (2, None, None), (3, "z", 5), (5, None, None)]
    stored, staged = _grouped(tmp_path, 1, old, before), _grouped(tmp_path, 2, new, after)
    target = tmp_path / "delta"
    assert redefine.difference(spark, stored, staged, old, new, target) == (3, 0, 4)
    lines = sorted(
        ((r[OP], r["a"], r["b"], r["c"], r["__ds_count"]) for r in pq.read_table(target).to_pylist()),
        key=lambda line: (line[1], line[0]),
    )
    assert lines == [
        ("delete", 1, "x", None, 2),  # 3 -> 1: the new column NULL matches the old rows
        ("insert", 2, None, None, 1),  # 2 -> 3, NULL equal to NULL
        ("delete", 3, "z", None, 1),  # c filled in: another row
        ("insert", 3, "z", 5, 1),
        ("delete", 4, "w", None, 1),
        ("insert", 5, None, None, 1),
    ]


def test_a_multiset_difference_adds_up_old_rows_that_become_one_and_keeps_statistics_of_a_same_site(tmp_path, spark):
    old = _multiset("a int", "b text")
    new = _multiset("a int")
    stored = _grouped(tmp_path, 1, old, [(1, "x"), (1, "y"), (2, "z")])
    staged = _grouped(tmp_path, 2, new, [(1,), (1,), (2,), (2,)])
    target = tmp_path / "delta"
    assert redefine.difference(spark, stored, staged, old, new, target) == (1, 0, 0)
    assert [(r[OP], r["a"], r["__ds_count"]) for r in pq.read_table(target).to_pylist()] == [("insert", 2, 1)]
    assert redefine.carry_statistics(spark, stored, staged, old, new) == []  # another site: fresh statistics
    again = _grouped(tmp_path, 3, old, [(1, "x"), (2, "z"), (2, "z")])
    assert redefine.carry_statistics(spark, stored, again, old, old) == [0]
    carried = {r["a"]: r[TNO] for r in pq.read_table(again.fragment(0)).to_pylist()}
    assert carried == {1: 2, 2: 2}


def test_a_multiset_over_two_sites_is_read_by_its_combinations_occurrences(tmp_path, spark):
    """Stored combinations (a LEFT JOIN site padded) hold each content as often as the
    product of their counts; the difference to a view of one site counts those."""
    flagged = _cols("m text", "__ds_null_m bool", "__ds_count int")
    sites = [
        SiteQuery("a", "", flagged, ["m", "__ds_null_m"]),
        SiteQuery("b", "", _cols("t text", "__ds_count int"), ["t"]),
    ]
    multiset = {"count": "__ds_count", "nulls": {"m": "__ds_null_m"}}
    old = ViewDef("", _cols("m text"), [], sites, "SELECT ...", None, [1], multiset)
    combos = [
        {"m": "x", "__ds_null_m": False, "__ds_count_0": 2, "t": "p", "__ds_count_1": 3},
        {"m": "x", "__ds_null_m": False, "__ds_count_0": 1, "t": "q", "__ds_count_1": 1},
        {"m": "", "__ds_null_m": True, "__ds_count_0": 1, "t": None, "__ds_count_1": None},  # padded: once
    ]
    stored = Version(1, "sync1", tmp_path / "1")
    stored.rows().mkdir(parents=True)
    schema = arrow_schema(combinations.stored_view(old).columns)
    pq.write_table(pa.Table.from_pylist(combos, schema=schema), stored.rows() / "part-0.parquet")
    rows = sorted((r["m"] or "", r["__ds_count"]) for r in redefine.multiset_rows(spark, stored, old).collect())
    assert rows == [("", 1), ("x", 1), ("x", 6)]
    new = _multiset("m text")
    staged = _grouped(tmp_path, 2, new, [("x",)] * 5 + [(None,), ("y",)])
    target = tmp_path / "delta"
    assert redefine.difference(spark, stored, staged, old, new, target) == (1, 0, 2)
    lines = sorted((r[OP], r["m"], r["__ds_count"]) for r in pq.read_table(target).to_pylist())
    assert lines == [("delete", "x", 2), ("insert", "y", 1)]
