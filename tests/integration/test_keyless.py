"""Views over tables without a key (multisets), agent and service as real processes.

Randomized rounds on a log table without a key: equal rows inserted several times, some of
their copies deleted, rows changed (NULLs set and cleared), rows crossing the WHERE. After
every sync the view's rows, as a multiset, equal the view definition evaluated straight on
the source; the delta's lines, with their counts, are exactly what turns the old multiset
into the new one (per distinct row one insert or one delete, never both); the metrics count
the occurrences. Every strategy that can serve a multiset on SQLite, two on PostgreSQL.
"""

from __future__ import annotations

import base64
import datetime as dt
import random
import sqlite3
from collections import Counter
from decimal import Decimal

import httpx
import psycopg
import pytest

from tests.support.multisets import check_sample, check_sync
from tests.support.oracle import changed_columns
from tests.support.pairing import MATCH, READINGS, oracle_pairs
from workloads.harness import start_agent

pytestmark = pytest.mark.integration

COLUMNS = ["at", "level", "amount", "price", "day", "ok", "note"]
SQLITE_TABLE = "CREATE TABLE logs (at INTEGER NOT NULL, level TEXT, amount REAL, price DECIMAL(8,2), day DATE, ok BOOLEAN, note TEXT)"
PG_TABLE = (
    "CREATE TABLE logs (at integer NOT NULL, level text, amount double precision, price numeric(8,2), "
    "day date, ok boolean, note bytea)"
)
WHERE = "level IS NULL OR level <> 'debug'"
SQLITE_STRATEGIES = ["full_ship", "tuple_hash", "group_hash", "sketch", "range_checksum", "auto"]
PG_STRATEGIES = ["sketch", "group_hash"]
#: Each view keeps a random sample of this many occurrences (smaller than the view).
SAMPLE = 40


class Logs:
    """The keyless table at the source, changed at random; small value domains, so that
    equal rows arise by themselves too."""

    def __init__(self, engine: str, connect, seed: int):
        self.engine, self.connect = engine, connect
        self.rng = random.Random(seed)
        self.ph = "?" if engine == "sqlite" else "%s"
        self.rowid = "rowid" if engine == "sqlite" else "ctid"
        with self.connect() as c:
            c.execute(SQLITE_TABLE if engine == "sqlite" else PG_TABLE)
        rows = [self.row() for _ in range(80)]
        self.insert(rows + [row for row in self.rng.sample(rows, 20) for _ in range(self.rng.randint(1, 3))])

    def maybe(self, value, p_null: float = 0.2):
        return None if self.rng.random() < p_null else value

    def row(self) -> tuple:
        r = self.rng
        note = self.maybe(r.choice(["a", "b", "ünï", ""]))
        return (
            r.randint(1, 40),
            self.maybe(r.choice(["info", "warn", "debug", "error"])),
            self.maybe(r.choice([0.5, 1.25, -3.0, 1e10])),
            self.maybe(Decimal(r.choice(["1.50", "0.00", "-2.25"]))),
            self.maybe(dt.date(2026, 1, r.randint(1, 3))),
            self.maybe(r.random() < 0.5),
            note.encode() if note is not None and self.engine == "postgres" else note,
        )

    def _param(self, v):
        if self.engine == "sqlite" and isinstance(v, Decimal):
            return float(v)
        if self.engine == "sqlite" and isinstance(v, dt.date):
            return v.isoformat()
        return v

    def insert(self, rows: list[tuple]) -> None:
        marks = ", ".join([self.ph] * len(COLUMNS))
        with self.connect() as c:
            for row in rows:
                c.execute(f"INSERT INTO logs VALUES ({marks})", [self._param(v) for v in row])

    def change(self) -> None:
        r = self.rng
        with self.connect() as c:
            rows = c.execute(f"SELECT {self.rowid}, * FROM logs").fetchall()
        victims = r.sample(rows, k=min(len(rows), r.randint(5, 20)))
        with self.connect() as c:
            for victim in victims[: len(victims) // 2]:  # some copies of a row go, not all
                c.execute(f"DELETE FROM logs WHERE {self.rowid} = {self.ph}", [victim[0]])
            for victim in victims[len(victims) // 2 :]:  # a column changed, NULL set or cleared
                column = r.choice(COLUMNS[1:])
                value = self.row()[COLUMNS.index(column)]
                c.execute(
                    f"UPDATE logs SET {column} = {self.ph} WHERE {self.rowid} = {self.ph}",
                    [self._param(value), victim[0]],
                )
        copies = [tuple(row[1:]) for row in r.sample(rows, k=min(len(rows), 8)) for _ in range(r.randint(1, 3))]
        self.insert([self._stored(row) for row in copies] + [self.row() for _ in range(r.randint(3, 10))])

    def _stored(self, row: tuple) -> tuple:
        """A row as read back, ready to insert again."""
        return tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)

    def truth(self) -> Counter:
        """The view definition evaluated at the source, as a multiset of normalized rows."""
        with self.connect() as c:
            rows = c.execute(f"SELECT {', '.join(COLUMNS)} FROM logs WHERE {WHERE}").fetchall()
        return Counter(self.normalized(row) for row in rows)

    def normalized(self, row: tuple) -> tuple:
        """A source row as the service shows it in JSON."""
        at, level, amount, price, day, ok, note = row
        if price is not None:
            price = str(Decimal(str(price)).quantize(Decimal("0.01")))
        if isinstance(day, dt.date):
            day = day.isoformat()
        if ok is not None:
            ok = bool(ok)
        if note is not None and self.engine == "postgres":
            note = base64.b64encode(bytes(note)).decode()
        return (at, level, amount, price, day, ok, note)


def run(api, source, logs_dir, strategies: list[str], name: str, rounds: int, seed: int) -> None:
    if source.engine == "sqlite":
        connect = lambda: sqlite3.connect(source.owner_url, isolation_level=None)  # noqa: E731
    else:
        connect = lambda: psycopg.connect(source.owner_url, autocommit=True)  # noqa: E731
    logs = Logs(source.engine, connect, seed=seed)
    agent = start_agent(source.reader_url, logs_dir)
    try:
        api.add_source(name, agent.url)
        views = {}
        for strategy in strategies:
            view = api.add_view(
                f"{name}_{strategy}",
                f"SELECT l.{', l.'.join(COLUMNS)} FROM {name}.logs l WHERE l.level IS NULL OR l.level <> 'debug'",
                strategy=strategy,
                sample_size=SAMPLE,
            )
            assert view["key"] == [] and view["columns"] == COLUMNS, view
            views[view["name"]] = Counter()
        counted = 0
        for rnd in range(rounds + 1):
            if rnd:
                logs.change()
            truth = logs.truth()
            assert max(truth.values()) > 1, "the rounds must hold duplicate rows"
            assert any(None in row for row in truth), "and NULLs"
            for view, before in views.items():
                sync = api.sync(view)
                counted += check_sync(api, view, COLUMNS, before, truth, sync)
                check_sample(api, view, COLUMNS, truth, SAMPLE)
                views[view] = truth
                if rnd:
                    assert sync["metrics"]["strategy"] == view.removeprefix(f"{name}_"), sync["metrics"]
            assert counted, "some delta line must have carried a count above one"
    finally:
        agent.stop()


@pytest.mark.engines("sqlite")
def test_every_strategy_keeps_a_multiset_view_exact_on_sqlite(api, source, logs_dir):
    run(api, source, logs_dir, SQLITE_STRATEGIES, "klsq", rounds=3, seed=18)


@pytest.mark.engines("postgres")
def test_a_multiset_view_is_exact_on_postgres(api, source, logs_dir):
    run(api, source, logs_dir, PG_STRATEGIES, "klpg", rounds=3, seed=81)


def test_what_a_multiset_view_cannot_have_is_a_422(api, tmp_path, logs_dir):
    """Strategies without a per-row stamp, and every malformed match."""
    path = tmp_path / "bad.db"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE logs (at INTEGER, msg TEXT, stamp TIMESTAMP, v REAL)")
        c.execute("CREATE TABLE people (id INTEGER PRIMARY KEY, at INTEGER)")
    agent = start_agent(f"sqlite:///{path}", logs_dir)
    keyless = "SELECT l.at, l.msg, l.v FROM klbad.logs l"
    cases = [
        (keyless, {"strategy": "timestamp", "timestamps": {"logs": "stamp"}}, "strategy timestamp cannot serve"),
        (keyless, {"strategy": "auto", "timestamps": {"logs": "stamp"}}, "timestamps cannot serve"),
        (keyless, {"strategy": "row_version"}, "strategy row_version cannot serve"),
        ("SELECT p.id, p.at FROM klbad.people p", {"match": {"order_by": "at", "epsilon": {"at": 1}}}, "is keyed"),
        (keyless, {"match": {"order_by": "at", "epsilon": {"nope": 1, "at": 1}}}, "no column 'nope'"),
        (keyless, {"match": {"order_by": "at", "epsilon": {"at": -1}}}, "the epsilon of 'at' is -1"),
        (keyless, {"match": {"order_by": "msg", "epsilon": {"msg": 1}}}, "not a number"),
        (keyless, {"match": {"order_by": "at", "epsilon": {"v": 1}}}, "order_by 'at' has no epsilon"),
        (keyless, {"match": {"order_by": "at", "epsilon": {}}}, "non-empty epsilon"),
        (keyless, {"match": {"order_by": "at"}}, "epsilon"),
        (keyless, {"match": {"order_by": "at", "epsilon": {"at": "far"}}}, "epsilon"),
    ]
    try:
        api.add_source("klbad", agent.url)
        for sql, extra, needle in cases:
            r = httpx.post(f"{api.http.base_url}/v1/views", json={"name": "klbad_v", "sql": sql, **extra})
            assert r.status_code == 422 and needle in str(r.json()["detail"]), (extra, r.text)
    finally:
        agent.stop()


# --- match: vanished and appeared rows paired by BestmatchJoin ------------------------------


class Readings:
    """A keyless table of sensor readings whose rows drift a little between syncs."""

    def __init__(self, path, seed: int):
        self.path, self.rng = path, random.Random(seed)
        with sqlite3.connect(path) as c:
            c.execute("CREATE TABLE readings (at INTEGER NOT NULL, sensor TEXT, v REAL)")
            rows = [self.row() for _ in range(60)]
            c.executemany("INSERT INTO readings VALUES (?, ?, ?)", rows + rows[:10])

    def row(self) -> tuple:
        r = self.rng
        return (r.randint(0, 60), r.choice(["s1", "s2", None]), None if r.random() < 0.1 else r.randint(0, 8) / 4)

    def change(self) -> None:
        r = self.rng
        with sqlite3.connect(self.path) as c:
            rows = c.execute("SELECT rowid, at, v FROM readings").fetchall()
            for rowid, at, v in r.sample(rows, 12):  # drift: within epsilon, or beyond
                v = None if v is None or r.random() < 0.1 else v + r.choice([-0.75, -0.25, 0, 0.25, 0.5])
                c.execute("UPDATE readings SET at = ?, v = ? WHERE rowid = ?", (at + r.randint(-3, 3), v, rowid))
            for rowid, *_ in r.sample(rows, 4):
                c.execute("DELETE FROM readings WHERE rowid = ?", (rowid,))
            c.executemany("INSERT INTO readings VALUES (?, ?, ?)", [self.row() for _ in range(4)])

    def truth(self) -> Counter:
        with sqlite3.connect(self.path) as c:
            return Counter(c.execute("SELECT at, sensor, v FROM readings WHERE at >= 0").fetchall())


def test_match_pairs_vanished_and_appeared_rows_as_brute_force_does(api, tmp_path, logs_dir):
    readings = Readings(tmp_path / "readings.db", seed=1)
    agent = start_agent(f"sqlite:///{tmp_path / 'readings.db'}", logs_dir)
    try:
        api.add_source("klmatch", agent.url)
        view = api.add_view(
            "klmatch_v", "SELECT r.at, r.sensor, r.v FROM klmatch.readings r WHERE r.at >= 0", match=MATCH
        )
        assert view["match"] == MATCH and view["key"] == []
        before, paired = Counter(), 0
        for rnd in range(4):
            if rnd:
                readings.change()
            truth = readings.truth()
            sync = api.sync("klmatch_v")
            assert sync["status"] == "succeeded", sync["error"]
            rows = Counter(tuple(r[c] for c in READINGS) for r in api.rows("klmatch_v"))
            assert rows == truth
            want_pairs, want_gone, want_came = oracle_pairs(before - truth, truth - before)
            pairs, gone, came = Counter(), Counter(), Counter()
            for line in api.delta("klmatch_v", sync["id"]):
                row = tuple(line["row"][c] for c in READINGS)
                if line["op"] == "update":
                    assert "count" not in line
                    assert line["changed"] == changed_columns(line["old"], line["row"], []), line
                    pairs[(tuple(line["old"][c] for c in READINGS), row)] += 1
                else:
                    (came if line["op"] == "insert" else gone)[row] += line.get("count", 1)
            assert (pairs, gone, came) == (want_pairs, want_gone, want_came), f"round {rnd}"
            m = sync["metrics"]
            assert (m["rows_inserted"], m["rows_updated"], m["rows_deleted"]) == (
                sum(came.values()),
                sum(pairs.values()),
                sum(gone.values()),
            )
            if rnd:
                assert m["match"]["pairs"] == sum(pairs.values())
            paired += sum(pairs.values())
            before = truth
        assert paired > 5, "the drift must have produced pairs"
    finally:
        agent.stop()
