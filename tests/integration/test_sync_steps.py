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
import random
import sqlite3

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltasieve_protocol import frames
from tests.support.wiretap import Wiretap
from warehouse.executor import DEFAULT_SMALL_SYNC_ROWS
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
from warehouse.view_options import ViewOptions
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


#: Views whose every step each executor runs (warehouse/executor.py), with their options:
#: the same syncs on both must send the agent the same requests.
COMPARED = {
    "group_hash": {"strategy": "group_hash"},
    "range_checksum": {"strategy": "range_checksum"},
    "timestamp": {"strategy": "timestamp", "timestamps": {"src.e": "ts"}},
}


def _compared(exchanges) -> list[tuple[str, bytes]]:
    """The requests two views' syncs must send alike, whatever executor runs them: all but a
    sketch's, whose table has a secret of its own (drawn when it is built, not the sync's
    seed), and the timestamp strategy's changed read, bounded by the view's own watermark
    (a time: the two views' loads read different ones)."""
    out = []
    for x in exchanges:
        first = next(frames.read_frames([x.request_body]), None)
        clocked = first is not None and first.kind == frames.CONTROL and first.json().get("source_clock")
        if x.target != "/v1/sketch" and not clocked:
            out.append((x.target, x.request_body))
    return out


#: Rows of the compared table: enough for range_checksum to bisect and group_hash to group.
COMPARED_ROWS = 1_200


#: The source's clock as SQLite gives it (and the timestamp strategy reads it).
NOW = "strftime('%Y-%m-%d %H:%M:%f', 'now')"


def _change(path, rng: random.Random) -> None:
    """A round of updates, deletes and inserts, each row written stamped with the clock."""
    with sqlite3.connect(path) as db:
        keys = [k for (k,) in db.execute("SELECT k FROM e ORDER BY k")]
        for k in rng.sample(keys, 40):
            db.execute(f"UPDATE e SET v = ?, ts = {NOW} WHERE k = ?", (f"v{rng.random():.6f}", k))
        db.executemany("DELETE FROM e WHERE k = ?", [(k,) for k in rng.sample(keys, 15)])
        top = max(keys) + 1
        db.executemany(f"INSERT INTO e VALUES (?, ?, {NOW})", [(k, f"new {k}") for k in range(top, top + 12)])


def _rows(store: ViewStore, view) -> list[dict]:
    current = store.current()
    assert current is not None
    return pa.Table.from_batches(list(view_rows.view_batches(current, view, 10_000))).sort_by("k").to_pylist()


def _rows_of(path) -> list[dict]:
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT k, v, ts FROM e ORDER BY k")
        return [{"k": k, "v": v, "ts": ts} for k, v, ts in rows]


def test_both_executors_send_the_same_requests_and_find_the_same_delta(setting, tmp_path, logs_dir):
    """The same view synced on Arrow and on Spark (small_sync_rows 0), with the same hash
    seeds: each sync sends the agent byte for byte the same requests, finds the same delta
    and leaves the same rows; the Arrow syncs run no Spark job."""
    spark = setting[2]
    path = tmp_path / "both.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE e (k INTEGER PRIMARY KEY, v TEXT NOT NULL, ts TEXT NOT NULL)")
        db.executemany(
            "INSERT INTO e VALUES (?, ?, ?)",
            [(k, f"value {k}", "2026-01-01 00:00:00.000") for k in range(COMPARED_ROWS)],
        )
    # an agent each (the site query travels by reference once an agent holds it), without
    # change tokens (each agent gives its own)
    agents = {ex: start_agent(f"sqlite:///{path}", logs_dir, extra=["--no-change-token"]) for ex in ("arrow", "spark")}
    taps = {ex: Wiretap("127.0.0.1", agent.port) for ex, agent in agents.items()}
    try:
        schemas = fetch_schemas([("src", agents["arrow"].url, None)])
        view = analyze_view("SELECT e.k, e.v, e.ts FROM src.e AS e", schemas)
        for name, stored in COMPARED.items():
            stores = {ex: ViewStore(tmp_path / ex, name) for ex in taps}
            rng = random.Random(name)
            for n in range(2):  # the load, then a round of changes
                if n:
                    _change(path, rng)
                synced = {}
                for ex, tap in taps.items():
                    options = SyncOptions(
                        strategy=stored["strategy"],
                        agent_retries=0,
                        view_options=ViewOptions.from_stored(stored),
                        small_sync_rows=DEFAULT_SMALL_SYNC_ROWS if ex == "arrow" else 0,
                    )
                    sync_id = f"{name}-{ex}-{n}"
                    endpoints = {"src": Endpoint("src", tap.url)}
                    ctx = SyncContext(spark, stores[ex], name, sync_id, endpoints, options, seed=1000 + n)
                    spark.sparkContext.setJobGroup(sync_id, sync_id)
                    since = len(tap.connections)
                    m = SyncRun(ctx, view).run()
                    requests = _compared(tap.exchanges(since))
                    delta = pq.read_table(stores[ex].delta(sync_id)).sort_by("k").to_pylist()
                    synced[ex] = (m, requests, delta)
                (arrow, arrow_requests, arrow_delta), (on_spark, spark_requests, spark_delta) = synced.values()
                assert (arrow.executor, arrow.spark_jobs, on_spark.executor) == ("arrow", 0, "spark"), (name, n)
                assert [t for t, _ in arrow_requests] == [t for t, _ in spark_requests], (name, n)
                for (target, a), (_, s) in zip(arrow_requests, spark_requests, strict=True):
                    assert a == s, f"{name} sync {n}: {target} differs ({len(a)} and {len(s)} bytes)"
                assert arrow_delta == spark_delta, (name, n)
                assert _rows(stores["arrow"], view) == _rows(stores["spark"], view) == _rows_of(path), (name, n)
            # each took the path it is here for: groups formed, ranges bisected, keys reconciled
            done = {
                "group_hash": lambda m: m.groups_sent > 0,
                "range_checksum": lambda m: m.range_rounds > 1,
                "timestamp": lambda m: bool(m.timestamp["key_reconciliation"]) and not m.timestamp["reconciled"],
            }
            assert done[name](arrow) and done[name](on_spark), name
    finally:
        for tap in taps.values():
            tap.close()
        for agent in agents.values():
            agent.stop()
