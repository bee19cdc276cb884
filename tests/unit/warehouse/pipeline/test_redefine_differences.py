"""The difference a redefinition's sync stages, and the statistics it carries (pipeline/redefine.py).

Hand-made stored and staged versions of a one-site view, on a local Spark: the old rows are
read with the new columns (a missing one NULL) and matched by the new key; rows that stay
with equal values give no line; without the new key in the old rows, every row leaves and
enters. The keys that survive keep their update statistics, one sync more.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from protocol.types import arrow_schema
from warehouse.multisets.multiset import _cols
from warehouse.names import OP, TNO, UNO
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
    return {r["id"]: (r[OP], {k: v for k, v in r.items() if k != OP}) for r in table.to_pylist()}


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
    (stored.path / "meta.json").write_text('{"format": 2, "rows": 1}')
    staged = Version(2, "sync2", tmp_path / "2")
    assert redefine.project(spark, stored, staged, NEW, OLD) == 1
    assert pq.read_table(staged.fragment(0)).to_pylist() == [{"id": 1, "a": "x", TNO: 6, UNO: 2}]
    assert (staged.site_dir(0) / "deletions").is_dir()
