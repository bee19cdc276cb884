"""Table views and tables outside the default schema, agent and service as real processes.

A table view (`{"table": "source.table"}`) on SQLite, synced over random changes and checked
against the source; one over a table without a key, a multiset; PostgreSQL's `public.orders`
beside `erp.orders`, both exposed with --allow, a view of each, each exact; a MariaDB table
of a second database; the definitions refused with a 422 that says what to do.
"""

from __future__ import annotations

import contextlib
import os
import random
import sqlite3
import subprocess
import sys
from collections import Counter
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest

from tests.support.multisets import check_sync as check_multiset
from tests.support.oracle import check_sync, keyed
from workloads.harness import start_agent
from workloads.mariadb import connect as mysql_connect

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 3


def money(value) -> str | None:
    """A decimal as the API writes it (exact decimals are strings)."""
    return None if value is None else str(Decimal(value).quantize(Decimal("0.01")))


class Orders:
    """An `orders` table changed at random between syncs; `truth()` reads it back as the view's rows."""

    def __init__(self, connect, placeholder: str, table: str, key: str, seed: int, keyed_table: bool = True):
        self.connect, self.ph, self.table, self.key = connect, placeholder, table, key
        self.rng = random.Random(seed)
        self.next_id = 1
        self.keyed_table = keyed_table
        self.insert(60)

    def insert(self, n: int) -> None:
        rows = []
        for _ in range(n):
            rows.append((self.next_id, self.rng.choice(["ann", "bo", None]), money(self.rng.randint(0, 9999) / 100)))
            self.next_id += 1
        with self.connect() as c:
            c.cursor().executemany(f"INSERT INTO {self.table} VALUES ({self.ph}, {self.ph}, {self.ph})", rows)

    def change(self) -> None:
        with self.connect() as c:
            cur = c.cursor()
            for _ in range(5):
                cur.execute(
                    f"UPDATE {self.table} SET total = {self.ph} WHERE {self.key} = {self.ph}",
                    (money(self.rng.randint(0, 9999) / 100), self.rng.randrange(1, self.next_id)),
                )
            cur.execute(
                f"DELETE FROM {self.table} WHERE {self.key} = {self.ph}", (self.rng.randrange(1, self.next_id),)
            )
        self.insert(4)

    def rows(self) -> list[tuple]:
        with self.connect() as c:
            cur = c.cursor()
            cur.execute(f"SELECT * FROM {self.table}")
            return list(cur.fetchall())

    def truth(self, columns: list[str]) -> dict:
        return keyed([dict(zip(columns, (a, b, money(t)))) for a, b, t in self.rows()], [columns[0]])


def agent_source(api, service, logs_dir, name: str, url: str, allow: list[str] | None = None):
    agent = start_agent(url, logs_dir, allow=allow)
    api.add_source(name, agent.url)
    return agent


def rounds(api, view: str, orders: Orders, columns: list[str]) -> None:
    """Sync, check the view against the table; change the table; again, ROUNDS times."""
    before: dict = {}
    for _ in range(ROUNDS):
        truth = orders.truth(columns)
        check_sync(api, view, [columns[0]], before, truth, api.sync(view))
        before = truth
        orders.change()


def deltasieve(*args: str, url: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DELTASIEVE_")}
    env.update(DELTASIEVE_URL=url, COLUMNS="250")
    return subprocess.run(
        [sys.executable, "-m", "deltasieve_cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def sqlite_source(api, service, logs_dir, tmp_path_factory):
    """A SQLite file with a keyed `orders` and a keyless `logs`, behind an agent registered as `tv_sq`."""
    path = tmp_path_factory.mktemp("table_views") / "legacy.db"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT, total DECIMAL(8,2))")
        c.execute("CREATE TABLE logs (level TEXT, message TEXT)")
        c.executemany("INSERT INTO logs VALUES (?, ?)", [("info", "up"), ("info", "up"), ("warn", None)])
    agent = agent_source(api, service, logs_dir, "tv_sq", f"sqlite:///{path}")
    yield path
    agent.stop()


def test_sqlite_table_view_by_the_cli_follows_its_table(api, service, sqlite_source):
    orders = Orders(lambda: sqlite3.connect(sqlite_source), "?", "orders", "id", seed=36)
    added = deltasieve("view", "add", "tv_orders", "--table", "tv_sq.orders", "--json", url=service.url)
    assert added.returncode == 0, added.stderr
    view = api.http.get("/v1/views/tv_orders").json()
    assert view["table"] == "tv_sq.orders"
    assert view["sql"] == 'SELECT "id", "customer", "total" FROM "tv_sq"."orders"'
    assert (view["columns"], view["key"]) == (["id", "customer", "total"], ["id"])
    rounds(api, "tv_orders", orders, view["columns"])
    # a view given as SQL has no table
    assert api.add_view("tv_orders_sql", "SELECT o.id FROM tv_sq.orders o")["table"] is None


def test_table_view_of_a_keyless_table_is_a_multiset(api, sqlite_source):
    view = api.http.post("/v1/views", json={"name": "tv_logs", "table": "tv_sq.logs"})
    assert view.status_code == 201, view.text
    assert view.json()["key"] == [] and view.json()["table"] == "tv_sq.logs"
    truth = Counter([("info", "up"), ("info", "up"), ("warn", None)])
    check_multiset(api, "tv_logs", ["level", "message"], Counter(), truth, api.sync("tv_logs"))
    with sqlite3.connect(sqlite_source) as c:
        c.execute("INSERT INTO logs VALUES ('info', 'up')")
        c.execute("DELETE FROM logs WHERE level = 'warn'")
    later = truth + Counter([("info", "up")]) - Counter([("warn", None)])
    check_multiset(api, "tv_logs", ["level", "message"], truth, later, api.sync("tv_logs"))


@pytest.mark.parametrize(
    ("body", "needles"),
    [
        ({"sql": "SELECT o.id FROM tv_sq.orders o", "table": "tv_sq.orders"}, ["exactly one of"]),
        ({}, ["exactly one of"]),
        ({"table": "tv_sq.nope"}, ["no table 'nope'", "--allow nope"]),
        ({"table": "tv_sq.main.orders"}, ["no table 'main.orders'", "attached databases are not read"]),
        ({"table": "orders"}, ["names no source"]),
        ({"table": "nobody.orders"}, ["'nobody' is not registered"]),
    ],
)
def test_bad_definitions_are_422(api, sqlite_source, body, needles):
    r = api.http.post("/v1/views", json={"name": "tv_bad", **body})
    assert r.status_code == 422, r.text
    for needle in needles:
        assert needle in r.text, r.text


def test_postgres_tables_of_one_name_in_two_schemas(api, service, logs_dir, postgres):
    with psycopg.connect(postgres.owner_url, autocommit=True) as c:
        c.execute("CREATE TABLE orders (id integer PRIMARY KEY, customer text, total numeric(8,2))")
        c.execute("CREATE SCHEMA erp")
        c.execute("GRANT USAGE ON SCHEMA erp TO reader")
        c.execute("CREATE TABLE erp.orders (no integer PRIMARY KEY, customer text, total numeric(8,2))")
        c.execute("CREATE TABLE erp.secret (id integer PRIMARY KEY)")
        c.execute("GRANT SELECT ON ALL TABLES IN SCHEMA erp TO reader")
    agent = agent_source(api, service, logs_dir, "tv_pg", postgres.reader_url, allow=["orders", "erp.orders"])
    try:
        tables = api.http.get("/v1/sources/tv_pg/tables").json()["tables"]
        assert [(t["name"], t.get("schema"), t["primary_key"]) for t in tables] == [
            ("erp.orders", "erp", ["no"]),
            ("orders", None, ["id"]),
        ]
        connect = lambda: psycopg.connect(postgres.owner_url)  # noqa: E731
        public = Orders(connect, "%s", "public.orders", "id", seed=1)
        erp = Orders(connect, "%s", "erp.orders", "no", seed=2)
        api.add_view("tv_public", "SELECT o.id, o.customer, o.total FROM tv_pg.orders o")
        view = api.http.post("/v1/views", json={"name": "tv_erp", "table": "tv_pg.erp.orders"}).json()
        assert view["table"] == "tv_pg.erp.orders" and view["key"] == ["no"]
        assert '"erp"."orders"' in view["sites"][0]["sql"]
        rounds(api, "tv_public", public, ["id", "customer", "total"])
        rounds(api, "tv_erp", erp, ["no", "customer", "total"])
        # both in one view, each by its own name
        joined = api.add_view(
            "tv_both",
            "SELECT p.id, p.total, e.no, e.total AS erp_total FROM tv_pg.orders p JOIN tv_pg.erp.orders e ON e.no = p.id",
        )
        assert '"erp"."orders"' in joined["sites"][0]["sql"] and 'FROM "orders"' in joined["sites"][0]["sql"]
        assert api.sync("tv_both")["status"] == "succeeded"
        public_rows = {a: t for a, _, t in public.rows()}
        erp_rows = {a: t for a, _, t in erp.rows()}
        expected = sorted((i, money(public_rows[i]), money(erp_rows[i])) for i in public_rows.keys() & erp_rows.keys())
        assert sorted((r["id"], r["total"], r["erp_total"]) for r in api.rows("tv_both")) == expected
        # a table the agent does not expose: the 422 says which --allow exposes it, for POST and PUT alike
        for method, path in (("post", "/v1/views"), ("put", "/v1/views/tv_erp")):
            body = {"table": "tv_pg.erp.secret"} | ({"name": "tv_secret"} if method == "post" else {})
            r = api.http.request(method.upper(), path, json=body)
            assert r.status_code == 422 and "--allow erp.secret" in r.text, r.text
            r = api.http.request(
                method.upper(), path, json={**body, "table": None, "sql": "SELECT s.id FROM tv_pg.erp.secret s"}
            )
            assert r.status_code == 422 and "--allow erp.secret" in r.text, r.text
    finally:
        agent.stop()


def test_mariadb_table_of_a_second_database(api, service, logs_dir, mariadb_server, mariadb):
    other = mariadb_server.create_database(f"{mariadb.name}_erp")
    with contextlib.closing(mysql_connect(other.owner_url)) as c:
        c.cursor().execute("CREATE TABLE orders (no INT PRIMARY KEY, customer TEXT, total DECIMAL(8,2))")
    orders = Orders(lambda: contextlib.closing(mysql_connect(other.owner_url)), "%s", "orders", "no", seed=3)
    agent = agent_source(api, service, logs_dir, "tv_my", mariadb.reader_url, allow=[f"{other.name}.orders"])
    try:
        view = api.http.post("/v1/views", json={"name": "tv_my_orders", "table": f"tv_my.{other.name}.orders"})
        assert view.status_code == 201, view.text
        assert view.json()["sites"][0]["sql"].count(f"`{other.name}`.`orders`") == 1
        rounds(api, "tv_my_orders", orders, ["no", "customer", "total"])
    finally:
        agent.stop()
