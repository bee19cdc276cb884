"""The change feed (GET /v1/views/{name}/changes), Parquet answers and GET /metrics, against
the session's service and a real agent over a small SQLite source.

One module fixture runs the syncs all tests read: a load and three rounds of inserts,
updates (some keys twice) and deletes on a keyed view, a load and a round of a view
without a key whose drifting rows `match` pairs into updates, and a view whose table is
dropped so that its sync fails.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import random
import shutil
import sqlite3
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from prometheus_client.parser import text_string_to_metric_families

from service.jsonvalues import to_json_value
from tests.support.pairing import MATCH
from workloads.harness import start_agent

pytestmark = pytest.mark.integration

VIEW, FAILING, KEYLESS, JOINED = "feed_items", "feed_doomed", "feed_readings", "feed_joined"
PARQUET = "application/vnd.apache.parquet"


def metrics(api) -> dict[tuple[str, tuple], float]:
    """GET /metrics parsed: {(sample name, sorted labels): value}."""
    r = api.http.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain"), r.text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def value(sample: dict, name: str, **labels) -> float:
    return sample.get((name, tuple(sorted(labels.items()))), 0.0)


def lines(r) -> list[dict]:
    assert r.status_code == 200, r.text
    return [json.loads(line) for line in r.text.splitlines() if line]


def _rows(n0: int, n: int, rng: random.Random) -> list[tuple]:
    return [(i, f"item {i}", round(rng.uniform(1, 500), 2), rng.random()) for i in range(n0, n0 + n)]


def _change(db: Path, rng: random.Random, start: int, repeat: list[int]) -> None:
    """Insert 4 rows from `start`, update 6 (and every key in `repeat`), delete 3."""
    with sqlite3.connect(db) as c:
        keys = [k for (k,) in c.execute("SELECT id FROM items ORDER BY id")]
        c.executemany("INSERT INTO items VALUES (?, ?, ?, ?)", _rows(start, 4, rng))
        updated = sorted(set(rng.sample(keys, 6)) | set(repeat))
        c.executemany(
            "UPDATE items SET name = ?, price = ? WHERE id = ?",
            [(f"renamed {k} {rng.random():.3f}", round(rng.uniform(1, 500), 2), k) for k in updated],
        )
        gone = rng.sample([k for k in keys if k not in updated], 3)
        c.executemany("DELETE FROM items WHERE id = ?", [(k,) for k in gone])


@pytest.fixture(scope="module")
def history(api, tmp_path_factory, logs_dir):
    """Syncs of VIEW (load + 3 rounds) with the view's rows after each, and the metrics
    before and after them and a failed sync of FAILING."""
    rng = random.Random(21)
    db = tmp_path_factory.mktemp("feed") / "feed.db"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price DECIMAL(8,2), score REAL)")
        c.execute("CREATE TABLE doomed (id INTEGER PRIMARY KEY, v TEXT)")
        c.executemany("INSERT INTO items VALUES (?, ?, ?, ?)", _rows(0, 40, rng))
        c.executemany("INSERT INTO doomed VALUES (?, ?)", [(i, str(i)) for i in range(5)])
        c.execute("CREATE TABLE owners (id INTEGER PRIMARY KEY, owner TEXT)")
        c.executemany("INSERT INTO owners VALUES (?, ?)", [(i, f"owner {i % 7}") for i in range(0, 40, 2)])
        c.execute("CREATE TABLE readings (at INTEGER NOT NULL, v REAL)")
        readings = [(i, i / 4) for i in range(0, 60, 3)]
        c.executemany("INSERT INTO readings VALUES (?, ?)", readings + readings[:5])  # 5 rows twice
    agent = start_agent(f"sqlite:///{db}", logs_dir)
    try:
        api.add_source("feed_src", agent.url)
        api.add_source("feed_src2", agent.url)  # the same agent as a second source: a view of two sites
        api.add_view(VIEW, "SELECT i.id, i.name, i.price, i.score FROM feed_src.items i", strategy="group_hash")
        api.add_view(FAILING, "SELECT d.id, d.v FROM feed_src.doomed d")
        api.add_view(KEYLESS, "SELECT r.at, r.v FROM feed_src.readings r", match=MATCH)
        api.add_view(
            JOINED,
            "SELECT i.id, i.name, o.id AS oid, o.owner FROM feed_src.items i JOIN feed_src2.owners o ON o.id = i.id",
        )
        before = metrics(api)
        syncs, states, joined, joined_states = [], [], [], []
        for round_ in range(4):
            if round_:
                _change(db, rng, 1000 + 10 * round_, repeat=[8])  # key 8 changes every round
            record = api.sync(VIEW)
            assert record["status"] == "succeeded", record["error"]
            syncs.append(record)
            states.append({r["id"]: r for r in api.rows(VIEW)})
            if round_ < 2:
                joined.append(api.sync(JOINED))
                assert joined[-1]["status"] == "succeeded", joined[-1]["error"]
                joined_states.append({r["id"]: r for r in api.rows(JOINED)})
        assert api.sync(FAILING)["status"] == "succeeded"
        keyless = [api.sync(KEYLESS)]
        with sqlite3.connect(db) as c:  # drift within epsilon (pairs), a copy gone, a row new
            c.execute("UPDATE readings SET at = at + 1, v = v + 0.25 WHERE at IN (30, 33, 36)")
            c.execute("DELETE FROM readings WHERE rowid = (SELECT max(rowid) FROM readings)")
            c.execute("INSERT INTO readings VALUES (1000, 1.5), (1000, 1.5)")
        keyless.append(api.sync(KEYLESS))
        assert all(k["status"] == "succeeded" for k in keyless), keyless
        with sqlite3.connect(db) as c:
            c.execute("DROP TABLE doomed")
        failed = api.sync(FAILING)
        assert failed["status"] == "failed"
        after = metrics(api)
        yield {
            "syncs": syncs,
            "states": states,
            "before": before,
            "after": after,
            "failed": failed,
            "keyless": keyless,
            "joined": joined,
            "joined_states": joined_states,
        }
    finally:
        agent.stop()


def test_the_feed_is_the_per_sync_deltas_in_order(api, history):
    ids = [s["id"] for s in history["syncs"]]
    r = api.http.get(f"/v1/views/{VIEW}/changes")
    assert r.headers["content-type"].startswith("application/x-ndjson")
    assert r.headers["x-last-sync"] == ids[-1] and r.headers["x-syncs"] == "4" and r.headers["x-more-syncs"] == "false"
    expected = [{"sync": i, **line} for i in ids for line in api.delta(VIEW, i)]
    assert lines(r) == expected
    assert [line["op"] for line in expected[:40]] == ["insert"] * 40  # the load
    ops = {line["op"] for line in expected[40:]}
    assert ops == {"insert", "update", "delete"}

    middle = api.http.get(f"/v1/views/{VIEW}/changes", params={"after": ids[1]})
    assert lines(middle) == [line for line in expected if line["sync"] in ids[2:]]
    assert middle.headers["x-last-sync"] == ids[-1]
    one = api.http.get(f"/v1/views/{VIEW}/changes", params={"after": ids[1], "limit_syncs": 1})
    assert lines(one) == [line for line in expected if line["sync"] == ids[2]]
    assert one.headers["x-last-sync"] == ids[2] and one.headers["x-more-syncs"] == "true"
    caught_up = api.http.get(f"/v1/views/{VIEW}/changes", params={"after": ids[-1]})
    assert lines(caught_up) == [] and caught_up.headers["x-last-sync"] == ids[-1]
    assert caught_up.headers["x-syncs"] == "0"


def test_a_failed_sync_is_a_place_to_resume_from_and_unknown_ones_are_404(api, history):
    failed = history["failed"]["id"]
    r = api.http.get(f"/v1/views/{FAILING}/changes", params={"after": failed})
    assert lines(r) == [] and r.headers["x-last-sync"] == failed
    assert api.http.get(f"/v1/views/{VIEW}/changes", params={"after": "no-such-sync"}).status_code == 404
    # a sync of another view is not one of this view's
    assert api.http.get(f"/v1/views/{VIEW}/changes", params={"after": failed}).status_code == 404
    assert api.http.get("/v1/views/feed_nope/changes").status_code == 404
    for bad in ({"limit_syncs": 0}, {"format": "xml"}, {"with_before": "maybe"}):
        assert api.http.get(f"/v1/views/{VIEW}/changes", params=bad).status_code == 422, bad
    sync = history["syncs"][0]["id"]
    assert api.http.get(f"/v1/views/{VIEW}/syncs/{sync}/delta", params={"format": "csv"}).status_code == 422
    assert api.http.get(f"/v1/views/{VIEW}/rows", params={"format": "json"}).status_code == 422


def test_with_before_updates_carry_the_row_they_replaced(api, history):
    ids, states = [s["id"] for s in history["syncs"]], history["states"]
    feed = lines(api.http.get(f"/v1/views/{VIEW}/changes", params={"with_before": "true"}))
    plain = lines(api.http.get(f"/v1/views/{VIEW}/changes"))
    assert [{k: v for k, v in line.items() if k != "before"} for line in feed] == plain
    updates = 0
    for line in feed:
        k = ids.index(line["sync"])
        if line["op"] == "update":
            updates += 1
            assert line["before"] == states[k - 1][line["row"]["id"]]
            assert line["before"] != line["row"]
        else:
            assert "before" not in line
    assert updates >= 3 * 6 and sum(1 for line in feed if line["op"] == "update" and line["row"]["id"] == 8) == 3
    # the per-sync delta and the feed from the middle agree with the whole feed
    for k in (1, 3):
        per_sync = lines(api.http.get(f"/v1/views/{VIEW}/syncs/{ids[k]}/delta", params={"with_before": "true"}))
        assert [{"sync": ids[k], **line} for line in per_sync] == [line for line in feed if line["sync"] == ids[k]]
    middle = lines(api.http.get(f"/v1/views/{VIEW}/changes", params={"after": ids[2], "with_before": "true"}))
    assert middle == [line for line in feed if line["sync"] == ids[3]]


def _json_lines(table, *, feed: bool) -> list[dict]:
    out = []
    for record in table.to_pylist():
        line = {"sync": record["sync"]} if feed else {}
        line["op"] = record["op"]
        line["row"] = {c: to_json_value(v) for c, v in record["row"].items()}
        if record.get("changed") is not None:  # on updates: the columns they changed
            line["changed"] = record["changed"]
        if "before" in record and record["op"] == "update":
            line["before"] = {c: to_json_value(v) for c, v in record["before"].items()}
        out.append(line)
    return out


def _parquet(api, path: str, **params):
    r = api.http.get(path, params={"format": "parquet", **params})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == PARQUET
    return pq.read_table(io.BytesIO(r.content)), r


def test_parquet_holds_what_ndjson_says(api, history):
    ids = [s["id"] for s in history["syncs"]]
    table, r = _parquet(api, f"/v1/views/{VIEW}/changes", with_before="true", after=ids[0])
    assert r.headers["x-last-sync"] == ids[-1]
    assert table.schema.names == ["sync", "op", "row", "changed", "before"]
    ndjson = api.http.get(f"/v1/views/{VIEW}/changes", params={"with_before": "true", "after": ids[0]})
    assert _json_lines(table, feed=True) == lines(ndjson)

    table, _ = _parquet(api, f"/v1/views/{VIEW}/syncs/{ids[2]}/delta")
    assert table.schema.names == ["op", "row", "changed"]
    assert _json_lines(table, feed=False) == api.delta(VIEW, ids[2])

    rows, r = _parquet(api, f"/v1/views/{VIEW}/rows")
    assert r.headers["x-last-sync"] == ids[-1] == api.http.get(f"/v1/views/{VIEW}/rows").headers["x-last-sync"]
    assert rows.schema.names == ["id", "name", "price", "score"]
    as_json = [{c: to_json_value(v) for c, v in row.items()} for row in rows.to_pylist()]
    assert sorted(as_json, key=lambda row: row["id"]) == sorted(api.rows(VIEW), key=lambda row: row["id"])

    empty, r = _parquet(api, f"/v1/views/{VIEW}/changes", after=ids[-1])
    assert empty.num_rows == 0 and empty.schema.names == ["sync", "op", "row", "changed"]


def test_a_view_without_a_key_feeds_counts_and_matched_old_rows(api, history):
    ids = [s["id"] for s in history["keyless"]]
    feed = lines(api.http.get(f"/v1/views/{KEYLESS}/changes", params={"with_before": "true"}))
    assert [{k: v for k, v in line.items() if k != "before"} for line in feed] == [
        {"sync": i, **line} for i in ids for line in api.delta(KEYLESS, i)
    ]
    second = [line for line in feed if line["sync"] == ids[1]]
    updates = [line for line in second if line["op"] == "update"]
    assert len(updates) == 3 and all(line["before"] == line["old"] for line in updates)
    assert {"op": "insert", "count": 2, "row": {"at": 1000, "v": 1.5}} in [
        {k: v for k, v in line.items() if k != "sync"} for line in second
    ]
    table, _ = _parquet(api, f"/v1/views/{KEYLESS}/changes", after=ids[0], with_before="true")
    assert table.schema.names == ["sync", "op", "count", "row", "changed", "old", "before"]
    records = table.to_pylist()
    assert [r["count"] if r["count"] > 1 else None for r in records] == [line.get("count") for line in second]
    assert [r["old"] for r in records] == [r["before"] for r in records]
    assert [r["old"] for r in records if r["op"] == "update"] == [line["old"] for line in updates]


def test_metrics_count_the_syncs(api, history):
    before, after, syncs = history["before"], history["after"], history["syncs"]

    def moved(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("deltasieve_syncs_total", view=VIEW, status="succeeded") == 4
    assert moved("deltasieve_syncs_total", view=VIEW, status="failed") == 0
    assert moved("deltasieve_syncs_total", view=FAILING, status="succeeded") == 1
    assert moved("deltasieve_syncs_total", view=FAILING, status="failed") == 1
    assert moved("deltasieve_sync_duration_seconds_count", view=VIEW, status="succeeded") == 4
    assert moved("deltasieve_sync_duration_seconds_sum", view=VIEW, status="succeeded") > 0
    for op, field in (("insert", "rows_inserted"), ("update", "rows_updated"), ("delete", "rows_deleted")):
        assert moved("deltasieve_rows_total", view=VIEW, op=op) == sum(s["metrics"][field] for s in syncs)
    assert moved("deltasieve_agent_sent_bytes_total", view=VIEW) == sum(s["metrics"]["bytes_to_agent"] for s in syncs)
    assert moved("deltasieve_agent_received_bytes_total", view=VIEW) == sum(
        s["metrics"]["bytes_from_agent"] for s in syncs
    )
    assert value(after, "deltasieve_syncs_running") == 0
    finished = dt.datetime.fromisoformat(syncs[-1]["finished_at"]).timestamp()
    assert abs(value(after, "deltasieve_last_success_timestamp_seconds", view=VIEW) - finished) < 5
    # counters never go back within the process
    now = metrics(api)
    assert all(v >= after[k] for k, v in now.items() if k[0].endswith("_total") and k in after)
    # a schedule shows as the view's interval, for a staleness alert of 2 × its period; gone with it
    assert ("deltasieve_schedule_interval_seconds", (("view", VIEW),)) not in now
    r = api.http.patch(f"/v1/views/{VIEW}", json={"schedule": {"every_s": 86400}})
    assert r.status_code == 200, r.text
    try:
        assert value(metrics(api), "deltasieve_schedule_interval_seconds", view=VIEW) == 86400
    finally:
        assert api.http.patch(f"/v1/views/{VIEW}", json={"schedule": None}).status_code == 200
    assert ("deltasieve_schedule_interval_seconds", (("view", VIEW),)) not in metrics(api)


def _view_root(service, view: str) -> Path:
    args = service.proc.args
    return Path(args[args.index("--data-dir") + 1]) / "views" / view


def _versions(root: Path) -> dict[str, Path]:
    """Each stored version's directory by the sync that committed it."""
    return {json.loads(m.read_text())["sync_id"]: m.parent for m in root.glob("versions/*/meta.json")}


def test_a_view_of_two_sites_gives_old_rows_from_its_version_or_its_deltas(api, history, service):
    ids, states = [s["id"] for s in history["joined"]], history["joined_states"]
    path = f"/v1/views/{JOINED}/syncs/{ids[1]}/delta"
    delta = lines(api.http.get(path, params={"with_before": "true"}))
    updates = [line for line in delta if line["op"] == "update"]
    assert updates and all(line["before"] == states[0][line["row"]["id"]] for line in updates)
    assert [{k: v for k, v in line.items() if k != "before"} for line in delta] == api.delta(JOINED, ids[1])
    version = _versions(_view_root(service, JOINED))[ids[0]]
    aside = _aside(version)
    try:
        assert lines(api.http.get(path, params={"with_before": "true"})) == delta
    finally:
        shutil.move(aside, version)


def _aside(path: Path) -> Path:
    aside = path.with_name(path.name + ".aside")
    shutil.move(path, aside)
    return aside


def test_old_rows_from_a_stored_version_or_from_the_deltas_alike_and_410_when_neither(api, history, service):
    """with_before reads the rows before the first sync asked for from that sync's version
    while it is stored, else from every delta since the load; the feed needs its deltas."""
    ids = [s["id"] for s in history["syncs"]]
    root = _view_root(service, VIEW)
    versions = _versions(root)
    assert set(ids) <= set(versions), "a running service keeps the versions of its syncs"

    def changes(**params):
        return api.http.get(f"/v1/views/{VIEW}/changes", params=params)

    from_version = lines(changes(after=ids[2], with_before="true"))
    delta_from_version = lines(api.http.get(f"/v1/views/{VIEW}/syncs/{ids[3]}/delta", params={"with_before": "true"}))
    assert any(line["op"] == "update" for line in from_version)
    moved = [_aside(versions[ids[2]])]
    try:  # the same rows rolled forward from the deltas
        assert lines(changes(after=ids[2], with_before="true")) == from_version
        delta = api.http.get(f"/v1/views/{VIEW}/syncs/{ids[3]}/delta", params={"with_before": "true"})
        assert lines(delta) == delta_from_version
        moved.append(_aside(root / "deltas" / ids[1]))
        r = changes()
        assert r.status_code == 410 and ids[1] in r.json()["detail"], r.text
        assert "X-Last-Sync" in r.json()["detail"]
        assert changes(after=ids[1]).status_code == 200  # its own deltas are all there
        # the version before sync 3 is gone, and a delta before it: with_before cannot know the old rows
        r = changes(after=ids[2], with_before="true")
        assert r.status_code == 410 and "with_before" in r.json()["detail"], r.text
        # a stream whose own version before it is stored does not need the lost delta
        assert changes(after=ids[1], with_before="true").status_code == 200
    finally:
        for path in moved:
            shutil.move(path, path.with_name(path.name.removesuffix(".aside")))
