"""The PostgreSQL destination (warehouse/destinations/postgres.py) fed the deltas real syncs stored.

Real syncs run through the session's service on SQLite sources; after each one the sync's
stored delta (`DATA_DIR/views/<view>/deltas/<sync>/`, read here as Parquet) is applied to a
table in the session's PostgreSQL server, as the applier does: apply, and where the
destination cannot follow, a rebuild from the view's rows (read from the rows endpoint as
Parquet). After every sync the table equals the truth read straight from the source.

A keyed table view over randomized rounds: loaded by a rebuild, a decimal widened at the
source and a column added reach the table by ALTER TABLE in the apply, a dropped column
rebuilds it; an apply killed in the middle of its transaction (its backend terminated while
it waits to record the sync) leaves nothing, and the same sync applied again, and once more,
is applied exactly once. A multiset view with `match` (updates that carry their old row):
its table holds each row as often as the source does.
"""

from __future__ import annotations

import datetime as dt
import random
import sqlite3
import threading
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from deltasieve_protocol.types import Column, LogicalType
from tests.support.pairing import MATCH, READINGS
from warehouse.destinations.base import CannotFollow
from warehouse.destinations.postgres import PostgresDestination
from warehouse.errors import DestinationError
from warehouse.names import OP
from workloads.harness import start_agent
from workloads.published import METADATA

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def data_dir(service) -> Path:
    """The session service's DATA_DIR, where it keeps each sync's delta."""
    args = service.proc.args
    return Path(args[args.index("--data-dir") + 1])


class Publisher:
    """What the applier does with one view and one destination, by hand: apply each sync's
    stored delta, rebuild from the view's rows where the destination cannot follow."""

    def __init__(self, api, data_dir: Path, view: str, destination: PostgresDestination):
        self.api, self.data_dir, self.view, self.destination = api, data_dir, view, destination
        self.rebuilds: list[str] = []

    def shape(self) -> tuple[list[Column], list[str], bool]:
        view = self.api.http.get(f"/v1/views/{self.view}").json()
        columns = [Column(n, LogicalType.parse(view["column_types"][n])) for n in view["columns"]]
        return columns, view["key"], not view["key"]

    def delta(self, sync_id: str) -> list[pa.RecordBatch]:
        dataset = ds.dataset(self.data_dir / "views" / self.view / "deltas" / sync_id, format="parquet")
        return dataset.to_batches() if OP in dataset.schema.names else []

    def rows(self) -> list[pa.RecordBatch]:
        r = self.api.http.get(f"/v1/views/{self.view}/rows", params={"format": "parquet"})
        r.raise_for_status()
        return pq.read_table(pa.BufferReader(r.content)).to_batches()

    def publish(self, sync: dict, version: int) -> None:
        assert sync["status"] == "succeeded", sync["error"]
        columns, key, multiset = self.shape()
        try:
            self.destination.apply(sync["id"], version, columns, key, self.delta(sync["id"]), multiset)
        except CannotFollow as e:
            self.rebuilds.append(str(e))
            self.destination.rebuild(sync["id"], version, columns, key, self.rows(), multiset, str(e))
        assert self.destination.applied() == sync["id"]


# --- a keyed table view ---------------------------------------------------------------------


class Items:
    """A SQLite table the legacy application changes at random, and retypes."""

    def __init__(self, path: Path, seed: int):
        self.path, self.rng, self.next_id = path, random.Random(seed), 1
        self.columns = {"id": "INTEGER PRIMARY KEY", "name": "TEXT", "price": "DECIMAL(8,2)", "born": "DATE"}
        self.columns |= {"score": "REAL", "note": "TEXT"}
        self.scale = 2
        with self.connect() as c:
            c.execute(f"CREATE TABLE items ({', '.join(f'{n} {t}' for n, t in self.columns.items())})")
            for _ in range(150):
                self.insert(c)

    def connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, isolation_level=None)

    def value(self, column: str):
        r = self.rng
        if r.random() < 0.15:
            return None
        return {
            "name": lambda: r.choice(["Ærø", "plain", "", 'quote " , \\ \n', "x" * 200]),
            "price": lambda: str(round(Decimal(r.uniform(-99999, 99999)), self.scale)),
            "born": lambda: r.choice(["2001-02-03", "1999-12-31", "2024-02-29"]),
            "score": lambda: r.choice([r.uniform(-1e6, 1e6), 0.1 + 0.2, 1e300, -0.0]),
            "note": lambda: r.choice(["n1", "n2"]),
            "extra": lambda: r.randint(-(2**62), 2**62),
        }[column]()

    def insert(self, c) -> None:
        names = list(self.columns)
        values = [self.next_id] + [self.value(n) for n in names[1:]]
        c.execute(f"INSERT INTO items ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})", values)
        self.next_id += 1

    def change(self) -> None:
        r = self.rng
        with self.connect() as c:
            ids = [i for (i,) in c.execute("SELECT id FROM items")]
            for i in r.sample(ids, 25):
                column = r.choice(list(self.columns)[1:])
                c.execute(f"UPDATE items SET {column} = ? WHERE id = ?", (self.value(column), i))
            for i in r.sample(ids, 8):
                c.execute("DELETE FROM items WHERE id = ?", (i,))
            for _ in range(10):
                self.insert(c)

    def alter(self, ddl: list[str]) -> None:
        with self.connect() as c:
            for statement in ddl:
                c.execute(statement)

    def widen_price(self) -> None:
        """price DECIMAL(8,2) to DECIMAL(12,4), as a SQLite application does it: a new table, copied, renamed."""
        self.columns["price"], self.scale = "DECIMAL(12,4)", 4
        names = ", ".join(self.columns)
        self.alter(
            [
                f"CREATE TABLE items_new ({', '.join(f'{n} {t}' for n, t in self.columns.items())})",
                f"INSERT INTO items_new ({names}) SELECT {names} FROM items",
                "DROP TABLE items",
                "ALTER TABLE items_new RENAME TO items",
            ]
        )

    def truth(self) -> dict:
        with self.connect() as c:
            rows = c.execute(f"SELECT {', '.join(self.columns)} FROM items").fetchall()
        return {row[0]: dict(zip(self.columns, (_canonical(v) for v in row))) for row in rows}


def _canonical(value):
    """One form for a value read from SQLite or PostgreSQL: numbers compared as exact decimals
    where they are (a Decimal equals itself at any scale), dates as ISO text."""
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, float) and value == 0:
        return 0.0  # SQLite hands back 0.0 for -0.0's text; both are zero
    return value


def table_rows(url: str, table: str, key: str) -> dict:
    with psycopg.connect(url) as c:
        cur = c.execute(f"SELECT * FROM {table}")
        names = [d.name for d in cur.description]
        rows = ({n: _canonical(v) for n, v in zip(names, row) if n not in METADATA} for row in cur)
        return {row[key]: row for row in rows}


def same_rows(table: dict, truth: dict) -> bool:
    """Equal rows, a source decimal (read by SQLite as a float) against the table's numeric."""
    if table.keys() != truth.keys():
        return False
    for k, want in truth.items():
        got = table[k]
        if got.keys() != want.keys():
            return False
        for c, v in want.items():
            w = got[c]
            if isinstance(w, Decimal) and v is not None:
                v = Decimal(str(v))
            if w != v:
                return False
    return True


def kill_midway(publisher: Publisher, url: str, sync: dict, version: int) -> None:
    """Apply `sync` and terminate its backend while the transaction, its changes made, waits
    to record the sync (another transaction holds that row); the apply fails and rolls back."""
    columns, key, multiset = publisher.shape()
    blocker = psycopg.connect(url)
    blocker.execute(
        "INSERT INTO wh.deltasieve_applied (view, table_name, sync_id) VALUES (%s, %s, %s)",
        [publisher.view, publisher.destination.name, sync["id"]],
    )
    failure: list[BaseException] = []

    def run():
        try:
            publisher.destination.apply(sync["id"], version, columns, key, publisher.delta(sync["id"]), multiset)
        except BaseException as e:
            failure.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    with psycopg.connect(url, autocommit=True) as admin:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            waiting = admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO %%deltasieve_applied%%'"
            ).fetchall()
            if waiting:
                break
            time.sleep(0.05)
        assert waiting, "the apply never reached the recording of its sync"
        admin.execute("SELECT pg_terminate_backend(%s)", [waiting[0][0]])
    thread.join(60)
    blocker.rollback()
    blocker.close()
    assert failure and isinstance(failure[0], DestinationError) and failure[0].transient, failure


def test_keyed_view_follows_rounds_schema_changes_and_a_killed_apply(api, data_dir, postgres, tmp_path, logs_dir):
    items = Items(tmp_path / "items.db", seed=37)
    agent = start_agent(f"sqlite:///{tmp_path / 'items.db'}", logs_dir)
    url = postgres.owner_url
    publisher = Publisher(api, data_dir, "dpg_items", PostgresDestination(url, "wh.items", "dpg_items"))
    assert publisher.destination.applied() is None
    password = urlsplit(url).password
    assert password and password not in str(publisher.destination.describe())
    wrong = PostgresDestination(url.replace(password, password[::-1]), "wh.items", "dpg_items")
    with pytest.raises(DestinationError) as refused:
        wrong.applied()
    assert "password authentication failed" in str(refused.value) and password[::-1] not in str(refused.value)
    try:
        api.add_source("dpg", agent.url)
        r = api.http.post("/v1/views", json={"name": "dpg_items", "table": "dpg.items"})
        assert r.status_code == 201, r.text
        steps = ["load", "rows", "kill", "widen", "add", "rows", "drop", "rows"]
        for version, step in enumerate(steps, start=1):
            if step != "load":
                items.change()
            if step == "widen":
                items.widen_price()
            elif step == "add":
                items.columns["extra"] = "INTEGER"
                items.alter(["ALTER TABLE items ADD COLUMN extra INTEGER", "UPDATE items SET extra = id * 7"])
            elif step == "drop":
                del items.columns["note"]
                items.alter(["ALTER TABLE items DROP COLUMN note"])
            truth = items.truth()
            sync = api.sync("dpg_items")
            before = table_rows(url, "wh.items", "id") if version > 1 else {}
            if step == "kill":
                kill_midway(publisher, url, sync, version)
                assert table_rows(url, "wh.items", "id") == before, "a killed apply left changes behind"
                assert publisher.destination.applied() != sync["id"]
            rebuilds = len(publisher.rebuilds)
            publisher.publish(sync, version)
            if step == "kill":  # the applier retries after its crash, then once more: a no-op
                publisher.publish(sync, version)
            assert same_rows(table_rows(url, "wh.items", "id"), truth), f"step {version} ({step})"
            assert len(publisher.rebuilds) == rebuilds + (step in ("load", "drop")), (step, publisher.rebuilds)
        assert "note" in publisher.rebuilds[-1], publisher.rebuilds

        # a table that is not the view the delta was computed from (a row deleted by hand) is not applied to
        columns, key, _ = publisher.shape()
        with psycopg.connect(url) as c:
            gone = c.execute("DELETE FROM wh.items WHERE id = (SELECT min(id) FROM wh.items) RETURNING *").fetchone()
        held = table_rows(url, "wh.items", "id")
        update = pa.RecordBatch.from_pylist([{OP: "update", **dict(zip(held[min(held)].keys(), gone))}])
        with pytest.raises(CannotFollow, match="not the view"):
            publisher.destination.apply("hand-made", 99, columns, key, [update], False)
        assert table_rows(url, "wh.items", "id") == held and publisher.destination.applied() == sync["id"]
        # rebuilt in place (the same columns: emptied, loaded, its key built again), it is the view again
        publisher.destination.rebuild(sync["id"], len(steps), columns, key, publisher.rows(), False, "repaired")
        assert same_rows(table_rows(url, "wh.items", "id"), truth)
        with psycopg.connect(url) as c:
            types = dict(
                c.execute(
                    "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'wh.items'::regclass AND attnum > 0 AND NOT attisdropped"
                ).fetchall()
            )
            log = c.execute(
                "SELECT sync_id, rebuild FROM wh.deltasieve_applied WHERE view = 'dpg_items' ORDER BY seq"
            ).fetchall()
            key = c.execute(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) WHERE i.indrelid = 'wh.items'::regclass AND i.indisprimary"
            ).fetchall()
        assert types == {
            "id": "bigint",
            "name": "text",
            "price": "numeric(12,4)",
            "born": "date",
            "score": "double precision",
            "extra": "bigint",
            # every mode's metadata (warehouse/destinations/modes.py), after the view's columns
            "_deltasieve_synced_at": "timestamp with time zone",
            "_deltasieve_sync_id": "text",
        }, types
        assert key == [("id",)]
        syncs = [s["id"] for s in reversed(api.http.get("/v1/views/dpg_items/syncs").json())]
        assert [s for s, _ in log] == syncs, "each sync recorded once, in order"
        assert [why for _, why in log] == [
            "table wh.items does not exist",
            *[None] * 5,
            publisher.rebuilds[-1],
            "repaired",
        ], log
    finally:
        agent.stop()


# --- a multiset view ------------------------------------------------------------------------


class Readings:
    """A keyless table of readings, equal rows repeated, drifting a little between syncs."""

    def __init__(self, path: Path, seed: int):
        self.path, self.rng = path, random.Random(seed)
        with sqlite3.connect(path) as c:
            c.execute("CREATE TABLE readings (at INTEGER NOT NULL, sensor TEXT, v REAL)")
            rows = [self.row() for _ in range(60)]
            c.executemany("INSERT INTO readings VALUES (?, ?, ?)", rows + rows[:15] + rows[:5])

    def row(self) -> tuple:
        r = self.rng
        return (r.randint(0, 60), r.choice(["s1", "s2", None]), None if r.random() < 0.1 else r.randint(0, 8) / 4)

    def change(self) -> None:
        r = self.rng
        with sqlite3.connect(self.path) as c:
            rows = c.execute("SELECT rowid, at, v FROM readings").fetchall()
            for rowid, at, v in r.sample(rows, 12):  # drift within epsilon (pairs) or beyond
                v = None if v is None or r.random() < 0.1 else v + r.choice([-0.75, -0.25, 0, 0.25, 0.5])
                c.execute("UPDATE readings SET at = ?, v = ? WHERE rowid = ?", (at + r.randint(-3, 3), v, rowid))
            for rowid, *_ in r.sample(rows, 6):
                c.execute("DELETE FROM readings WHERE rowid = ?", (rowid,))
            c.executemany("INSERT INTO readings VALUES (?, ?, ?)", [self.row() for _ in range(3)] * 2)

    def truth(self) -> Counter:
        with sqlite3.connect(self.path) as c:
            return Counter(c.execute("SELECT at, sensor, v FROM readings WHERE at >= 0").fetchall())


def test_multiset_view_holds_each_row_as_often_as_the_source(api, data_dir, postgres, tmp_path, logs_dir):
    readings = Readings(tmp_path / "readings.db", seed=73)
    agent = start_agent(f"sqlite:///{tmp_path / 'readings.db'}", logs_dir)
    url = postgres.owner_url
    publisher = Publisher(api, data_dir, "dpg_bag", PostgresDestination(url, "wh.bag", "dpg_bag"))
    try:
        api.add_source("dpgbag", agent.url)
        view = api.add_view("dpg_bag", "SELECT r.at, r.sensor, r.v FROM dpgbag.readings r WHERE r.at >= 0", match=MATCH)
        assert view["key"] == []
        paired = 0
        for version in range(1, 6):
            if version > 1:
                readings.change()
            truth = readings.truth()
            sync = api.sync("dpg_bag")
            paired += sync["metrics"]["rows_updated"]
            publisher.publish(sync, version)
            with psycopg.connect(url) as c:
                got = Counter(c.execute(f"SELECT {', '.join(READINGS)} FROM wh.bag").fetchall())
            assert got == truth, f"sync {version}: {(got - truth) + (truth - got)}"
        assert publisher.rebuilds == ["table wh.bag does not exist"]
        assert paired > 3, "the drift must have produced matched updates"
        with psycopg.connect(url) as c:
            indexes = c.execute(
                "SELECT indisunique, pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = 'wh.bag'::regclass"
            ).fetchall()
        # no key: only the index a delete's lookups use, over the columns of bounded width
        assert [(unique, d.split(" USING ")[1]) for unique, d in indexes] == [(False, "btree (at, v)")], indexes
        publisher.destination.rebuild(sync["id"], 6, *publisher.shape()[:2], publisher.rows(), True, "again")
        with psycopg.connect(url) as c:
            assert Counter(c.execute(f"SELECT {', '.join(READINGS)} FROM wh.bag").fetchall()) == truth
            assert c.execute("SELECT count(*) FROM pg_index WHERE indrelid = 'wh.bag'::regclass").fetchone() == (1,)
    finally:
        agent.stop()


# --- a LEFT JOIN's key: NULL in the view's key ----------------------------------------------


def test_left_join_key_holding_null_gets_a_unique_index_where_null_matches_null(
    api, data_dir, postgres, tmp_path, logs_dir
):
    """Customers and their orders, a customer without orders as (customer, NULL): the key
    (id, order_id) holds NULL, which a primary key cannot. Loaded before any customer lacks
    orders, the table has a primary key; the first NULL makes the apply refuse and the
    table is rebuilt with a unique index NULLS NOT DISTINCT, which later applies use."""
    path, rng = tmp_path / "shop.db", random.Random(17)
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        c.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, customer INTEGER NOT NULL, total DECIMAL(8,2))")
        c.executemany("INSERT INTO customers VALUES (?, ?)", [(i, f"c{i}") for i in range(1, 31)])
        c.executemany("INSERT INTO orders VALUES (?, ?, ?)", [(i, 1 + i % 30, f"{i}.25") for i in range(1, 91)])
    truth_sql = (
        "SELECT c.id, c.name, o.id AS order_id, o.total FROM customers c LEFT JOIN orders o ON o.customer = c.id"
    )
    agent = start_agent(f"sqlite:///{path}", logs_dir)
    url = postgres.owner_url
    publisher = Publisher(api, data_dir, "dpg_shop", PostgresDestination(url, "wh.shop", "dpg_shop"))
    try:
        api.add_source("dpgshop", agent.url)
        view = api.add_view(
            "dpg_shop", truth_sql.replace("customers", "dpgshop.customers").replace("orders o", "dpgshop.orders o")
        )
        assert view["key"] == ["id", "order_id"], view
        for version in range(1, 5):
            if version > 1:
                with sqlite3.connect(path) as c:
                    orders = [i for (i,) in c.execute("SELECT id FROM orders")]
                    for i in rng.sample(orders, 25):  # some customers lose their last order
                        c.execute("DELETE FROM orders WHERE id = ?", (i,))
                    c.execute("UPDATE customers SET name = name || '+' WHERE id % 4 = ?", (version % 4,))
                    c.executemany(
                        "INSERT INTO orders (customer, total) VALUES (?, ?)", [(rng.randint(1, 30), "9.50")] * 3
                    )
            with sqlite3.connect(path) as c:
                truth = Counter(
                    (i, n, o, None if t is None else Decimal(str(t))) for i, n, o, t in c.execute(truth_sql)
                )
            publisher.publish(api.sync("dpg_shop"), version)
            with psycopg.connect(url) as c:
                got = Counter(c.execute("SELECT id, name, order_id, total FROM wh.shop").fetchall())
            assert got == truth, f"sync {version}: {(got - truth) + (truth - got)}"
        assert any(o is None for _, _, o, _ in truth), "some customer must have lost every order"
        assert publisher.rebuilds == [
            "table wh.shop does not exist",
            "the view's key holds NULL now, which the table's primary key cannot",
        ]
        with psycopg.connect(url) as c:
            indexes = c.execute(
                "SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = 'wh.shop'::regclass"
            ).fetchall()
        assert [d.split(" USING ")[1] for (d,) in indexes] == ["btree (id, order_id) NULLS NOT DISTINCT"], indexes
    finally:
        agent.stop()
