"""One sync driven step by step (warehouse/pipeline/sync.py): begin, extract, build, assemble
and commit called one at a time over a real agent process, Spark in this process and a
real store, each step's record checked before the next one runs.

A load, then a round of changes whose steps stop before the commit (the view keeps its
version) and the same round run whole by `SyncRun`: both give the delta the source's
changes call for, and the view equals the source.
"""

from __future__ import annotations

import json
import os
import sqlite3

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from warehouse.names import DELETE, INSERT, OP, UPDATE
from warehouse.options import SyncOptions
from warehouse.pipeline.assemble import ViewCounts, assemble
from warehouse.pipeline.build import build
from warehouse.pipeline.extract import extract
from warehouse.pipeline.source_schemas import fetch_schemas
from warehouse.pipeline.start import begin
from warehouse.pipeline.sync import SyncRun, commit
from warehouse.reading import rows as view_rows
from warehouse.spark import build_session
from warehouse.store.versions import ViewStore
from warehouse.strategies.sync_context import Endpoint, SyncContext
from warehouse.viewdef import analyze_view
from workloads.harness import start_agent

pytestmark = pytest.mark.integration

ROWS = 300


@pytest.fixture(scope="module")
def setting(tmp_path_factory, logs_dir):
    """A SQLite source of ROWS rows behind an agent, Spark, a store and the view bound to it."""
    path = tmp_path_factory.mktemp("steps") / "legacy.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT NOT NULL, n REAL)")
        db.executemany("INSERT INTO t VALUES (?, ?, ?)", [(k, f"value {k}", k / 4) for k in range(ROWS)])
    agent = start_agent(f"sqlite:///{path}", logs_dir)
    try:
        schemas = fetch_schemas([("src", agent.url, None)])
        view = analyze_view("SELECT t.k, t.v, t.n FROM src.t AS t", schemas)
        store = ViewStore(tmp_path_factory.mktemp("store"), "steps")
        conf = json.loads(os.environ.get("SERVICE_SPARK_CONF") or "{}")  # the suite's (tests/conftest.py)
        yield path, agent, build_session("local[2]", extra_conf=conf), store, view
    finally:
        agent.stop()


def context(setting, sync_id: str) -> SyncContext:
    _, agent, spark, store, _ = setting
    options = SyncOptions(strategy="group_hash", agent_retries=0)
    return SyncContext(spark, store, "steps", sync_id, {"src": Endpoint("src", agent.url)}, options)


def source_rows(path) -> dict[int, tuple]:
    with sqlite3.connect(path) as db:
        return {k: (k, v, n) for k, v, n in db.execute("SELECT k, v, n FROM t")}


def view_contents(store: ViewStore, view) -> dict[int, tuple]:
    current = store.current()
    assert current is not None
    table = pa.Table.from_batches(list(view_rows.view_batches(current, view, 10_000)))
    return {r["k"]: (r["k"], r["v"], r["n"]) for r in table.to_pylist()}


def staged_ops(store: ViewStore, sync_id: str) -> dict[str, set[int]]:
    delta = pq.read_table(store.staged_delta(sync_id)).to_pylist()
    return {op: {r["k"] for r in delta if r[OP] == op} for op in (INSERT, UPDATE, DELETE)}


def test_one_sync_step_by_step(setting):
    path, _, _, store, view = setting

    # the load, one step at a time
    ctx = context(setting, "load-1")
    start = begin(ctx, view)
    assert (start.stored, start.current, start.old, start.projected, start.number) == (None, None, None, None, 1)
    sites = extract(ctx, view, start)
    assert len(sites) == 1 and sites[0].strategy is not None
    assert ctx.traffic()["round_trips"] > 0 and ctx.traffic()["bytes_from_agent"] > 0
    fragments = build(ctx, view, start, sites)
    assert fragments.staged.number == 1 and fragments.results[0].inserted == ROWS
    assert assemble(ctx, view, start, fragments) == ViewCounts(ROWS, 0, 0, ROWS)
    assert store.current() is None, "nothing is visible before the commit"
    committed = commit(ctx, view, start, fragments, sites, {})
    fragments.release()
    store.discard(ctx.sync_id)
    assert store.current().number == committed.number == 1
    assert view_contents(store, view) == source_rows(path)
    assert ctx.metrics.bytes_from_agent == ctx.traffic()["bytes_from_agent"] > 0

    # a round of changes at the source
    with sqlite3.connect(path) as db:
        db.executemany("UPDATE t SET v = v || ' changed' WHERE k = ?", [(3,), (50,), (299,)])
        db.executemany("DELETE FROM t WHERE k = ?", [(7,), (8,)])
        db.executemany("INSERT INTO t VALUES (?, ?, ?)", [(k, f"new {k}", None) for k in range(1000, 1004)])
    expected = {INSERT: set(range(1000, 1004)), UPDATE: {3, 50, 299}, DELETE: {7, 8}}

    # its steps up to the commit, then left: the view keeps its version
    ctx = context(setting, "round-2")
    start = begin(ctx, view)
    assert start.stored.number == 1 and start.current == start.stored and start.number == 2
    sites = extract(ctx, view, start)
    fragments = build(ctx, view, start, sites)
    assert fragments.results[0].updated == 3 and fragments.results[0].deleted == 2
    assert assemble(ctx, view, start, fragments) == ViewCounts(4, 3, 2, ROWS + 2)
    assert staged_ops(store, ctx.sync_id) == expected
    fragments.release()
    store.discard(ctx.sync_id)
    assert store.current().number == 1 and len(view_contents(store, view)) == ROWS

    # the same round run whole
    ctx = context(setting, "round-3")
    metrics = SyncRun(ctx, view).run()
    assert (metrics.rows_inserted, metrics.rows_updated, metrics.rows_deleted) == (4, 3, 2)
    assert set(metrics.phases) >= {"extract_sites", "build_fragments", "assemble_view", "commit"}
    assert store.current().number == 2
    assert view_contents(store, view) == source_rows(path)
