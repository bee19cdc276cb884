"""Mirroring a database: a table view of each table in one request, agent and service as real processes.

A SQLite database of tables of every shape (integer, text and composite keys, a unique
index only, no key, a unique key over a nullable column, names to sanitize, a name too long
for a view, a column name no view may have, two tables whose names sanitize alike) mirrored
in one request: each view created is synced and equals its table by the oracle; the table no
view can keep and the names already taken are skipped with the reason. Mirrored again after
a table is added: that table's view is created (with a schedule the scheduler syncs it), the
others are existing. 200 tables mirrored at once, fast. A PostgreSQL table of schema erp;
the errors (404, 422 naming the tables, 424); the CLI.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest

from service.mirroring import mirror_view_name
from tests.support.faultproxy import FaultProxy
from tests.support.multisets import check_sync as check_multiset
from tests.support.oracle import check_sync, keyed
from workloads.harness import free_port, start_agent

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SOURCE = "mir_sq"
LONG = "a_table_whose_name_is_far_too_long_to_be_a_view_name_with_its_source_in_front"

#: The tables of the SQLite source: name -> (CREATE TABLE body, rows).
TABLES = {
    "customers": ("id INTEGER PRIMARY KEY, name TEXT, city TEXT", [(1, "ann", "Oslo"), (2, "bo", None)]),
    "order_lines": (
        "order_id INTEGER, line INTEGER, qty INTEGER, PRIMARY KEY (order_id, line)",
        [(1, 1, 5), (1, 2, 1), (2, 1, 7)],
    ),
    "products": ("sku TEXT PRIMARY KEY, label TEXT", [("a-1", "pen"), ("b-2", "ink")]),
    "accounts": ("email TEXT NOT NULL, balance INTEGER", [("a@x", 10), ("b@x", -3)]),
    "events": ("level TEXT, message TEXT", [("info", "up"), ("info", "up"), ("warn", None)]),
    "notes": ("n INTEGER UNIQUE, body TEXT", [(1, "x"), (None, "y"), (None, "y")]),
    "Order Items": ("id INTEGER PRIMARY KEY, what TEXT", [(1, "pen")]),
    "order_items": ("id INTEGER PRIMARY KEY, what TEXT", [(9, "ink")]),
    "Straße-2024": ("id INTEGER PRIMARY KEY, city TEXT", [(1, "Köln")]),
    LONG: ("id INTEGER PRIMARY KEY, v INTEGER", [(1, 2), (3, 4)]),
    "hidden": ('id INTEGER PRIMARY KEY, "__secret" TEXT', [(1, "s")]),
    "taken": ("id INTEGER PRIMARY KEY", [(1,)]),
}
#: The key each created view gets (empty: a multiset view).
KEYS = {
    "customers": ["id"],
    "order_lines": ["order_id", "line"],
    "products": ["sku"],
    "accounts": ["email"],
    "events": [],
    "notes": [],  # its unique key allows NULL: no key
    "Order Items": ["id"],
    "Straße-2024": ["id"],
    LONG: ["id"],
}


def quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def create(path: Path, tables: dict) -> None:
    with sqlite3.connect(path) as c:
        for name, (body, rows) in tables.items():
            c.execute(f"CREATE TABLE {quoted(name)} ({body})")
            if rows:
                c.executemany(f"INSERT INTO {quoted(name)} VALUES ({', '.join('?' * len(rows[0]))})", rows)


def deltasieve(*args: str, url: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DELTASIEVE_")}
    env.update(DELTASIEVE_URL=url, COLUMNS="250")
    return subprocess.run(
        [sys.executable, "-m", "deltasieve_cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def mirror(api, source: str, **body) -> dict:
    r = api.http.post(f"/v1/sources/{source}/mirror", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def check_mirrored(api, path: Path, table: str, view: str, key: list[str], sync: dict) -> None:
    """The view equals its table, and its first sync's delta inserts every row (the oracle)."""
    columns = api.http.get(f"/v1/views/{view}").json()["columns"]
    with sqlite3.connect(path) as c:
        rows = [dict(zip(columns, r)) for r in c.execute(f"SELECT * FROM {quoted(table)}")]
    if key:
        check_sync(api, view, key, {}, keyed(rows, key), sync)
    else:
        truth = Counter(tuple(r[c] for c in columns) for r in rows)
        check_multiset(api, view, columns, Counter(), truth, sync)


@pytest.fixture(scope="module")
def sqlite_source(api, service, logs_dir, tmp_path_factory):
    """The SQLite database of TABLES behind an agent registered as SOURCE."""
    path = tmp_path_factory.mktemp("mirror") / "legacy.db"
    create(path, TABLES)
    with sqlite3.connect(path) as c:
        c.execute("CREATE UNIQUE INDEX accounts_email ON accounts (email)")
    agent = start_agent(f"sqlite:///{path}", logs_dir)
    api.add_source(SOURCE, agent.url)
    yield path
    agent.stop()


@pytest.fixture(scope="module")
def first(api, sqlite_source):
    """The first mirror of SOURCE, after a view given as SQL took the name of table `taken`'s view."""
    api.add_view(f"{SOURCE}_taken", f"SELECT c.id FROM {SOURCE}.customers c")
    started = time.monotonic()
    done = mirror(api, SOURCE)
    return done, time.monotonic() - started


def test_mirror_creates_a_view_of_each_table_it_can(api, sqlite_source, first):
    done, _ = first
    created = {m["table"]: m for m in done["created"]}
    assert sorted(created) == sorted(KEYS), done
    assert {t: m["key"] for t, m in created.items()} == KEYS
    assert created["Order Items"]["view"] == f"{SOURCE}_order_items"
    assert created["Straße-2024"]["view"] == f"{SOURCE}_stra_e_2024"
    long = created[LONG]["view"]
    assert len(long) == 63 and long.startswith(f"{SOURCE}_a_table_whose") and long == mirror_view_name(SOURCE, LONG)
    assert done["existing"] == []
    skipped = {s["table"]: s["reason"] for s in done["skipped"]}
    assert sorted(skipped) == ["hidden", "order_items", "taken"], done
    assert "__secret" in skipped["hidden"] and "reserved" in skipped["hidden"]
    assert skipped["order_items"].startswith("name taken") and f"{SOURCE}.Order Items" in skipped["order_items"]
    assert skipped["taken"].startswith("name taken") and "given as SQL" in skipped["taken"]
    for m in done["created"]:
        view = api.http.get(f"/v1/views/{m['view']}").json()
        assert view["table"] == f"{SOURCE}.{m['table']}" and view["key"] == m["key"], view
        assert view["strategy"] == "auto" and view["schedule"] is None, view
    # each view synced once, two at a time (the service's default), equals its table
    with ThreadPoolExecutor(2) as pool:
        syncs = {m["table"]: pool.submit(api.sync, m["view"]) for m in done["created"]}
    for m in done["created"]:
        check_mirrored(api, sqlite_source, m["table"], m["view"], m["key"], syncs[m["table"]].result())


def test_mirror_again_adds_the_new_table_and_its_schedule_syncs_it(api, sqlite_source, first):
    created_before = {m["table"]: m["view"] for m in first[0]["created"]}
    create(sqlite_source, {"returns": ("id INTEGER PRIMARY KEY, reason TEXT", [(1, "broken"), (2, None)])})
    done = mirror(api, SOURCE, schedule={"every_s": 3600}, on_schema_change="freeze")
    assert done["created"] == [{"table": "returns", "view": f"{SOURCE}_returns", "key": ["id"]}], done
    assert {m["table"]: m["view"] for m in done["existing"]} == created_before
    assert sorted(s["table"] for s in done["skipped"]) == ["hidden", "order_items", "taken"]
    view = api.http.get(f"/v1/views/{SOURCE}_returns").json()
    assert view["schedule"] == {"every_s": 3600} and view["on_schema_change"] == "freeze", view
    # the existing views keep their settings
    assert api.http.get(f"/v1/views/{SOURCE}_customers").json()["schedule"] is None
    # never synced and scheduled: the scheduler syncs it at once
    deadline = time.monotonic() + 120
    while not (syncs := api.http.get(f"/v1/views/{SOURCE}_returns/syncs").json()) or syncs[0]["status"] in (
        "queued",
        "running",
    ):
        assert time.monotonic() < deadline, syncs
        time.sleep(0.5)
    assert [s["trigger"] for s in syncs] == ["schedule"], syncs
    check_mirrored(api, sqlite_source, "returns", f"{SOURCE}_returns", ["id"], syncs[0])
    # a third time: nothing to do
    again = mirror(api, SOURCE, tables=["returns", "CUSTOMERS", "returns"])
    assert again["created"] == [] and [m["table"] for m in again["existing"]] == ["returns", "customers"], again


def test_two_hundred_tables_in_one_request(api, service, logs_dir, tmp_path):
    path = tmp_path / "wide.db"
    create(path, {f"t{i:03}": ("id INTEGER PRIMARY KEY, v TEXT", []) for i in range(200)})
    agent = start_agent(f"sqlite:///{path}", logs_dir)
    proxy = FaultProxy("127.0.0.1", agent.port)  # forwards untouched, counting the service's calls
    try:
        api.add_source("mir_wide", proxy.url)
        calls = proxy.connections
        started = time.monotonic()
        done = mirror(api, "mir_wide")
        took = time.monotonic() - started
        assert proxy.connections - calls == 1, "the agent is asked for its schema once per mirror"
        assert [m["view"] for m in done["created"]] == [f"mir_wide_t{i:03}" for i in range(200)]
        assert done["existing"] == [] and done["skipped"] == []
        assert took < 30, f"200 views took {took:.1f} s"
        listed = {v["name"] for v in api.http.get("/v1/views").json()}
        assert {f"mir_wide_t{i:03}" for i in range(200)} <= listed
    finally:
        for i in range(200):  # the session's service serves other modules: leave no views behind
            api.http.delete(f"/v1/views/mir_wide_t{i:03}")
        api.http.delete("/v1/sources/mir_wide")
        proxy.close()
        agent.stop()


def test_postgres_table_outside_the_default_schema(api, service, logs_dir, postgres):
    with psycopg.connect(postgres.owner_url, autocommit=True) as c:
        c.execute("CREATE TABLE customers (id integer PRIMARY KEY, name text)")
        c.execute("INSERT INTO customers VALUES (1, 'ann'), (2, NULL)")
        c.execute("CREATE SCHEMA erp")
        c.execute("GRANT USAGE ON SCHEMA erp TO reader")
        c.execute("CREATE TABLE erp.orders (no integer PRIMARY KEY, customer integer, note text)")
        c.execute("INSERT INTO erp.orders VALUES (10, 1, 'first'), (11, 2, NULL)")
        c.execute('CREATE TABLE erp.cased ("Code" integer PRIMARY KEY, code integer)')
        c.execute("GRANT SELECT ON ALL TABLES IN SCHEMA erp TO reader")
    agent = start_agent(postgres.reader_url, logs_dir, allow=["customers", "erp.*"])
    try:
        api.add_source("mir_pg", agent.url)
        done = mirror(api, "mir_pg", tables=["erp.orders", "erp.cased"])
        assert done["created"] == [{"table": "erp.orders", "view": "mir_pg_erp_orders", "key": ["no"]}], done
        assert [s["table"] for s in done["skipped"]] == ["erp.cased"] and "occurs twice" in done["skipped"][0]["reason"]
        view = api.http.get("/v1/views/mir_pg_erp_orders").json()
        assert view["table"] == "mir_pg.erp.orders" and '"erp"."orders"' in view["sites"][0]["sql"]
        sync = api.sync("mir_pg_erp_orders")
        truth = keyed([{"no": 10, "customer": 1, "note": "first"}, {"no": 11, "customer": 2, "note": None}], ["no"])
        check_sync(api, "mir_pg_erp_orders", ["no"], {}, truth, sync)
        # then the rest: the default schema's table by its plain name
        rest = mirror(api, "mir_pg")
        assert [m["view"] for m in rest["created"]] == ["mir_pg_customers"], rest
        assert [m["view"] for m in rest["existing"]] == ["mir_pg_erp_orders"], rest
    finally:
        agent.stop()


def test_mirror_errors(api, service, sqlite_source):
    r = api.http.post("/v1/sources/mir_nobody/mirror", json={})
    assert r.status_code == 404 and "mir_nobody" in r.text, r.text
    r = api.http.post(f"/v1/sources/{SOURCE}/mirror", json={"tables": ["customers", "nope", "main.gone"]})
    assert r.status_code == 422 and "'nope', 'main.gone'" in r.text and "customers" in r.text, r.text
    for body in ({"tables": [""]}, {"tables": "customers"}, {"nope": 1}):
        r = api.http.post(f"/v1/sources/{SOURCE}/mirror", json=body)
        assert r.status_code == 422, r.text
    r = api.http.post(f"/v1/sources/{SOURCE}/mirror", json={"schedule": {"every_s": 0}})
    assert r.status_code == 422, r.text
    r = api.http.post(f"/v1/sources/{SOURCE}/mirror", json={"strategy": "nope"})
    assert r.status_code == 422, r.text
    api.add_source("mir_gone", f"http://127.0.0.1:{free_port()}", check=False)
    try:
        r = api.http.post("/v1/sources/mir_gone/mirror", json={})
        assert r.status_code == 424, r.text
    finally:
        api.http.delete("/v1/sources/mir_gone")


def test_cli_mirror(api, service, sqlite_source, first):
    shown = deltasieve("source", "mirror", SOURCE, "--tables", "customers,hidden", url=service.url)
    assert shown.returncode == 0, shown.stderr
    assert "0 created, 1 existing, 1 skipped" in shown.stdout and f"{SOURCE}_customers" in shown.stdout, shown.stdout
    assert "reserved" in shown.stdout, shown.stdout
    as_json = deltasieve(
        "source", "mirror", SOURCE, "--tables", "events", "--every-s", "60", "--strategy", "sketch", "--json",
        url=service.url,
    )  # fmt: skip
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["existing"] == [{"table": "events", "view": f"{SOURCE}_events", "key": []}]
    bad = deltasieve("source", "mirror", SOURCE, "--tables", "nope", url=service.url)
    assert bad.returncode != 0 and "nope" in bad.stderr, bad.stderr


ROOTS_SCHEMA = """
CREATE TABLE pay (payment_date date NOT NULL, amount numeric(8,2), payment_id integer NOT NULL,
                  PRIMARY KEY (payment_id, payment_date)) PARTITION BY RANGE (payment_date);
CREATE TABLE pay_2024_01 PARTITION OF pay FOR VALUES FROM ('2024-01-01') TO ('2024-02-01');
CREATE TABLE pay_2024_02 PARTITION OF pay FOR VALUES FROM ('2024-02-01') TO ('2024-03-01');
CREATE TABLE log (id integer PRIMARY KEY, msg text);
CREATE TABLE log_archived (archived_on date) INHERITS (log);
CREATE TABLE people (c integer NOT NULL, a integer NOT NULL, ssn text, b text NOT NULL, PRIMARY KEY (b, c, a));
CREATE VIEW big_pay AS SELECT payment_id, amount FROM pay WHERE amount > 50;
CREATE MATERIALIZED VIEW pay_total AS SELECT sum(amount) AS total FROM pay;
CREATE SCHEMA hr;
CREATE TABLE hr.staff (id integer PRIMARY KEY, name text);
GRANT USAGE ON SCHEMA hr TO reader;
GRANT SELECT ON ALL TABLES IN SCHEMA public, hr TO reader;
"""


def _truths(url: str) -> dict[str, dict]:
    """Each mirrored view's rows straight from the source, keyed as its view is."""
    with psycopg.connect(url) as c:
        pay = [
            {"payment_date": d.isoformat(), "amount": str(a), "payment_id": i}
            for d, a, i in c.execute("SELECT payment_date, amount, payment_id FROM pay")
        ]
        people = [{"c": c_, "a": a, "b": b} for c_, a, b in c.execute("SELECT c, a, b FROM people")]
        log = [{"id": i, "msg": m} for i, m in c.execute("SELECT id, msg FROM log")]
    return {
        "mroot_pay": keyed(pay, ["payment_id", "payment_date"]),
        "mroot_people": keyed(people, ["b", "c", "a"]),
        "mroot_log": keyed(log, ["id"]),
    }


def test_postgres_mirror_of_every_schema_makes_one_view_per_root_table(api, logs_dir, postgres_server):
    """Without --allow the agent exposes every schema; the mirror passes over partitions, an
    inheriting table, views and a materialized view, and leaves out the column it is told to.
    The views keyed in another order than their columns stay exact while rows change and move
    between partitions."""
    db = postgres_server.create_database("mirror_roots")
    with psycopg.connect(db.owner_url, autocommit=True) as c:
        c.execute(ROOTS_SCHEMA)
        c.execute("INSERT INTO pay SELECT date '2024-01-01' + (i % 50), i, i FROM generate_series(1, 300) i")
        c.execute("INSERT INTO people SELECT i % 7, i, 'ssn' || i, 'b' || (i % 5) FROM generate_series(1, 200) i")
        c.execute("INSERT INTO log VALUES (1, 'one'), (2, 'two')")
        c.execute("INSERT INTO log_archived VALUES (3, 'three', '2024-01-01')")
    agent = start_agent(db.reader_url, logs_dir)
    try:
        api.add_source("mroot", agent.url)
        done = mirror(api, "mroot", exclude_columns=["ssn"])
        created = {m["table"]: m["key"] for m in done["created"]}
        assert created == {
            "hr.staff": ["id"],
            "log": ["id"],
            "pay": ["payment_id", "payment_date"],
            "people": ["b", "c", "a"],
        }, done
        skipped = {s["table"]: s["reason"] for s in done["skipped"]}
        assert set(skipped) == {"pay_2024_01", "pay_2024_02", "log_archived", "big_pay", "pay_total"}, done
        assert skipped["pay_2024_01"].startswith("partition of pay") and skipped["log_archived"].startswith(
            "inherits from log"
        )
        assert "a view of the source" in skipped["big_pay"] and "materialized view" in skipped["pay_total"]
        assert api.http.get("/v1/views/mroot_people").json()["exclude_columns"] == ["ssn"]
        # a partition or a view named by the mirror gets its view
        named = mirror(api, "mroot", tables=["pay_2024_02", "big_pay"])
        assert [m["view"] for m in named["created"]] == ["mroot_pay_2024_02", "mroot_big_pay"], named
        sync = api.sync("mroot_big_pay")  # a source's view, keyless: a multiset view
        assert sync["status"] == "succeeded", sync["error"]
        with psycopg.connect(db.owner_url) as c:
            want = Counter((i, str(a)) for i, a in c.execute("SELECT payment_id, amount FROM big_pay"))
        assert Counter((r["payment_id"], r["amount"]) for r in api.rows("mroot_big_pay")) == want
        r = api.http.post("/v1/views", json={"name": "mroot_bad", "table": "mroot.people", "exclude_columns": ["a"]})
        assert r.status_code == 422 and "key" in r.json()["detail"], r.text
        r = api.http.post("/v1/sources/mroot/mirror", json={"exclude_columns": ["people.nope"]})
        assert r.status_code == 422 and "people.nope" in r.json()["detail"], r.text
        before = {view: {} for view in _truths(db.owner_url)}
        for round_ in range(3):
            if round_:
                with psycopg.connect(db.owner_url, autocommit=True) as c:
                    # moves across the partitions' bound, updates, deletes, inserts
                    c.execute(
                        f"UPDATE pay SET payment_date = date '2024-02-15' + {round_} WHERE payment_id % 23 = {round_}"
                    )
                    c.execute(f"UPDATE pay SET amount = amount + 1 WHERE payment_id % 17 = {round_}")
                    c.execute(f"DELETE FROM pay WHERE payment_id % 29 = {round_}")
                    c.execute(f"INSERT INTO pay VALUES (date '2024-01-20', 5, {1000 + round_})")
                    c.execute(f"UPDATE people SET ssn = ssn || 'x' WHERE a % 11 = {round_}")
                    c.execute(f"DELETE FROM people WHERE a % 13 = {round_}")
                    c.execute(f"INSERT INTO people VALUES (1, {500 + round_}, 'n', 'new')")
                    c.execute(f"UPDATE log SET msg = msg || '!' WHERE id = {round_}")
            truths = _truths(db.owner_url)
            for view, truth in truths.items():
                check_sync(
                    api, view, api.http.get(f"/v1/views/{view}").json()["key"], before[view], truth, api.sync(view)
                )
            before = truths
    finally:
        agent.stop()
