"""Views published as Delta Lake tables: after every sync the table, read with deltalake (not
with deltasieve's code), equals the source, and its history holds one commit per sync that
changed the view, carrying that sync's id.

On SQLite sources: randomized rounds on a keyed view with the default destination (a sync
without change adds no commit), one published to a bucket of an S3-protocol server, a multiset view, a view over two sources, a table view
gaining a column at its source (the Delta table's schema evolves), and the service
SIGKILLed between the view's commit and the destination's apply, and after the apply before
the catalog heard of it: restarted, nothing is applied twice or lost. The same two kills with
a view published to a PostgreSQL table (the session's server): restarted, its
`deltasieve_applied` lists every changing sync once, in order, and the table equals the source.
"""

from __future__ import annotations

import datetime as dt
import random
import sqlite3
import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest
from deltalake import DeltaTable

from tests.support.oracle import check_sync, keyed
from tests.support.people import KEY, VIEW_SQL, People
from tests.support.s3_server import ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY
from workloads.harness import Api, start_agent
from workloads.published import view_rows

pytestmark = pytest.mark.integration

SOURCE = "pub"
PEOPLE = "pub_people"
BAG = "pub_bag"
JOINED = "pub_joined"
ITEMS = "pub_items"
WAREHOUSE = "pub_wh"
WAREHOUSE_TABLE = "wh.people"
S3_VIEW = "pub_s3"
#: Seconds a destination is given to catch up after a sync.
CATCH_UP_S = 90
#: Seconds a killed service is given to die once armed.
DIE_WITHIN_S = 120
SYNC_ID = "deltasieve.sync_id"


class Bag:
    """A table without a key (repeated rows) and a table of cities in a second database."""

    def __init__(self, path: Path, geo: Path, seed: int):
        self.path, self.geo = path, geo
        self.rng = random.Random(seed)
        with sqlite3.connect(path) as c:
            c.execute("CREATE TABLE bag (a INTEGER, b TEXT)")
            c.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, v TEXT)")
            c.executemany("INSERT INTO bag VALUES (?, ?)", [self._row() for _ in range(300)])
            c.executemany("INSERT INTO items VALUES (?, ?)", [(i, f"item {i}") for i in range(200)])
        with sqlite3.connect(geo) as c:
            c.execute("CREATE TABLE cities (city TEXT PRIMARY KEY, country TEXT)")
            c.executemany(
                "INSERT INTO cities VALUES (?, ?)",
                [("Oslo", "NO"), ("Łódź", "PL"), ("São Paulo", "BR"), ("東京", "JP"), ("Zürich", "CH")],
            )

    def _row(self) -> tuple:
        return (self.rng.choice([1, 2, 3, None]), self.rng.choice(["x", "y", None]))

    def change(self) -> None:
        with sqlite3.connect(self.path) as c:
            for rowid in self.rng.sample([r[0] for r in c.execute("SELECT rowid FROM bag")], 15):
                c.execute("DELETE FROM bag WHERE rowid = ?", (rowid,))
            c.executemany("INSERT INTO bag VALUES (?, ?)", [self._row() for _ in range(20)])
        with sqlite3.connect(self.geo) as c:
            c.execute("UPDATE cities SET country = ? WHERE city = ?", (f"C{self.rng.randrange(99)}", "Oslo"))

    def bag(self) -> Counter:
        with sqlite3.connect(self.path) as c:
            return Counter(c.execute("SELECT a, b FROM bag").fetchall())

    def joined(self) -> dict:
        """The multi-site view's rows: every person whose city is in the cities table."""
        with sqlite3.connect(self.geo) as c:
            cities = dict(c.execute("SELECT city, country FROM cities").fetchall())
        with sqlite3.connect(self.path) as c:
            people = c.execute("SELECT id, name, city FROM people").fetchall()
        return {
            (i,): {"id": i, "name": name, "city": city, "country": cities[city]}
            for i, name, city in people
            if city in cities
        }

    def items(self) -> dict:
        with sqlite3.connect(self.path) as c:
            c.row_factory = sqlite3.Row
            return {(r["id"],): dict(r) for r in c.execute("SELECT * FROM items")}


@pytest.fixture(scope="module")
def wh(tmp_path_factory, logs_dir, special_service):
    root = tmp_path_factory.mktemp("destinations")
    people = People(root / "people.db", rows=2_000, seed=37)
    bag = Bag(root / "people.db", root / "geo.db", seed=37)
    agents = [start_agent(f"sqlite:///{people.path}", logs_dir), start_agent(f"sqlite:///{bag.geo}", logs_dir)]
    api = special_service.api
    api.add_source(SOURCE, agents[0].url)
    api.add_source("geo", agents[1].url)
    api.add_view(PEOPLE, VIEW_SQL.format(source=SOURCE))
    api.add_view(BAG, f"SELECT b.a, b.b FROM {SOURCE}.bag b")
    api.add_view(
        JOINED,
        f"SELECT p.id, p.name, c.city, c.country FROM {SOURCE}.people p JOIN geo.cities c ON p.city = c.city",
    )
    r = api.http.post("/v1/views", json={"name": ITEMS, "table": f"{SOURCE}.items"})
    assert r.status_code == 201, r.text
    yield special_service, people, bag
    special_service.kill_file.unlink(missing_ok=True)
    if special_service.proc.proc.poll() is not None:
        special_service.restart()
    for agent in agents:
        agent.stop()


@pytest.fixture(scope="module")
def warehouse(wh, postgres):
    """A view of the people published to a PostgreSQL table only, loaded; its changing syncs so far."""
    service, people, _ = wh
    owner = psycopg.connect(postgres.owner_url, autocommit=True)
    owner.execute("CREATE SCHEMA IF NOT EXISTS wh")
    spec = [{"kind": "postgres", "url": postgres.owner_url, "table": WAREHOUSE_TABLE}]
    service.api.add_view(WAREHOUSE, VIEW_SQL.format(source=SOURCE), destinations=spec)
    sync = service.api.sync(WAREHOUSE)
    _published(service.api, WAREHOUSE, sync["id"])
    yield owner, [sync["id"]]
    owner.close()


def _warehouse_rows(owner: psycopg.Connection) -> dict:
    rows = owner.execute(f"SELECT id, name, city, score FROM {WAREHOUSE_TABLE}").fetchall()
    return keyed(({"id": i, "name": n, "city": c, "score": s} for i, n, c, s in rows), KEY)


def _warehouse_applied(owner: psycopg.Connection) -> list[str]:
    """The syncs the warehouse recorded, in order; each recorded once: a sync applied again
    would move its row to a later `seq` (the destination's upsert), leaving a gap."""
    query = "SELECT sync_id, seq FROM wh.deltasieve_applied WHERE view = %s ORDER BY seq"
    rows = owner.execute(query, (WAREHOUSE,)).fetchall()
    seqs = [seq for _, seq in rows]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), f"a sync was applied again: {rows}"
    return [sync_id for sync_id, _ in rows]


def _killed_at(service, view: str, point: str) -> str:
    """Arm `point`, start a sync of `view`, see the service die there, restart it: the sync's id."""
    service.kill_file.write_text(point)
    r = service.api.http.post(f"/v1/views/{view}/syncs")
    assert r.status_code == 202, r.text
    sync_id = r.json()["id"]
    service.proc.proc.wait(timeout=DIE_WITHIN_S)  # killed by the armed point
    assert not service.kill_file.exists(), "the point was not reached"
    service.restart()
    assert service.api.http.get(f"/v1/views/{view}/syncs/{sync_id}").json()["status"] == "succeeded"
    return sync_id


def _published(api: Api, view: str, sync_id: str) -> dict:
    """The view's one destination once it holds `sync_id` with nothing left to apply."""
    deadline = time.monotonic() + CATCH_UP_S
    while True:
        (destination,) = api.http.get(f"/v1/views/{view}").json()["destinations"]
        if destination["applied_sync"] == sync_id and destination["lag_syncs"] == 0:
            assert destination["error"] is None, destination
            return destination
        assert time.monotonic() < deadline, f"destination of {view} did not catch up to {sync_id}: {destination}"
        time.sleep(0.2)


def _table(uri: str) -> DeltaTable:
    return DeltaTable(uri)


def _rows(uri: str) -> list[dict]:
    return view_rows(_table(uri)).to_pylist()


def _carried(uri: str) -> list[str]:
    """The sync ids of the table's commits, oldest first (maintenance commits carry none)."""
    return [c[SYNC_ID] for c in reversed(_table(uri).history()) if SYNC_ID in c]


def _changing(sync: dict) -> bool:
    m = sync["metrics"]
    return m["rows_inserted"] + m["rows_updated"] + m["rows_deleted"] > 0


def test_keyed_view_rounds(wh):
    service, people, _ = wh
    api = service.api
    view = api.http.get(f"/v1/views/{PEOPLE}").json()
    (spec,) = view["destinations"]
    assert spec["kind"] == "delta" and spec["uri"] == str(service.data_dir / "tables" / PEOPLE)
    rng = random.Random(37)
    before: dict = {}
    changing: list[str] = []
    for round_ in range(6):
        if round_ and round_ != 3:  # round 3: a sync with nothing to change
            people.change(updates=rng.randrange(5, 40), inserts=rng.randrange(0, 20), deletes=rng.randrange(0, 10))
        truth = people.truth()
        sync = api.sync(PEOPLE)
        check_sync(api, PEOPLE, KEY, before, truth, sync)
        if _changing(sync) or round_ == 0:
            changing.append(sync["id"])
        destination = _published(api, PEOPLE, sync["id"])
        assert keyed(_rows(destination["uri"]), KEY) == truth, f"round {round_}: the Delta table differs"
        assert _carried(destination["uri"]) == changing, "one commit per changing sync, in order"
        before = truth
    history = _table(destination["uri"]).history()
    commit = next(c for c in history if c.get(SYNC_ID) == changing[-1])
    assert int(commit["deltasieve.view_version"]) >= len(changing)
    # time travel: the table as of the first sync's commit is the view as it loaded
    first = next(c for c in history if c.get(SYNC_ID) == changing[0])
    assert DeltaTable(destination["uri"], version=first["version"]).to_pyarrow_table().num_rows > 0
    protocol = _table(destination["uri"]).protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 2)
    metrics = api.http.get("/metrics").text
    assert (
        f'deltasieve_destination_lag_syncs{{destination="delta {destination["uri"]}",view="{PEOPLE}"}} 0.0' in metrics
    )


def test_multiset_and_multi_site_views(wh):
    service, people, bag = wh
    api = service.api
    for round_ in range(3):
        if round_:
            bag.change()
            people.change(updates=20, inserts=5, deletes=5)
        sync = api.sync(BAG)
        assert sync["status"] == "succeeded", sync
        destination = _published(api, BAG, sync["id"])
        assert Counter(tuple(r.values()) for r in _rows(destination["uri"])) == bag.bag(), f"round {round_}"
        sync = api.sync(JOINED)
        assert sync["status"] == "succeeded", sync
        destination = _published(api, JOINED, sync["id"])
        key = api.http.get(f"/v1/views/{JOINED}").json()["key"]
        assert key == ["id"]
        assert keyed(_rows(destination["uri"]), key) == bag.joined(), f"round {round_}"


def test_table_view_gains_a_column(wh):
    service, _, bag = wh
    api = service.api
    sync = api.sync(ITEMS)
    destination = _published(api, ITEMS, sync["id"])
    assert keyed(_rows(destination["uri"]), ["id"]) == bag.items()
    with sqlite3.connect(bag.path) as c:
        c.execute("ALTER TABLE items ADD COLUMN extra TEXT")
        c.execute("UPDATE items SET extra = 'e' || id WHERE id % 7 = 0")
        c.execute("UPDATE items SET v = 'changed' WHERE id = 3")
    sync = api.sync(ITEMS)
    assert sync["status"] == "succeeded", sync
    destination = _published(api, ITEMS, sync["id"])
    assert "extra" in _table(destination["uri"]).schema().to_arrow().names
    assert keyed(_rows(destination["uri"]), ["id"]) == bag.items()
    assert _carried(destination["uri"])[-1] == sync["id"]


@pytest.mark.parametrize("point", ["before_publish", "after_publish"])
def test_killed_while_publishing(wh, point):
    """The service dies with the view committed and its destination not yet applied (or
    applied, the catalog not told): after the restart the table holds every sync once."""
    service, people, _ = wh
    uri = str(service.data_dir / "tables" / PEOPLE)
    carried = _carried(uri)
    people.change(updates=30, inserts=10, deletes=5)
    sync_id = _killed_at(service, PEOPLE, point)
    api = service.api
    _published(api, PEOPLE, sync_id)
    assert keyed(_rows(uri), KEY) == people.truth()
    assert _carried(uri) == [*carried, sync_id], "a sync applied twice or lost"
    # and the next sync is published as usual
    people.change(updates=10, inserts=2, deletes=2)
    sync = api.sync(PEOPLE)
    _published(api, PEOPLE, sync["id"])
    assert keyed(_rows(uri), KEY) == people.truth()
    assert _carried(uri) == [*carried, sync_id, sync["id"]]


@pytest.mark.parametrize("point", ["before_publish", "after_publish"])
def test_killed_while_publishing_to_postgres(wh, warehouse, point):
    """The service dies with the view committed and its PostgreSQL table not yet applied (or
    its transaction committed, the catalog not told): after the restart the warehouse's
    `deltasieve_applied` lists every changing sync once, in order, and the table is the source."""
    service, people, _ = wh
    owner, changing = warehouse
    assert _warehouse_applied(owner) == changing
    people.change(updates=30, inserts=10, deletes=5)
    changing.append(_killed_at(service, WAREHOUSE, point))
    _published(service.api, WAREHOUSE, changing[-1])
    assert _warehouse_rows(owner) == people.truth()
    assert _warehouse_applied(owner) == changing, "a sync applied twice or lost"
    # and the next sync is published as usual
    people.change(updates=10, inserts=2, deletes=2)
    changing.append(service.api.sync(WAREHOUSE)["id"])
    _published(service.api, WAREHOUSE, changing[-1])
    assert _warehouse_rows(owner) == people.truth()
    assert _warehouse_applied(owner) == changing


def test_a_failing_destination_lags_then_catches_up(wh, tmp_path):
    """A destination that cannot be written (its parent is a file) lags without failing the
    syncs, shows its error, and is built from the view's rows once it can be written."""
    service, people, _ = wh
    api = service.api
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    elsewhere = str(blocker / "people")
    r = api.http.patch(
        f"/v1/views/{PEOPLE}", json={"destinations": [{"kind": "delta"}, {"kind": "delta", "uri": elsewhere}]}
    )
    assert r.status_code == 200, r.text
    assert [d.get("uri") for d in r.json()["destinations"]][1] == elsewhere
    for _ in range(2):
        people.change(updates=10, inserts=3, deletes=2)
        sync = api.sync(PEOPLE)
        assert sync["status"] == "succeeded", sync
    deadline = time.monotonic() + CATCH_UP_S
    while True:
        default, failing = api.http.get(f"/v1/views/{PEOPLE}").json()["destinations"]
        if default["applied_sync"] == sync["id"] and failing["error"]:
            break
        assert time.monotonic() < deadline, (default, failing)
        time.sleep(0.2)
    assert failing["applied_sync"] is None and failing["lag_syncs"] >= 2
    blocker.unlink()  # the destination can be written now: retried after its backoff
    deadline = time.monotonic() + CATCH_UP_S
    while True:
        failing = api.http.get(f"/v1/views/{PEOPLE}").json()["destinations"][1]
        if failing["applied_sync"] == sync["id"] and failing["lag_syncs"] == 0 and failing["error"] is None:
            break
        assert time.monotonic() < deadline, failing
        time.sleep(0.5)
    assert keyed(_rows(elsewhere), KEY) == people.truth()
    assert _table(elsewhere).history(1)[0]["deltasieve.rebuild"]  # built from the view's rows, and says so
    r = api.http.patch(f"/v1/views/{PEOPLE}", json={"destinations": [{"kind": "delta"}]})
    assert r.status_code == 200, r.text


def test_a_history_destination_added_later_is_built_from_the_kept_deltas(wh, tmp_path):
    """A history destination added to a view synced before replays the deltas the service
    keeps since the view's load: each version valid from its own sync's time; the current
    rows are the view; a name that clashes with the view's columns is refused."""
    service, people, _ = wh
    api = service.api
    for _ in range(3):  # the view synced before (its load among them, whatever ran first)
        people.change(updates=10, inserts=3, deletes=2)
        assert api.sync(PEOPLE)["status"] == "succeeded"
    clash = {"kind": "delta", "uri": str(tmp_path / "clash"), "mode": "history", "columns": {"current": "name"}}
    r = api.http.patch(f"/v1/views/{PEOPLE}", json={"destinations": [{"kind": "delta"}, clash]})
    assert r.status_code == 422 and "named name, a column of the view" in r.text, r.text
    history = {"kind": "delta", "uri": str(tmp_path / "history"), "mode": "history"}
    r = api.http.patch(f"/v1/views/{PEOPLE}", json={"destinations": [{"kind": "delta"}, history]})
    assert r.status_code == 200, r.text
    assert r.json()["destinations"][1]["columns"]["current"] == "_deltasieve_current"
    people.change(updates=10, inserts=3, deletes=2)
    sync = api.sync(PEOPLE)
    deadline = time.monotonic() + CATCH_UP_S
    while (shown := api.http.get(f"/v1/views/{PEOPLE}").json()["destinations"][1])["applied_sync"] != sync["id"]:
        assert time.monotonic() < deadline, shown
        time.sleep(0.2)
    rows = _table(history["uri"]).to_pyarrow_table().to_pylist()
    current = [
        {k: v for k, v in r.items() if not k.startswith("_deltasieve_")} for r in rows if r["_deltasieve_current"]
    ]
    assert keyed(current, KEY) == people.truth()
    succeeded = [s for s in api.http.get(f"/v1/views/{PEOPLE}/syncs").json() if s["status"] == "succeeded"]
    times = {dt.datetime.fromisoformat(s["finished_at"]) for s in succeeded}
    opened = {r["_deltasieve_valid_from"] for r in rows}
    assert opened <= times and len(opened) > 2, "each version valid from the sync that wrote it"
    rebuilt = next(c for c in reversed(_table(history["uri"]).history()) if "deltasieve.rebuild" in c)
    assert "history rebuilt from the deltas kept" in rebuilt["deltasieve.rebuild"]
    r = api.http.patch(f"/v1/views/{PEOPLE}", json={"destinations": [{"kind": "delta"}]})
    assert r.status_code == 200, r.text


def test_a_view_published_to_a_bucket(wh, s3_server, tmp_path):
    """A view whose Delta table is on the S3 server (moto's), its secret key read from a
    file, its key id a literal (stored sealed, shown as ***): each changing sync one commit
    on the bucket, the table there equal to the source. Last of the module: the view stays,
    and every later turn of the publisher reaches the bucket."""
    service, people, _ = wh
    api = service.api
    secret = tmp_path / "s3_secret"
    secret.write_text(SECRET_ACCESS_KEY + "\n")
    uri = f"s3://{s3_server.bucket()}/views/{S3_VIEW}"
    storage = {
        "endpoint": s3_server.endpoint,
        "region": REGION,
        "access_key_id": ACCESS_KEY_ID,
        "secret_access_key": f"file:{secret}",
    }
    api.add_view(
        S3_VIEW, VIEW_SQL.format(source=SOURCE), destinations=[{"kind": "delta", "uri": uri, "storage": storage}]
    )
    changing: list[str] = []
    for round_ in range(3):
        if round_:
            people.change(updates=15, inserts=5, deletes=5)
        truth = people.truth()
        sync = api.sync(S3_VIEW)
        assert sync["status"] == "succeeded", sync
        changing.append(sync["id"])
        destination = _published(api, S3_VIEW, sync["id"])
        table = DeltaTable(uri, storage_options=s3_server.storage_options())
        assert keyed(view_rows(table).to_pylist(), KEY) == truth, f"round {round_}: the table on S3 differs"
        assert [c[SYNC_ID] for c in reversed(table.history()) if SYNC_ID in c] == changing
    assert destination["storage"] == {**storage, "access_key_id": "***"}
    assert ACCESS_KEY_ID not in api.http.get(f"/v1/views/{S3_VIEW}").text
