"""Views over several sources: two SQLite sources, and a SQLite and a PostgreSQL source.

Randomized rounds move orders between customers, add orders whose customer does not
exist yet (dangling rows), add and remove customers, and flip the filter column on one
side. After every sync the view equals the truth computed over all sources at once (here
joined in Python from both databases), and the delta is exact.
"""

from __future__ import annotations

import random
import sqlite3
from decimal import Decimal

import psycopg
import pytest

from tests.support.oracle import check_sync, keyed
from workloads.harness import start_agent

pytestmark = pytest.mark.integration

VIEW_SQL = (
    "SELECT o.oid, o.amount, o.status, c.id AS cid, c.name, c.region FROM {orders}.orders o "
    "JOIN {customers}.customers c ON o.cust_id = c.id "
    "WHERE c.region IN ('north', 'east') AND o.status <> 'void' AND o.amount + c.credit > 10"
)
#: each order has one customer: the customer's key is implied, and an order that moves to
#: another customer is an update of its row, not a delete and an insert
KEY = ["oid"]


class Customers:
    """The customers table, in SQLite or PostgreSQL."""

    def __init__(self, connect, placeholder: str):
        self.connect = connect
        self.ph = placeholder
        with self.connect() as c:
            c.execute(
                "CREATE TABLE customers (id integer PRIMARY KEY, name text, region text, credit integer NOT NULL)"
            )

    def run(self, sql: str, params=()):
        with self.connect() as c:
            c.execute(sql.replace("?", self.ph), params)

    def rows(self) -> dict:
        with self.connect() as c:
            return {r[0]: r for r in c.execute("SELECT id, name, region, credit FROM customers").fetchall()}


class World:
    def __init__(self, customers: Customers, orders_db, seed: int):
        self.customers = customers
        self.orders_db = orders_db
        self.rng = random.Random(seed)
        with sqlite3.connect(orders_db) as c:
            c.execute(
                "CREATE TABLE orders (oid INTEGER PRIMARY KEY, cust_id INTEGER, amount DECIMAL(10,2), status TEXT)"
            )
        self.next_cust, self.next_order = 1, 1
        for _ in range(60):
            self.add_customer()
        for _ in range(250):
            self.add_order()

    def add_customer(self, cid=None):
        r = self.rng
        cid = cid or self.next_cust
        self.next_cust = max(self.next_cust, cid + 1)
        self.customers.run(
            "INSERT INTO customers VALUES (?, ?, ?, ?)",
            (
                cid,
                r.choice(["Ann", "Björn", "Chen", "Dée", None]),
                r.choice(["north", "east", "south", None]),
                r.randint(0, 20),
            ),
        )

    def add_order(self, cust=None):
        r = self.rng
        with sqlite3.connect(self.orders_db) as c:
            c.execute(
                "INSERT INTO orders VALUES (?, ?, ?, ?)",
                (
                    self.next_order,
                    cust or r.randint(1, self.next_cust + 5),
                    round(r.uniform(0, 50), 2),
                    r.choice(["open", "paid", "void", None]),
                ),
            )
        self.next_order += 1

    def change(self):
        r = self.rng
        with sqlite3.connect(self.orders_db) as c:
            oids = [x[0] for x in c.execute("SELECT oid FROM orders")]
            for oid in r.sample(oids, min(len(oids), 25)):
                what = r.random()
                if what < 0.4:  # a new join partner, possibly one that does not exist (yet)
                    c.execute("UPDATE orders SET cust_id = ? WHERE oid = ?", (r.randint(1, self.next_cust + 5), oid))
                elif what < 0.8:
                    c.execute(
                        "UPDATE orders SET amount = ?, status = ? WHERE oid = ?",
                        (round(r.uniform(0, 50), 2), r.choice(["open", "void", "paid"]), oid),
                    )
                else:
                    c.execute("DELETE FROM orders WHERE oid = ?", (oid,))
        for _ in range(r.randint(3, 12)):
            self.add_order()
        ids = list(self.customers.rows())
        for cid in r.sample(ids, min(len(ids), 6)):
            self.customers.run(
                "UPDATE customers SET region = ?, credit = ? WHERE id = ?",
                (r.choice(["north", "east", "south"]), r.randint(0, 20), cid),
            )
        for cid in r.sample(ids, min(len(ids), 2)):
            self.customers.run("DELETE FROM customers WHERE id = ?", (cid,))
        for _ in range(r.randint(1, 4)):  # partners of dangling orders appear
            self.add_customer(self.next_cust)

    def truth(self) -> dict:
        customers = self.customers.rows()
        with sqlite3.connect(self.orders_db) as c:
            orders = c.execute("SELECT oid, cust_id, amount, status FROM orders").fetchall()
        rows = []
        for oid, cust, amount, status in orders:
            cust_row = customers.get(cust)
            if cust_row is None or amount is None:
                continue
            cid, name, region, credit = cust_row
            if region in ("north", "east") and status is not None and status != "void" and amount + credit > 10:
                rows.append(
                    {
                        "oid": oid,
                        "amount": str(Decimal(repr(amount)).quantize(Decimal("0.01"))),
                        "status": status,
                        "cid": cid,
                        "name": name,
                        "region": region,
                    }
                )
        return keyed(rows, KEY)


def rounds(api, world: World, view: str, n: int) -> None:
    """Sync `n` rounds of changes; orders that move to another customer come out as updates
    (the derived key holds the order's key only)."""
    before: dict = {}
    moved = 0
    for rnd in range(n + 1):
        if rnd:
            world.change()
        truth = world.truth()
        sync = api.sync(view)
        check_sync(api, view, KEY, before, truth, sync)
        for line in api.delta(view, sync["id"]):
            old = before.get((line["row"]["oid"],))
            moved += line["op"] == "update" and old is not None and old["cid"] != line["row"]["cid"]
        before = truth
    assert moved > 0, "no order changed customer in the rounds"


def test_two_sqlite_sources(api, tmp_path, logs_dir):
    cdb = tmp_path / "crm.db"
    customers = Customers(lambda: sqlite3.connect(cdb), "?")
    world = World(customers, tmp_path / "shop.db", seed=4)
    crm = start_agent(f"sqlite:///{cdb}", logs_dir)
    shop = start_agent(f"sqlite:///{tmp_path / 'shop.db'}", logs_dir)
    try:
        api.add_source("ms_crm", crm.url)
        api.add_source("ms_shop", shop.url)
        view = api.add_view("orders_by_customer", VIEW_SQL.format(orders="ms_shop", customers="ms_crm"))
        assert view["key"] == KEY and len(view["sites"]) == 2
        assert {s["source"] for s in view["sites"]} == {"ms_crm", "ms_shop"}
        rounds(api, world, "orders_by_customer", 6)
    finally:
        crm.stop()
        shop.stop()


def test_sqlite_and_postgres_sources(api, postgres, tmp_path, logs_dir):
    customers = Customers(lambda: psycopg.connect(postgres.owner_url, autocommit=True), "%s")
    world = World(customers, tmp_path / "shop.db", seed=9)
    crm = start_agent(postgres.reader_url, logs_dir)
    shop = start_agent(f"sqlite:///{tmp_path / 'shop.db'}", logs_dir)
    try:
        api.add_source("pgcrm", crm.url)
        api.add_source("sqlshop", shop.url)
        view = api.add_view("orders_mixed", VIEW_SQL.format(orders="sqlshop", customers="pgcrm"))
        dialects = {s["source"]: s["sql"] for s in view["sites"]}
        assert '"customers"' in dialects["pgcrm"] and '"orders"' in dialects["sqlshop"]
        rounds(api, world, "orders_mixed", 5)
    finally:
        crm.stop()
        shop.stop()


def test_a_dangling_row_enters_only_when_its_partner_arrives(api, tmp_path, logs_dir):
    cdb, odb = tmp_path / "c.db", tmp_path / "o.db"
    customers = Customers(lambda: sqlite3.connect(cdb), "?")
    world = World(customers, odb, seed=1)
    a, b = start_agent(f"sqlite:///{cdb}", logs_dir), start_agent(f"sqlite:///{odb}", logs_dir)
    try:
        api.add_source("dc", a.url)
        api.add_source("do", b.url)
        api.add_view("dangling_v", VIEW_SQL.format(orders="do", customers="dc"))
        assert api.sync("dangling_v")["status"] == "succeeded"
        orphan_customer = world.next_cust + 100
        with sqlite3.connect(odb) as c:
            c.execute("INSERT INTO orders VALUES (?, ?, ?, ?)", (999_999, orphan_customer, 42.0, "open"))
        for _ in range(2):  # the order has no customer: it must not show up, sync after sync
            sync = api.sync("dangling_v")
            assert sync["status"] == "succeeded", sync["error"]
            assert all(line["row"]["oid"] != 999_999 for line in api.delta("dangling_v", sync["id"]))
        customers.run("INSERT INTO customers VALUES (?, ?, ?, ?)", (orphan_customer, "Late", "north", 5))
        sync = api.sync("dangling_v")
        delta = api.delta("dangling_v", sync["id"])
        assert {
            "op": "insert",
            "row": {
                "oid": 999_999,
                "amount": "42.00",
                "status": "open",
                "cid": orphan_customer,
                "name": "Late",
                "region": "north",
            },
        } in delta
        assert len([d for d in delta if d["row"]["oid"] == 999_999]) == 1
    finally:
        a.stop()
        b.stop()
