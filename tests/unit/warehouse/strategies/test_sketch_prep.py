"""Sketch tables built in the background (warehouse/strategies/sketch/prep.py), on Spark, on versions
committed to a real store: the prepared table is the one a sync would build itself, it
serves only the version it names, and a build that fails, is taken over or is cut off
leaves nothing a sync could use."""

from __future__ import annotations

import shutil
import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltasieve_protocol.iblt import Iblt
from deltasieve_protocol.types import Column, LogicalType
from warehouse.names import TNO, UNO
from warehouse.planning import update_counts
from warehouse.spark import build_session
from warehouse.store import layers
from warehouse.store.versions import Version, ViewStore
from warehouse.strategies.sketch import prep as sketch_prep
from warehouse.strategies.sketch import tables as sketch_tables
from warehouse.viewdef import SiteQuery

QUERY = SiteQuery(
    "src",
    "SELECT k, v FROM t",
    [Column("k", LogicalType("int")), Column("v", LogicalType("text"))],
    ["k"],
)
ROWS = 5_000


@pytest.fixture(scope="module")
def spark():
    return build_session("local[2]")


def commit(store: ViewStore, sync_id: str, number: int, rows: int = ROWS):
    """A version of one site whose fragment holds `rows` rows, committed."""
    store.staging(sync_id)
    staged = store.staged_version(sync_id, number)
    site_dir = staged.site_dir(0)
    staged.fragment(0).mkdir(parents=True)
    keys = np.arange(rows, dtype=np.int64)
    table = pa.table(
        {
            "k": keys,
            "v": pa.array([f"row {k} of {sync_id}" for k in keys]),
            TNO: np.ones(rows, np.int64),
            UNO: np.ones(rows, np.int64),
        }
    )
    pq.write_table(table, staged.fragment(0) / "part-0.parquet")
    update_counts.save(update_counts.Histogram({(1, 1): rows}), site_dir)
    version = store.commit(staged, {})
    store.discard(sync_id)
    return version


def same_table(a: sketch_tables.SiteSketch, b: sketch_tables.SiteSketch) -> bool:
    return a.secret == b.secret and all(
        np.array_equal(getattr(a.table, n), getattr(b.table, n)) for n in ("count", "key_sum", "hash_sum", "check_sum")
    )


def test_the_table_prepared_in_the_background_is_the_one_built_inline(spark, tmp_path):
    store = ViewStore(tmp_path, "v")
    version = commit(store, "s1", 1)
    prep = sketch_prep.Preparations()
    try:
        assert prep.after_commit(spark, version, [(0, QUERY)], rotation=100) == [0]
        prepared, waited = prep.take(version, 0, ROWS)
    finally:
        prep.shutdown()
    assert prepared is not None and waited >= 0
    assert prepared.built_for == (1, "s1") and prepared.syncs == 0
    frame = layers.frame(spark, version, 0, QUERY.columns, QUERY.key)
    inline = sketch_tables.build(frame, QUERY.columns, QUERY.key_columns(), ROWS, secret=prepared.secret)
    assert prepared.table.width == inline.table.width == sketch_tables.stored_width(ROWS)
    assert same_table(prepared, inline)
    # it holds every row's pair: less those pairs, the table is empty
    batch = pq.read_table(version.fragment(0)).select(["k", "v"])
    table = prepared.table.copy()
    table.add(*prepared.pairs(batch, QUERY.columns, QUERY.key_columns()), sign=-1)
    assert not table.count.any() and not table.key_sum.any() and not table.check_sum.any()
    # the version now has what its next sync needs: nothing more is queued
    assert not sketch_prep.needs_table(version, 0, rotation=100)


def test_a_prepared_table_of_another_version_or_size_or_half_written_is_ignored(spark, tmp_path):
    store = ViewStore(tmp_path, "v")
    first = commit(store, "s1", 1)
    second = commit(store, "s2", 2)
    prep = sketch_prep.Preparations()
    try:
        prep.after_commit(spark, first, [(0, QUERY)], rotation=100)
        assert prep.take(first, 0, ROWS)[0] is not None
    finally:
        prep.shutdown()
    made = sketch_prep.prepared_dir(first, 0)
    shutil.copytree(made, sketch_prep.prepared_dir(second, 0))
    assert sketch_prep.load_prepared(second, 0, ROWS) is None, "built for version 1, not 2"
    assert sketch_prep.needs_table(second, 0, rotation=100), "a stale table does not stand in for one"
    assert not sketch_prep.prepared_dir(second, 0).exists(), "and is removed, so that a build can publish"
    # the same number written by another sync (a version rewritten after a crash, a redefined view)
    assert sketch_prep.load_prepared(Version(1, "s9", first.path), 0, ROWS) is None
    assert sketch_prep.load_prepared(first, 0, 40 * ROWS) is None, "narrower than a build for that many rows"
    data = (made / sketch_tables.FILE).read_bytes()
    (made / sketch_tables.FILE).write_bytes(data[: len(data) // 2])
    assert sketch_prep.load_prepared(first, 0, ROWS) is None


def test_a_failed_build_publishes_nothing_and_the_sync_builds_the_table(spark, tmp_path):
    store = ViewStore(tmp_path, "v")
    version = commit(store, "s1", 1)
    (version.fragment(0) / "part-0.parquet").write_bytes(b"not parquet")
    prep = sketch_prep.Preparations()
    try:
        assert prep.after_commit(spark, version, [(0, QUERY)], rotation=100) == [0]
        assert prep.take(version, 0, ROWS)[0] is None
    finally:
        prep.shutdown()
    assert sorted(p.name for p in version.site_dir(0).iterdir()) == ["fragment", update_counts.FILE]


def test_a_build_still_queued_is_taken_over_by_the_sync(spark, tmp_path):
    store = ViewStore(tmp_path, "v")
    version = commit(store, "s1", 1)
    prep = sketch_prep.Preparations()
    busy = threading.Event()
    prep.pool.submit(busy.wait)  # another view's build holds the one thread
    try:
        assert prep.after_commit(spark, version, [(0, QUERY)], rotation=100) == [0]
        assert prep.take(version, 0, ROWS) == (None, 0.0)
    finally:
        busy.set()
        prep.pool.shutdown(wait=True)
    assert not sketch_prep.prepared_dir(version, 0).exists(), "a build taken over is not run"


def test_tables_are_prepared_where_the_next_sync_would_build_one(tmp_path):
    store = ViewStore(tmp_path, "v")
    version = commit(store, "s1", 1)
    assert sketch_prep.needs_table(version, 0, rotation=3)  # none stored
    stored = sketch_tables.SiteSketch(Iblt(3 * sketch_tables.stored_width(ROWS), sketch_tables.HASHES, 7), syncs=2)
    stored.save(sketch_tables.sketch_dir(version, 0))
    assert not sketch_prep.needs_table(version, 0, rotation=3)
    stored.syncs = 3
    stored.save(sketch_tables.sketch_dir(version, 0))
    assert sketch_prep.needs_table(version, 0, rotation=3)  # its secret is due


def test_cleanup_removes_what_a_killed_build_left(tmp_path):
    store = ViewStore(tmp_path, "v")
    version = commit(store, "s1", 1)
    partial = version.site_dir(0) / f"{sketch_prep.PREPARED}.tmp-0badf00d"
    partial.mkdir()
    (partial / sketch_tables.FILE).write_bytes(b"half")
    assert store.cleanup() == [partial]
    assert store.current() == version and version.fragment(0).exists()
