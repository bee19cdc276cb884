"""Redefinition keeps the past: PUT stores a view's new definition, its next sync applies it.

On a SQLite source (tests/support/people.py) and the suite's killable service (one
PostgreSQL case, one view over two sources): a PUT that drops a column projects the stored
rows (nothing read at the source); one that adds a column and widens the WHERE reads the
new definition and its delta is exactly the difference from the old view (oracle: the old
rows read with the new column as NULL), updates where rows stay; history, change-feed positions and statistics survive; Parquet
answers spanning the redefinition are 409s naming the requests to make; a PUT while a
sync is under way is a 409; a redefine sync killed before its commit leaves the old
version, and the next sync redoes it. A view without a key (a multiset, repeated rows)
keeps its past too: its redefinition's lines are the count difference of each row.
"""

from __future__ import annotations

import io
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
from collections import Counter

import psycopg
import pyarrow.parquet as pq
import pytest

from tests.support.legacy import decimal_2
from tests.support.multisets import check_sync as check_multiset
from tests.support.oracle import check_sample, check_sync, expected_delta, keyed
from tests.support.people import KEY, People
from workloads.harness import start_agent

pytestmark = pytest.mark.integration

SOURCE = "redef"
#: Seconds a killed service is given to die once armed.
DIE_WITHIN_S = 300
#: The sample the projected view keeps (projected with it).
SAMPLE = 40
ALL = "SELECT p.id, p.name, p.city, p.score FROM redef.people p WHERE p.score >= 0"


class Source:
    """The People table, and the truth of any view over it (columns as the SELECT names them)."""

    def __init__(self, people: People):
        self.people = people

    def truth(self, columns: list[str], where: str) -> dict:
        with sqlite3.connect(self.people.path) as c:
            rows = c.execute(f"SELECT {', '.join(columns)} FROM people WHERE {where}").fetchall()
        return keyed([dict(zip(columns, r)) for r in rows], KEY)


@pytest.fixture(scope="module")
def wh(tmp_path_factory, logs_dir, special_service):
    root = tmp_path_factory.mktemp("redefine")
    people = People(root / "people.db", rows=3_000, seed=36)
    agent = start_agent(f"sqlite:///{people.path}", logs_dir)
    special_service.api.add_source(SOURCE, agent.url)
    yield special_service, Source(people)
    special_service.kill_file.unlink(missing_ok=True)
    if special_service.proc.proc.poll() is not None:
        special_service.restart()
    agent.stop()


def _put(api, view: str, sql: str, **extra):
    return api.http.put(f"/v1/views/{view}", json={"sql": sql, **extra})


def _loaded(api, source: Source, view: str, sql: str, columns: list[str], where: str, **extra) -> list[dict]:
    """Define, load and sync once after a change; the two sync records."""
    api.add_view(view, sql, strategy="group_hash", **extra)
    load = api.sync(view)
    check_sync(api, view, KEY, {}, source.truth(columns, where), load)
    before = source.truth(columns, where)
    source.people.change(updates=60, inserts=20, deletes=10)
    sync = api.sync(view)
    check_sync(api, view, KEY, before, source.truth(columns, where), sync)
    return [load, sync]


def _cli(service, *args: str) -> subprocess.CompletedProcess:
    """The command line as a user runs it: a process of its own, over HTTP."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DELTASIEVE_")}
    return subprocess.run(
        [sys.executable, "-m", "deltasieve_cli", *args],
        env={**env, "DELTASIEVE_URL": service.url},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _statistics(api, view: str) -> dict:
    """The view's one site's update and deletion statistics (GET .../statistics)."""
    r = api.http.get(f"/v1/views/{view}/statistics")
    assert r.status_code == 200, r.text
    return r.json()["sites"][0]


def _feed(api, view: str, after: str, fmt: str = "ndjson"):
    return api.http.get(f"/v1/views/{view}/changes", params={"after": after, "format": fmt})


def test_a_put_dropping_a_column_projects_the_stored_rows(wh):
    service, source = wh
    api, view = service.api, "rd_drop"
    load, last = _loaded(api, source, view, ALL, ["id", "name", "city", "score"], "score >= 0", sample_size=SAMPLE)
    narrow = "SELECT p.id, p.name, p.score FROM redef.people p WHERE p.score >= 0"
    learned = _statistics(api, view)
    r = _put(api, view, narrow)
    assert r.status_code == 200, r.text
    assert r.json()["columns"] == ["id", "name", "score"] and r.json()["redefinition_pending"] is True
    # until the next sync the rows are the old ones, city included
    assert keyed(api.rows(view), KEY) == source.truth(["id", "name", "city", "score"], "score >= 0")
    # the source changes meanwhile: the sync that projects finds those changes as any sync would
    before = {k: {c: row[c] for c in ("id", "name", "score")} for k, row in keyed(api.rows(view), KEY).items()}
    source.people.change(updates=30, inserts=10, deletes=5)
    truth = source.truth(["id", "name", "score"], "score >= 0")
    sync = api.sync(view)
    assert sync["status"] == "succeeded", sync["error"]
    m = sync["metrics"]
    assert sync["trigger"] == "redefine" and m["redefinition"]["method"] == "projection", m
    assert m["redefinition"]["dropped"] == ["city"], m["redefinition"]
    assert m["bytes_from_agent"] < load["metrics"]["bytes_from_agent"] / 4, "the kept columns are not read again"
    schema = {
        "sync": sync["id"],
        "op": "schema",
        "columns": [{"name": "id", "type": "int"}, {"name": "name", "type": "text"}, {"name": "score", "type": "int"}],
        "key": ["id"],
    }
    assert api.delta(view, sync["id"])[0] == schema
    check_sync(api, view, KEY, before, truth, sync)  # the schema line, then exactly the source's changes
    kept = _statistics(api, view)
    assert kept["update_statistics"]["max_tno"] == learned["update_statistics"]["max_tno"] + 1, "statistics go on"
    sample, _ = check_sample(api, view, KEY, truth, SAMPLE)
    assert len(sample) >= SAMPLE - 5, "the sample is projected with the rows (less those deleted meanwhile)"
    assert api.http.get(f"/v1/views/{view}").json()["redefinition_pending"] is False
    # history and feed positions kept: the feed after the last sync before the PUT says it all
    syncs = api.http.get(f"/v1/views/{view}/syncs").json()
    assert [s["id"] for s in syncs] == [sync["id"], last["id"], load["id"]]
    lines = [line for line in _feed(api, view, last["id"]).text.splitlines() if line]
    assert '"op":"schema"' in lines[0] and len(lines) == len(api.delta(view, sync["id"])), lines[:3]
    # the next sync is an ordinary one, exact, on the projected rows
    before = keyed(api.rows(view), KEY)
    source.people.change(updates=60, inserts=20, deletes=10)
    after = api.sync(view)
    assert after["trigger"] == "api", after
    check_sync(api, view, KEY, before, source.truth(["id", "name", "score"], "score >= 0"), after)


def test_a_put_adding_a_column_and_widening_the_where_gives_the_exact_difference(wh):
    service, source = wh
    api, view = service.api, "rd_where"
    old_cols, new_cols = ["id", "name", "score"], ["id", "name", "city", "score"]
    load, last = _loaded(
        api,
        source,
        view,
        "SELECT p.id, p.name, p.score FROM redef.people p WHERE p.score >= 500",
        old_cols,
        "score >= 500",
    )
    wider = "SELECT p.id, p.name, p.city, p.score FROM redef.people p WHERE p.score >= 200"
    learned = _statistics(api, view)
    assert _put(api, view, wider).status_code == 200
    old = {k: {**row, "city": None} for k, row in keyed(api.rows(view), KEY).items()}
    assert set(next(iter(keyed(api.rows(view), KEY).values()))) == set(old_cols), "old rows until the sync"
    served = api.http.get(f"/v1/views/{view}/rows")
    assert [c["name"] for c in json.loads(served.headers["x-columns"])] == old_cols
    assert _cli(service, "rows", view, "--format", "csv").stdout.splitlines()[0] == '"id","name","score"'
    source.people.change(updates=60, inserts=20, deletes=10)  # the source moves on too
    truth = source.truth(new_cols, "score >= 200")
    sync = api.sync(view)
    assert sync["status"] == "succeeded" and sync["trigger"] == "redefine", sync
    m = sync["metrics"]
    assert m["redefinition"]["method"] == "read" and m["redefinition"]["matched_by_key"] is True, m
    assert m["redefinition"]["added"] == ["city"] and m["redefinition"]["statistics_kept_sites"] == [0]
    lines = api.delta(view, sync["id"])
    assert lines[0]["op"] == "schema" and [c["name"] for c in lines[0]["columns"]] == new_cols
    want = expected_delta(old, truth)
    got = {tuple(line["row"][k] for k in KEY): (line["op"], line["row"]) for line in lines[1:]}
    assert {k: op for k, (op, _) in got.items()} == {k: op for k, (op, _) in want.items()}
    for k, (op, row) in want.items():
        if op != "delete":
            assert got[k][1] == row, (got[k], row)
    stayed = [k for k in old if k in truth]
    assert stayed and all(got.get(k, ("update",))[0] == "update" for k in stayed), "rows that stay are updates"
    counts = [sum(1 for op, _ in want.values() if op == o) for o in ("insert", "update", "delete")]
    assert [m["rows_inserted"], m["rows_updated"], m["rows_deleted"]] == counts
    assert keyed(api.rows(view), KEY) == truth
    # the keys that survive keep their statistics (one sync more), the deletion statistics stay
    kept = _statistics(api, view)
    assert kept["deletion_statistics"] == learned["deletion_statistics"]
    assert kept["update_statistics"]["max_tno"] == learned["update_statistics"]["max_tno"] + 1
    assert kept["update_statistics"]["tuples_ever_updated"] > 0, "updates seen survive with their keys"

    # the feed from before the PUT crosses it in NDJSON: the old lines, the schema, the difference
    text = _feed(api, view, load["id"]).text
    ops = [(line.split('"op":"')[1].split('"')[0]) for line in text.splitlines() if line]
    assert ops.count("schema") == 1 and ops.index("schema") == len(api.delta(view, last["id"]))
    # in Parquet it is a 409 that says where to resume; each part it names works
    refused = _feed(api, view, load["id"], "parquet")
    assert refused.status_code == 409, refused.text
    detail = refused.json()["detail"]
    assert sync["id"] in detail and last["id"] in detail and "limit_syncs=1" in detail, detail
    first = api.http.get(
        f"/v1/views/{view}/changes", params={"after": load["id"], "limit_syncs": 1, "format": "parquet"}
    )
    assert first.status_code == 200 and pq.read_table(io.BytesIO(first.content)).num_rows == len(
        api.delta(view, last["id"])
    )
    assert _feed(api, view, last["id"], "parquet").status_code == 409
    after = _feed(api, view, sync["id"], "parquet")
    assert after.status_code == 200, after.text
    delta = api.http.get(f"/v1/views/{view}/syncs/{sync['id']}/delta", params={"format": "parquet"})
    assert delta.status_code == 409 and "format=ndjson" in delta.json()["detail"], delta.text
    # the command line converts NDJSON to CSV here: it refuses alike, with the commands to run
    csv = _cli(service, "changes", view, "--after", load["id"], "--format", "csv")
    assert csv.returncode == 1 and "Traceback" not in csv.stderr, csv.stderr
    assert f"--after {load['id']} --limit-syncs 1 --format" in csv.stderr and sync["id"] in csv.stderr, csv.stderr
    assert _cli(service, "changes", view, "--after", sync["id"], "--format", "csv").returncode == 0
    # with_before across it: the old lines' before rows in the old columns, the difference's null
    with_before = api.ndjson(f"/v1/views/{view}/changes?after={load['id']}&with_before=true")
    assert all(line.get("before") is None for line in with_before if line.get("sync") == sync["id"])
    # the next sync is ordinary and exact
    before = truth
    source.people.change(updates=60, inserts=20, deletes=10)
    check_sync(api, view, KEY, before, source.truth(new_cols, "score >= 200"), api.sync(view))


class Visits:
    """A table without a key at the source (in the People database): few values, so that
    rows repeat, and NULLs."""

    COLUMNS = ("city", "kind", "n")

    def __init__(self, path, seed: int):
        self.path, self.rng = path, random.Random(seed)
        with sqlite3.connect(path) as c:
            c.execute("CREATE TABLE visits (city TEXT, kind TEXT, n INTEGER NOT NULL)")
        self.insert(300)

    def insert(self, rows: int) -> None:
        r = self.rng
        new = [(r.choice(["Oslo", "Lima", None]), r.choice(["a", "b", None]), r.randint(0, 5)) for _ in range(rows)]
        with sqlite3.connect(self.path) as c:
            c.executemany("INSERT INTO visits VALUES (?, ?, ?)", new)

    def change(self) -> None:
        """Some rows go (one copy of a repeated row among them), some come."""
        with sqlite3.connect(self.path) as c:
            c.execute("DELETE FROM visits WHERE rowid IN (SELECT rowid FROM visits ORDER BY random() LIMIT 25)")
        self.insert(30)

    def truth(self, columns: list[str], where: str) -> Counter:
        with sqlite3.connect(self.path) as c:
            return Counter(c.execute(f"SELECT {', '.join(columns)} FROM visits WHERE {where}").fetchall())


def test_a_view_without_a_key_keeps_its_past_and_its_redefinition_gives_the_exact_count_difference(wh):
    """A multiset view: a column added and another WHERE; the redefine sync's lines are, per
    distinct row, the difference of its counts from the old view read with the new column NULL."""
    service, source = wh
    api, view = service.api, "rd_multiset"
    visits = Visits(source.people.path, seed=361)
    old_cols, new_cols = ["city", "n"], ["city", "kind", "n"]
    api.add_view(view, "SELECT v.city, v.n FROM redef.visits v WHERE v.n >= 3", strategy="group_hash")
    load = api.sync(view)
    before = visits.truth(old_cols, "n >= 3")
    check_multiset(api, view, old_cols, Counter(), before, load)
    visits.change()
    last = api.sync(view)
    check_multiset(api, view, old_cols, before, visits.truth(old_cols, "n >= 3"), last)
    old = Counter({(city, None, n): k for (city, n), k in visits.truth(old_cols, "n >= 3").items()})
    r = _put(api, view, "SELECT v.city, v.kind, v.n FROM redef.visits v WHERE v.n >= 2")
    assert r.status_code == 200 and r.json()["redefinition_pending"] is True and r.json()["key"] == [], r.text
    visits.change()  # the source moves on too
    truth = visits.truth(new_cols, "n >= 2")
    sync = api.sync(view)
    assert sync["status"] == "succeeded" and sync["trigger"] == "redefine", sync
    m = sync["metrics"]
    assert m["redefinition"]["method"] == "read" and m["redefinition"]["added"] == ["kind"], m
    lines = api.delta(view, sync["id"])
    assert lines[0] == {
        "sync": sync["id"],
        "op": "schema",
        "columns": [{"name": "city", "type": "text"}, {"name": "kind", "type": "text"}, {"name": "n", "type": "int"}],
        "key": [],
    }
    inserted, deleted = Counter(), Counter()
    for line in lines[1:]:
        row = tuple(line["row"][c] for c in new_cols)
        assert row not in inserted and row not in deleted, f"{row} on two lines"
        assert "count" not in line or line["count"] > 1, line
        (inserted if line["op"] == "insert" else deleted)[row] = line.get("count", 1)
    assert inserted == truth - old and deleted == old - truth
    assert any(line.get("count", 1) > 1 for line in lines[1:]), "some line must carry a count"
    assert (m["rows_inserted"], m["rows_updated"], m["rows_deleted"]) == (
        sum(inserted.values()),
        0,
        sum(deleted.values()),
    ), m
    assert Counter(tuple(r[c] for c in new_cols) for r in api.rows(view)) == truth
    # history kept; the feed from before the PUT crosses it in NDJSON
    syncs = api.http.get(f"/v1/views/{view}/syncs").json()
    assert [s["id"] for s in syncs] == [sync["id"], last["id"], load["id"]]
    feed = [json.loads(line) for line in _feed(api, view, load["id"]).text.splitlines() if line]
    assert [line["op"] for line in feed].index("schema") == len(api.delta(view, last["id"]))
    assert len(feed) == len(api.delta(view, last["id"])) + len(lines)
    # the next sync is an ordinary one, exact
    visits.change()
    after = api.sync(view)
    assert after["trigger"] == "api", after
    check_multiset(api, view, new_cols, truth, visits.truth(new_cols, "n >= 2"), after)


def test_a_put_while_a_sync_is_under_way_is_409_and_an_identical_put_changes_nothing(wh):
    service, source = wh
    api, view = service.api, "rd_busy"
    api.add_view(view, ALL, strategy="group_hash")
    api.sync(view)
    r = api.http.post(f"/v1/views/{view}/syncs")
    assert r.status_code == 202
    busy = _put(api, view, "SELECT p.id, p.score FROM redef.people p WHERE p.score >= 0")
    assert busy.status_code == 409 and r.json()["id"] in busy.json()["detail"], busy.text
    api.wait_idle()
    same = _put(api, view, ALL)
    assert same.status_code == 200 and same.json()["redefinition_pending"] is False
    assert api.sync(view)["trigger"] == "api"
    # the CLI redefines as the API does (a process of its own, over HTTP)
    narrow = "SELECT p.id, p.score FROM redef.people p WHERE p.score >= 0"
    cli = _cli(service, "view", "redefine", view, "--sql", narrow, "--json")
    assert cli.returncode == 0, cli.stderr
    shown = json.loads(cli.stdout)
    assert shown["columns"] == ["id", "score"] and shown["redefinition_pending"] and shown["strategy"] == "group_hash"
    sync = api.sync(view)
    assert sync["trigger"] == "redefine" and sync["metrics"]["redefinition"]["method"] == "projection", sync


def test_a_killed_redefine_sync_leaves_the_old_version_and_the_next_redoes_it(wh):
    service, source = wh
    api, view = service.api, "rd_crash"
    cols = ["id", "name", "city", "score"]
    api.add_view(view, ALL, strategy="group_hash")
    check_sync(api, view, KEY, {}, source.truth(cols, "score >= 0"), api.sync(view))
    old = keyed(api.rows(view), KEY)
    assert (
        _put(api, view, "SELECT p.id, p.name, p.city, p.score FROM redef.people p WHERE p.score >= 300").status_code
        == 200
    )
    service.kill_file.write_text("delta_written")
    r = api.http.post(f"/v1/views/{view}/syncs")
    assert r.status_code == 202, r.text
    service.proc.proc.wait(timeout=DIE_WITHIN_S)
    assert service.proc.proc.returncode == -signal.SIGKILL, service.proc.tail()
    service.restart()
    api = service.api
    record = api.http.get(f"/v1/views/{view}/syncs/{r.json()['id']}").json()
    assert record["status"] == "failed" and record["trigger"] == "redefine", record
    assert keyed(api.rows(view), KEY) == old, "a killed redefine sync changed the view"
    assert api.http.get(f"/v1/views/{view}").json()["redefinition_pending"] is True
    sync = api.sync(view)
    assert sync["trigger"] == "redefine", sync
    truth = source.truth(cols, "score >= 300")
    want = expected_delta(old, truth)
    m = sync["metrics"]
    counts = [sum(1 for o, _ in want.values() if o == op) for op in ("insert", "update", "delete")]
    assert [m["rows_inserted"], m["rows_updated"], m["rows_deleted"]] == counts
    assert keyed(api.rows(view), KEY) == truth


@pytest.mark.engines("postgres")
def test_on_postgresql_a_column_swapped_and_the_where_changed_give_the_exact_difference(wh, source, logs_dir):
    """One PostgreSQL case: numeric and boolean columns, a column dropped and one added with
    another WHERE in one PUT (read in full); the difference by key against the database."""
    service, _ = wh
    api, view = service.api, "rd_pg"
    with psycopg.connect(source.owner_url, autocommit=True) as c:
        c.execute("CREATE TABLE accounts (id bigint PRIMARY KEY, owner text, amount numeric(12,2), active boolean)")
        c.execute(
            "INSERT INTO accounts SELECT i, 'owner ' || i, (i * 7 % 500) / 4.0, i % 3 <> 0 FROM generate_series(1, 400) i"
        )
    agent = start_agent(source.reader_url, logs_dir)

    def truth(sql: str, columns: list[str]) -> dict:
        with psycopg.connect(source.owner_url) as c:
            rows = c.execute(sql).fetchall()
        fixed = [
            {n: (decimal_2(v) if n == "amount" and v is not None else v) for n, v in zip(columns, r)} for r in rows
        ]
        return keyed(fixed, KEY)

    try:
        api.add_source("pgre", agent.url)
        api.add_view(view, "SELECT a.id, a.owner, a.amount FROM pgre.accounts a WHERE a.active", strategy="group_hash")
        check_sync(
            api,
            view,
            KEY,
            {},
            truth("SELECT id, owner, amount FROM accounts WHERE active", ["id", "owner", "amount"]),
            api.sync(view),
        )
        old = {k: {"id": r["id"], "amount": r["amount"], "active": None} for k, r in keyed(api.rows(view), KEY).items()}
        new_sql = "SELECT a.id, a.amount, a.active FROM pgre.accounts a WHERE a.amount > 20"
        assert _put(api, view, new_sql).status_code == 200
        with psycopg.connect(source.owner_url, autocommit=True) as c:
            c.execute("UPDATE accounts SET amount = amount + 1 WHERE id % 10 = 0")
        sync = api.sync(view)
        assert sync["trigger"] == "redefine" and sync["metrics"]["redefinition"]["method"] == "read", sync
        want = truth("SELECT id, amount, active FROM accounts WHERE amount > 20", ["id", "amount", "active"])
        assert keyed(api.rows(view), KEY) == want
        lines = api.delta(view, sync["id"])
        assert lines[0]["op"] == "schema" and lines[0]["columns"][1] == {"name": "amount", "type": "decimal(12,2)"}
        got = {tuple(line["row"][k] for k in KEY): (line["op"], line["row"]) for line in lines[1:]}
        expected = expected_delta(old, want)
        assert {k: op for k, (op, _) in got.items()} == {k: op for k, (op, _) in expected.items()}
        assert all(got[k][1] == row for k, (op, row) in expected.items() if op != "delete")
    finally:
        agent.stop()


def test_a_view_over_two_sources_is_redefined_by_its_joined_rows(wh):
    """Two sites (the same table behind a second source name): the view's stored rows are
    joined afresh and compared with the old ones by key."""
    service, source = wh
    api, view = service.api, "rd_join"
    agent_url = api.http.get(f"/v1/sources/{SOURCE}").json()["url"]
    api.add_source("redef2", agent_url)
    join = (
        "SELECT p.id, p.name, q.id AS qid, q.city{} FROM redef.people p JOIN redef2.people q ON p.id = q.id"
        " WHERE p.score >= {}"
    )

    def truth(where: str, score: bool = False) -> dict:
        rows = source.truth(["id", "name", "city", "score"], where)
        return {
            k: {"id": r["id"], "name": r["name"], "qid": r["id"], "city": r["city"]}
            | ({"score": r["score"]} if score else {})
            for k, r in rows.items()
        }

    created = api.add_view(view, join.format("", 100), strategy="group_hash")
    assert len(created["sites"]) == 2 and created["key"][0] == "id", created
    key = created["key"]
    rekey = lambda rows: {tuple(r[c] for c in key): r for r in rows.values()}  # noqa: E731
    check_sync(api, view, key, {}, rekey(truth("score >= 100")), api.sync(view))
    old = {k: {**r, "score": None} for k, r in keyed(api.rows(view), key).items()}
    assert _put(api, view, join.format(", q.score", 50)).status_code == 200
    sync = api.sync(view)
    assert sync["trigger"] == "redefine" and sync["metrics"]["redefinition"]["method"] == "read", sync
    want = rekey(truth("score >= 50", score=True))
    assert keyed(api.rows(view), key) == want
    lines = api.delta(view, sync["id"])
    got = {tuple(line["row"][k] for k in key): line["op"] for line in lines[1:]}
    assert got == {k: op for k, (op, _) in expected_delta(old, want).items()}
    assert set(got.values()) == {"insert", "update"}, "every old row stays (a wider WHERE), filled in"
    source.people.change(updates=30, inserts=10, deletes=5)
    check_sync(api, view, key, want, rekey(truth("score >= 50", score=True)), api.sync(view))
