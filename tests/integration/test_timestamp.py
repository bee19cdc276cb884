"""strategy timestamp against the oracle, on every legacy engine (the `source` fixture).

A legacy application stamps its rows with the database's own clock: orders and their lines
(a join within one site, a composite key), a soft-delete flag on each (a boolean, a nullable
marker), updates that bump the stamp, rows crossing the WHERE clause, hard deletes, rows
with a NULL stamp; late-committing rows (stamped well before the watermark): an insert,
which the key reconciliation finds and fetches, and before each reconciliation an update,
which only the periodic full reconciliation catches and reports. After every
sync the view equals the truth read straight from the database and the delta is exact.
"""

from __future__ import annotations

import random
import sqlite3
import time

import pytest

from tests.support.mariadb_legacy import Owner
from tests.support.oracle import check_sync
from workloads.harness import start_agent

pytestmark = pytest.mark.integration

#: Rounds of changes; the view reconciles in full every RECONCILE_EVERY syncs.
ROUNDS = 2
RECONCILE_EVERY = 2
VIEW_SQL = (
    "SELECT l.order_id, l.line_no, l.amount, l.note, o.order_id AS oid, o.customer FROM {src}.order_lines l "
    "JOIN {src}.orders o ON l.order_id = o.order_id WHERE l.amount > 10 AND o.status <> 'void'"
)
TRUTH_SQL = (
    "SELECT l.order_id, l.line_no, l.amount, l.note, o.order_id AS oid, o.customer FROM order_lines l "
    "JOIN orders o ON l.order_id = o.order_id WHERE l.amount > 10 AND o.status <> 'void' "
    "AND (o.is_deleted IS NULL OR o.is_deleted = FALSE) AND l.deleted_at IS NULL"
)
COLUMNS = ["order_id", "line_no", "amount", "note", "oid", "customer"]


class Stamped:
    """Orders and lines on one engine, stamped with the database's clock, changed at random.

    On PostgreSQL the application's sessions run in a time zone behind UTC: orders are
    stamped `timestamptz` (exact whatever the zone), lines `timestamp` holding UTC (what the
    README asks of a column without a zone).
    """

    #: lines' and orders' stamp types, the boolean type, their "now", the placeholder, lines' "an hour ago"
    ENGINES = {
        "sqlite": (
            "DATETIME",
            "DATETIME",
            "BOOLEAN",
            "strftime('%Y-%m-%d %H:%M:%f', 'now')",
            "strftime('%Y-%m-%d %H:%M:%f', 'now')",
            "?",
            "datetime('now', '-1 hour')",
        ),
        "postgres": (
            "timestamp",
            "timestamptz",
            "boolean",
            "(clock_timestamp() AT TIME ZONE 'UTC')",
            "clock_timestamp()",
            "%s",
            "(clock_timestamp() AT TIME ZONE 'UTC') - interval '1 hour'",
        ),
        # lines: DATETIME holding UTC; orders: TIMESTAMP (an instant); the session at -05:00
        "mariadb": (
            "DATETIME(6)",
            "TIMESTAMP(6) NULL",
            "BOOLEAN",
            "UTC_TIMESTAMP(6)",
            "NOW(6)",
            "%s",
            "UTC_TIMESTAMP(6) - INTERVAL 1 HOUR",
        ),
    }

    def __init__(self, source, seed: int):
        self.source = source
        self.rng = random.Random(seed)
        stamp, order_stamp, boolean, self.now, self.order_now, self.mark, self.old = self.ENGINES[source.engine]
        self.orders, self.lines = 0, set()
        with self.connect() as c:
            self.run(
                c,
                f"CREATE TABLE orders (order_id integer PRIMARY KEY, customer text, status text, "
                f"updated_at {order_stamp}, is_deleted {boolean})",
            )
            self.run(
                c,
                f"CREATE TABLE order_lines (order_id integer NOT NULL, line_no integer NOT NULL, amount integer, "
                f"note text, updated_at {stamp}, deleted_at {stamp}, PRIMARY KEY (order_id, line_no))",
            )
            self.run(c, "CREATE INDEX lines_updated_at ON order_lines (updated_at)")
            self.run(c, "BEGIN")
            for _ in range(600):
                self.insert_order(c)
            for _ in range(4000):  # enough keys that range checksums reconcile them in fewer bytes
                self.insert_line(c)
            self.run(c, "COMMIT")

    def connect(self):
        if self.source.engine == "sqlite":
            return sqlite3.connect(self.source.path, isolation_level=None)
        if self.source.engine == "mariadb":
            return Owner(self.source.owner_url)
        import psycopg

        c = psycopg.connect(self.source.owner_url, autocommit=True)
        c.execute("SET TIME ZONE 'America/New_York'")  # not the agent's UTC
        return c

    def run(self, c, sql: str, params: tuple = ()):
        return c.execute(sql.replace("?", self.mark), params)

    def insert_order(self, c) -> None:
        self.orders += 1
        status = self.rng.choice(["open", "open", "void"])
        self.run(
            c,
            f"INSERT INTO orders VALUES (?, ?, ?, {self.order_now}, FALSE)",
            (self.orders, f"customer {self.rng.randrange(50)}", status),
        )

    def insert_line(self, c, stamp: str | None = None) -> tuple[int, int]:
        while True:
            key = (self.rng.randint(1, self.orders), self.rng.randint(1, 30))
            if key not in self.lines:
                break
        self.lines.add(key)
        self.run(
            c,
            f"INSERT INTO order_lines VALUES (?, ?, ?, ?, {stamp or self.now}, NULL)",
            (*key, self.rng.randrange(100), self.rng.choice(["x", "y", None])),
        )
        return key

    def change(self) -> None:
        rng = self.rng
        with self.connect() as c:
            lines = sorted(self.lines)
            for key in rng.sample(lines, 15):  # updates that bump the stamp (some cross the WHERE clause)
                self.run(
                    c,
                    f"UPDATE order_lines SET amount = ?, updated_at = {self.now} WHERE order_id = ? AND line_no = ?",
                    (rng.randrange(100), *key),
                )
            for key in rng.sample(lines, 4):  # soft deletes: the marker set, the stamp bumped
                self.run(
                    c,
                    f"UPDATE order_lines SET deleted_at = {self.now}, updated_at = {self.now} WHERE order_id = ? AND line_no = ?",
                    key,
                )
            for key in rng.sample(lines, 4):  # hard deletes
                self.run(c, "DELETE FROM order_lines WHERE order_id = ? AND line_no = ?", key)
                self.lines.discard(key)
            for order in rng.sample(range(1, self.orders + 1), 2):  # orders: renamed, voided, flagged
                what = rng.choice(["customer = 'renamed'", "status = 'void'", "status = 'open'", "is_deleted = TRUE"])
                self.run(c, f"UPDATE orders SET {what}, updated_at = {self.order_now} WHERE order_id = ?", (order,))
            for _ in range(8):
                self.insert_line(c)
            for _ in range(2):  # NULL stamps: read at every sync
                key = self.insert_line(c)
                self.run(c, "UPDATE order_lines SET updated_at = NULL WHERE order_id = ? AND line_no = ?", key)
            nulls = [
                tuple(r)
                for r in self.run(c, "SELECT order_id, line_no FROM order_lines WHERE updated_at IS NULL").fetchall()
            ]
            for key in rng.sample(nulls, min(2, len(nulls))):  # changed without a stamp
                self.run(
                    c,
                    "UPDATE order_lines SET note = ? WHERE order_id = ? AND line_no = ?",
                    (f"n{rng.randrange(99)}", *key),
                )

    def late_insert(self, order: int) -> None:
        """A new line of `order` committed now but stamped an hour ago: the key reconciliation finds it."""
        with self.connect() as c:
            line = next(n for n in range(31, 99) if (order, n) not in self.lines)
            self.lines.add((order, line))
            self.run(c, f"INSERT INTO order_lines VALUES (?, ?, 50, 'late', {self.old}, NULL)", (order, line))

    def late_update(self, key: tuple) -> None:
        """A row committed now but stamped an hour ago: only a full reconciliation sees it."""
        with self.connect() as c:
            self.run(
                c,
                f"UPDATE order_lines SET note = 'late', updated_at = {self.old} WHERE order_id = ? AND line_no = ?",
                key[:2],
            )

    def truth(self, key: list[str]) -> dict:
        with self.connect() as c:
            rows = [dict(zip(COLUMNS, r, strict=True)) for r in self.run(c, TRUTH_SQL).fetchall()]
        return {tuple(r[k] for k in key): r for r in rows}


def test_timestamp_rounds_are_exact(api, source, logs_dir):
    legacy = Stamped(source, seed=1611)
    agent = start_agent(source.reader_url, logs_dir)
    src = f"ts_{source.engine}"
    name = f"ts_lines_{source.engine}"
    try:
        api.add_source(src, agent.url)
        view = api.add_view(
            name,
            VIEW_SQL.format(src=src),
            strategy="timestamp",
            timestamps={"order_lines": "updated_at", f"{src}.orders": "updated_at"},
            delete_flags={"orders": "is_deleted", "order_lines": "deleted_at"},
            timestamp_lag_s=1,
            reconcile_every=RECONCILE_EVERY,
        )
        # the same view left to auto: timestamp is among its candidates, its load keeps a watermark
        auto = api.add_view(
            f"{name}_auto",
            VIEW_SQL.format(src=src),
            timestamps={"order_lines": "updated_at", f"{src}.orders": "updated_at"},
            delete_flags={"orders": "is_deleted", "order_lines": "deleted_at"},
            timestamp_lag_s=1,
            reconcile_every=RECONCILE_EVERY,  # the late update of a reconciling round is seen whatever auto chose
        )
        assert auto["strategy"] == "auto", auto
        key = view["key"]
        assert set(key) >= {"order_id", "line_no"}, view
        assert view["timestamps"] == {f"{src}.order_lines": "updated_at", f"{src}.orders": "updated_at"}
        assert view["delete_flags"] == {f"{src}.orders": "is_deleted", f"{src}.order_lines": "deleted_at"}
        assert (view["timestamp_lag_s"], view["reconcile_every"]) == (1, RECONCILE_EVERY)
        # the load reads after the table's rows are older than the lag: else the first ranged
        # read starts before them and reads the whole table (as it must), which a quick machine did
        time.sleep(view["timestamp_lag_s"] + 0.5)
        before = legacy.truth(key)
        check_sync(api, name, key, {}, before, api.sync(name))
        check_sync(api, f"{name}_auto", key, {}, before, api.sync(f"{name}_auto"))
        tables = []
        for rnd in range(1, ROUNDS + 1):
            reconcile = rnd % RECONCILE_EVERY == 0
            legacy.change()
            late = next(k for k, row in legacy.truth(key).items() if row["note"] != "late")
            if reconcile:
                legacy.late_update(late)
            else:
                legacy.late_insert(late[0])
            truth = legacy.truth(key)
            sync = api.sync(name)
            check_sync(api, name, key, before, truth, sync)
            by_auto = api.sync(f"{name}_auto")
            check_sync(api, f"{name}_auto", key, before, truth, by_auto)
            site = by_auto["metrics"]["sites"][0] if "sites" in by_auto["metrics"] else by_auto["metrics"]
            assert site["expected_bytes"]["timestamp"] is not None, site["expected_bytes"]
            if site["chosen"] == "timestamp":  # from the load's watermark: no reconciliation needed
                assert site["timestamp"]["previous_watermark"] is not None, site["timestamp"]
            before = truth
            stamp = (
                sync["metrics"]["sites"][0]["timestamp"] if "sites" in sync["metrics"] else sync["metrics"]["timestamp"]
            )
            assert stamp["reconciled"] is reconcile, stamp
            # a small view: the changed read, the keys and a reconciliation all on Arrow (no Spark job: check_sync)
            assert sync["metrics"]["executor"] == by_auto["metrics"]["executor"] == "arrow", sync["metrics"]
            assert stamp["watermark"] > stamp["read_from"], stamp
            if reconcile:
                assert stamp["rows_missed"] == 1, f"the late row went unreported: {stamp}"
            else:
                # a sketch of the keys (or range checksums, if the statistics say so); shipping every key: below
                assert stamp["key_reconciliation"] in ("sketch", "range_checksum"), stamp
                assert stamp["keys_reconciled"] < len(truth) / 4, stamp
                if stamp["key_reconciliation"] == "sketch":  # a table of a few cells, not the keys
                    assert 0 < stamp["key_sketch_bytes"] < 8 * len(truth), stamp
                    tables.append(stamp["key_table"])
                assert isinstance(stamp["index_used"], bool) and stamp["query_plan"], stamp
                assert stamp["rows_fetched"] == 1, f"the late insert was not fetched: {stamp}"
                assert stamp["rows_read"] < len(truth) / 2, f"the ranged read read too much: {stamp}"
        # the table of the keys is built with the load, then kept up to date by every sync, the reconciling ones included
        assert tables and set(tables) == {"kept"}, tables
    finally:
        agent.stop()


BAD_SQL = "SELECT i.id, i.name FROM tsbad.items i"


@pytest.fixture(scope="module")
def tsbad(api, tmp_path_factory, logs_dir):
    path = tmp_path_factory.mktemp("ts_bad") / "items.db"
    with sqlite3.connect(path) as c:
        c.execute(
            "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, updated_at DATETIME, born TEXT, gone BOOLEAN)"
        )
        c.execute("CREATE TABLE tags (id INTEGER PRIMARY KEY, item INTEGER, updated_at DATETIME)")
        c.execute("CREATE INDEX items_at ON items (updated_at)")
    agent = start_agent(f"sqlite:///{path}", logs_dir)
    api.add_source("tsbad", agent.url)
    api.db_path = path  # the tests below write the legacy rows
    yield api
    agent.stop()


JOIN_SQL = "SELECT i.id, i.name, t.id AS tag FROM tsbad.items i JOIN tsbad.tags t ON t.item = i.id"


@pytest.mark.parametrize(
    ("sql", "extra", "words"),
    [
        (BAD_SQL, {"strategy": "timestamp"}, ["timestamp column for every table", "tsbad.items"]),
        (JOIN_SQL, {"strategy": "timestamp", "timestamps": {"items": "updated_at"}}, ["every table", "tsbad.tags"]),
        (BAD_SQL, {"timestamps": {"nosuch": "updated_at"}}, ["reads no table 'nosuch'", "tsbad.items"]),
        (BAD_SQL, {"timestamps": {"other.items": "updated_at"}}, ["reads no table 'other.items'"]),
        (BAD_SQL, {"timestamps": {"items": "nosuch"}}, ["has no column 'nosuch'", "updated_at"]),
        (BAD_SQL, {"timestamps": {"items": "born"}}, ["of type text, not a timestamp"]),
        (BAD_SQL, {"delete_flags": {"items": "nosuch"}}, ["has no column 'nosuch'"]),
        (BAD_SQL, {"timestamp_lag_s": -1}, ["timestamp_lag_s"]),
        (BAD_SQL, {"reconcile_every": 0}, ["reconcile_every"]),
        (BAD_SQL, {"timestamps": ["items"]}, ["timestamps"]),
        (BAD_SQL, {"strategy": "stamps"}, ["timestamp"]),
    ],
    ids=[
        "no-timestamps",
        "join-missing-one",
        "unknown-table",
        "unknown-source",
        "unknown-column",
        "not-a-timestamp",
        "unknown-flag",
        "negative-lag",
        "reconcile-0",
        "not-a-mapping",
        "unknown-strategy",
    ],
)
def test_bad_timestamp_settings_are_422(tsbad, sql, extra, words):
    r = tsbad.http.post("/v1/views", json={"name": "ts_bad_v", "sql": sql, **extra})
    assert r.status_code == 422, r.text
    for word in words:
        assert word.lower() in r.text.lower(), f"{word!r} not in {r.text}"
    assert tsbad.http.get("/v1/views/ts_bad_v").status_code == 404


def test_timestamp_settings_are_kept_and_redefined(tsbad):
    view = tsbad.add_view(
        "ts_ok_v", BAD_SQL, strategy="timestamp", timestamps={"items": "updated_at"}, delete_flags={"items": "gone"}
    )
    assert (view["timestamps"], view["delete_flags"]) == ({"tsbad.items": "updated_at"}, {"tsbad.items": "gone"})
    assert (view["timestamp_lag_s"], view["reconcile_every"]) == (5.0, 24)
    assert '"i"."gone" IS NULL' in view["sites"][0]["sql"], view["sites"]
    now = "strftime('%Y-%m-%d %H:%M:%f', 'now')"
    with sqlite3.connect(tsbad.db_path) as c:
        c.executemany(f"INSERT INTO items VALUES (?, ?, {now}, NULL, ?)", [(1, "a", 0), (2, "b", None), (3, "c", 1)])
    assert tsbad.sync("ts_ok_v")["metrics"]["rows_inserted"] == 2  # item 3 is flagged deleted
    with sqlite3.connect(tsbad.db_path) as c:
        c.execute(f"UPDATE items SET gone = TRUE, updated_at = {now} WHERE id = 1")
    sync = tsbad.sync("ts_ok_v")
    assert sync["status"] == "succeeded", sync["error"]
    m = sync["metrics"]
    assert (m["rows_inserted"], m["rows_updated"], m["rows_deleted"]) == (0, 0, 1), m
    assert m["timestamp"]["index_used"] is True, m["timestamp"]  # the index on updated_at serves the read
    assert (m["timestamp"]["key_reconciliation"], m["timestamp"]["keys_reconciled"]) == ("ship", 1), m["timestamp"]
    assert [r["id"] for r in tsbad.rows("ts_ok_v")] == [2]
    # a failed sync keeps the old watermark: the next one reads from it
    with sqlite3.connect(tsbad.db_path) as c:
        c.execute("ALTER TABLE items RENAME TO items_away")
    failed = tsbad.sync("ts_ok_v")
    assert failed["status"] == "failed", failed
    with sqlite3.connect(tsbad.db_path) as c:
        c.execute("ALTER TABLE items_away RENAME TO items")
        c.execute(f"UPDATE items SET name = 'bb', updated_at = {now} WHERE id = 2")
    after = tsbad.sync("ts_ok_v")
    assert after["status"] == "succeeded", after["error"]
    assert after["metrics"]["timestamp"]["previous_watermark"] == m["timestamp"]["watermark"], after["metrics"]
    assert [(r["id"], r["name"]) for r in tsbad.rows("ts_ok_v")] == [(2, "bb")]
    r = tsbad.http.put("/v1/views/ts_ok_v", json={"sql": BAD_SQL, "reconcile_every": 2})
    assert r.status_code == 200, r.text
    again = tsbad.http.get("/v1/views/ts_ok_v").json()
    assert (again["strategy"], again["timestamps"], again["reconcile_every"]) == ("timestamp", view["timestamps"], 2)
    r = tsbad.http.put("/v1/views/ts_ok_v", json={"sql": BAD_SQL, "timestamps": {}})
    assert r.status_code == 422 and "every table" in r.text, r.text
    assert tsbad.http.delete("/v1/views/ts_ok_v").status_code == 204
