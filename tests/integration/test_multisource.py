"""Views over several sources: two and three SQLite sources, and SQLite with PostgreSQL.

Randomized rounds move orders between customers (and products), add orders whose customer
does not exist yet (dangling rows), add and remove customers and products, and flip the
filter columns on every side. After every sync the view equals the truth computed over all
sources at once (here joined in Python from the databases), and the delta is exact under
the derived key (an order that changes partner is an update, never a delete and an insert).
The view's delta comes from the fragments' deltas (the delta rules of join_delta.py) once
the view is loaded; the rounds check that it did.
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
#: orders joined to their customer and to their product at a third source, on equalities
#: only (the view's delta is then joined on the driver, equi_join.py)
VIEW3_SQL = (
    "SELECT o.oid, o.amount, o.status, c.id AS cid, c.name, c.region, p.pid, p.title FROM {orders}.orders o "
    "JOIN {customers}.customers c ON o.cust_id = c.id JOIN {products}.products p ON p.pid = o.product_id "
    "WHERE c.region IN ('north', 'east') AND o.status <> 'void' AND p.category <> 'hidden'"
)
#: every order that is not void, with its customer (from another source) and its product
#: (from its own source) where one matches, NULLs where none does
LEFT_SQL = (
    "SELECT o.oid, o.amount, o.status, c.id AS cid, c.name, c.region, p.pid, p.title FROM {shop}.orders o "
    "LEFT JOIN {crm}.customers c ON c.id = o.cust_id AND c.region IN ('north', 'east'){credit} "
    "LEFT JOIN {shop}.products p ON p.pid = o.product_id AND p.category <> 'hidden' "
    "WHERE o.status <> 'void'"
)
#: every customer with each of its orders (another source) that is not void, or NULLs: a
#: LEFT JOIN that may match several rows, so the view's key is (cid, oid), oid NULL where
#: the customer has no order
MANY_SQL = (
    "SELECT c.id AS cid, c.name, c.region, o.oid, o.amount, o.status FROM {crm}.customers c "
    "LEFT JOIN {shop}.orders o ON o.cust_id = c.id AND o.status <> 'void'{credit}"
)
#: each order has one customer (and one product): their keys are implied, and an order
#: that moves to another customer is an update of its row, not a delete and an insert
KEY = ["oid"]
PRODUCTS = 30


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
    def __init__(self, customers: Customers, orders_db, seed: int, products_db=None):
        self.customers = customers
        self.orders_db = orders_db
        self.products_db = products_db  # the third source, when the view has one
        self.rng = random.Random(seed)
        with sqlite3.connect(orders_db) as c:
            c.execute(
                "CREATE TABLE orders (oid INTEGER PRIMARY KEY, cust_id INTEGER, amount DECIMAL(10,2), status TEXT, "
                "product_id INTEGER)"
            )
        if products_db is not None:
            with sqlite3.connect(products_db) as c:
                c.execute("CREATE TABLE products (pid INTEGER PRIMARY KEY, title TEXT, category TEXT)")
                for pid in range(1, PRODUCTS + 1):
                    self.add_product(c, pid)
        self.next_cust, self.next_order = 1, 1
        for _ in range(60):
            self.add_customer()
        for _ in range(250):
            self.add_order()

    def add_product(self, c, pid: int) -> None:
        r = self.rng
        c.execute(
            "INSERT INTO products VALUES (?, ?, ?)",
            (pid, r.choice(["mug", "pen", None]), r.choice(["tools", "toys", "hidden"])),
        )

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
                "INSERT INTO orders VALUES (?, ?, ?, ?, ?)",
                (
                    self.next_order,
                    cust or r.randint(1, self.next_cust + 5),
                    round(r.uniform(0, 50), 2),
                    r.choice(["open", "paid", "void", None]),
                    r.randint(1, PRODUCTS + 3),
                ),
            )
        self.next_order += 1

    def change(self):
        r = self.rng
        with sqlite3.connect(self.orders_db) as c:
            oids = [x[0] for x in c.execute("SELECT oid FROM orders")]
            for oid in r.sample(oids, min(len(oids), 25)):
                what = r.random()
                if what < 0.3:  # a new join partner, possibly one that does not exist (yet)
                    c.execute("UPDATE orders SET cust_id = ? WHERE oid = ?", (r.randint(1, self.next_cust + 5), oid))
                elif what < 0.4:
                    c.execute("UPDATE orders SET product_id = ? WHERE oid = ?", (r.randint(1, PRODUCTS + 3), oid))
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
        if self.products_db is not None:
            with sqlite3.connect(self.products_db) as c:
                pids = [x[0] for x in c.execute("SELECT pid FROM products")]
                for pid in r.sample(pids, 3):
                    c.execute(
                        "UPDATE products SET category = ?, title = ? WHERE pid = ?",
                        (r.choice(["tools", "toys", "hidden"]), r.choice(["mug", "pen", "cup"]), pid),
                    )
                c.execute("DELETE FROM products WHERE pid = ?", (r.choice(pids),))
                missing = sorted(set(range(1, PRODUCTS + 4)) - set(pids))
                if missing:  # a product appears, and the orders that name it join
                    self.add_product(c, r.choice(missing))

    def small_change(self):
        """One order's amount and one customer's name: a change the view keeps as an overlay."""
        r = self.rng
        with sqlite3.connect(self.orders_db) as c:
            oid = r.choice([x[0] for x in c.execute("SELECT oid FROM orders")])
            c.execute("UPDATE orders SET amount = ? WHERE oid = ?", (round(r.uniform(0, 50), 2), oid))
        self.customers.run("UPDATE customers SET name = ? WHERE id = ?", ("Zoë", r.choice(list(self.customers.rows()))))

    def tables(self) -> tuple[dict, dict | None, list]:
        """Customers and products by key (None: no products source), and the orders."""
        products = None
        if self.products_db is not None:
            with sqlite3.connect(self.products_db) as c:
                products = {r[0]: r for r in c.execute("SELECT pid, title, category FROM products")}
        with sqlite3.connect(self.orders_db) as c:
            orders = c.execute("SELECT oid, cust_id, amount, status, product_id FROM orders").fetchall()
        return self.customers.rows(), products, orders

    def left_truth(self, credit_test: bool) -> dict:
        """LEFT_SQL over the databases: every order kept, its partners or NULLs."""
        customers, products, orders = self.tables()
        rows = []
        for oid, cust, amount, status, product in orders:
            if status is None or status == "void":
                continue
            cid, name, region, credit = customers.get(cust, (None,) * 4)
            if (
                cid is None
                or region not in ("north", "east")
                or (credit_test and (amount is None or amount + credit <= 10))
            ):
                cid = name = region = None
            pid, title, category = products.get(product, (None,) * 3)
            if pid is None or category is None or category == "hidden":
                pid = title = None
            amount = None if amount is None else str(Decimal(repr(amount)).quantize(Decimal("0.01")))
            rows.append(
                {
                    "oid": oid,
                    "amount": amount,
                    "status": status,
                    "cid": cid,
                    "name": name,
                    "region": region,
                    "pid": pid,
                    "title": title,
                }
            )
        return keyed(rows, KEY)

    def many_truth(self, credit_test: bool) -> dict:
        """MANY_SQL over the databases: each customer once per matching order, or padded."""
        customers, _, orders = self.tables()
        rows = []
        for cid, name, region, credit in customers.values():
            matched = [
                {
                    "oid": oid,
                    "amount": None if amount is None else str(Decimal(repr(amount)).quantize(Decimal("0.01"))),
                    "status": status,
                }
                for oid, cust, amount, status, _ in orders
                if cust == cid
                and status is not None
                and status != "void"
                and (not credit_test or (amount is not None and amount + credit > 10))
            ]
            for order in matched or [{"oid": None, "amount": None, "status": None}]:
                rows.append({"cid": cid, "name": name, "region": region, **order})
        return keyed(rows, ["cid", "oid"])

    def truth(self) -> dict:
        customers, products, orders = self.tables()
        rows = []
        for oid, cust, amount, status, product in orders:
            cust_row = customers.get(cust)
            if cust_row is None:
                continue
            cid, name, region, credit = cust_row
            # VIEW3_SQL has no credit test (a NULL amount passes it); VIEW_SQL has
            credit_ok = products is not None or (amount is not None and amount + credit > 10)
            if region in ("north", "east") and status is not None and status != "void" and credit_ok:
                row = {
                    "oid": oid,
                    "amount": None if amount is None else str(Decimal(repr(amount)).quantize(Decimal("0.01"))),
                    "status": status,
                    "cid": cid,
                    "name": name,
                    "region": region,
                }
                if products is not None:
                    pid, title, category = products.get(product, (None, None, None))
                    if pid is None or category is None or category == "hidden":
                        continue
                    row.update(pid=pid, title=title)
                rows.append(row)
        return keyed(rows, KEY)


def rounds(api, world: World, view: str, n: int, truth=World.truth, joined_on: str = "spark") -> None:
    """Sync `n` rounds of changes; orders that move to another customer come out as updates
    (the derived key holds the order's key only), and the view's delta comes from the
    fragments' deltas, its rows kept as an overlay over the stored ones."""
    before: dict = {}
    moved, methods, written, evaluators = 0, [], set(), set()
    for rnd in range(n + 1):
        if rnd:
            world.change() if rnd % 2 else world.small_change()
        now = truth(world)
        sync = api.sync(view)
        check_sync(api, view, KEY, before, now, sync)
        assembly = sync["metrics"]["assembly"]
        methods.append(assembly["method"])
        written.add(assembly["view_written"])
        if "joined_on" in assembly:
            evaluators.add(assembly["joined_on"])
        for line in api.delta(view, sync["id"]):
            old = before.get((line["row"]["oid"],))
            moved += line["op"] == "update" and old is not None and old["cid"] != line["row"]["cid"]
        before = now
    assert moved > 0, "no order changed customer in the rounds"
    assert methods[0] == "recompute" and set(methods[1:]) == {"delta_rules"}, methods
    assert evaluators == {joined_on}, evaluators
    assert "overlay" in written, written


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


def test_three_sources_sqlite_postgres_sqlite(api, postgres_server, tmp_path, logs_dir):
    postgres = postgres_server.create_database("multisource_three")
    customers = Customers(lambda: psycopg.connect(postgres.owner_url, autocommit=True), "%s")
    world = World(customers, tmp_path / "shop.db", seed=13, products_db=tmp_path / "catalog.db")
    agents = [
        start_agent(postgres.reader_url, logs_dir),
        start_agent(f"sqlite:///{tmp_path / 'shop.db'}", logs_dir),
        start_agent(f"sqlite:///{tmp_path / 'catalog.db'}", logs_dir),
    ]
    try:
        for name, agent in zip(("tri_crm", "tri_shop", "tri_cat"), agents):
            api.add_source(name, agent.url)
        view = api.add_view(
            "orders_three", VIEW3_SQL.format(orders="tri_shop", customers="tri_crm", products="tri_cat")
        )
        assert view["key"] == KEY and len(view["sites"]) == 3
        rounds(api, world, "orders_three", 5, joined_on="driver")
        # an audit recomputes the join from full reads of every site, and agrees
        before = world.truth()
        world.change()
        sync = api.http.post("/v1/views/orders_three/syncs", params={"wait": "true", "mode": "verify"}).json()
        check_sync(api, "orders_three", KEY, before, world.truth(), sync)
        assert sync["metrics"]["assembly"]["method"] == "recompute"
        assert "verify" in sync["metrics"]["assembly"]["reason"] and sync["metrics"]["verify"]["divergent_rows"] == 0
    finally:
        for agent in agents:
            agent.stop()


@pytest.mark.parametrize("joined_on", ["spark", "driver"])
def test_left_joins_within_a_source_and_across_sources(api, tmp_path, logs_dir, joined_on):
    """Orders keep their row whatever becomes of their partners: a customer (another
    source) or a product (the orders' own source) that appears, changes, stops matching or
    goes turns the row's columns from NULLs to values and back, always as an update. With a
    credit test across the sources in the ON, Spark joins the changes; with equalities
    only, the driver does."""
    credit = joined_on == "spark"
    cdb, shop = tmp_path / "crm.db", tmp_path / "shop.db"
    customers = Customers(lambda: sqlite3.connect(cdb), "?")
    world = World(customers, shop, seed=21, products_db=shop)
    crm_agent = start_agent(f"sqlite:///{cdb}", logs_dir)
    shop_agent = start_agent(f"sqlite:///{shop}", logs_dir)
    try:
        crm, shop_name, name = f"lj_crm_{joined_on}", f"lj_shop_{joined_on}", f"orders_left_{joined_on}"
        api.add_source(crm, crm_agent.url)
        api.add_source(shop_name, shop_agent.url)
        sql = LEFT_SQL.format(shop=shop_name, crm=crm, credit=" AND o.amount + c.credit > 10" if credit else "")
        view = api.add_view(name, sql)
        assert view["key"] == KEY and [s["source"] for s in view["sites"]] == [shop_name, crm, shop_name]
        rounds(api, world, name, 6, lambda w: w.left_truth(credit), joined_on)
        padded = [r for r in api.rows(name) if r["cid"] is None or r["pid"] is None]
        assert padded and len(padded) < len(api.rows(name))
    finally:
        crm_agent.stop()
        shop_agent.stop()


@pytest.mark.parametrize("joined_on", ["driver", "spark"])
def test_a_left_join_matching_several_rows(api, tmp_path, logs_dir, joined_on):
    """Customers with each of their orders: a customer's padded row gives way to the rows
    of its first orders and comes back when the last one goes or stops matching; the
    view's key holds the order's key, NULL in a padded row, matched NULL to NULL."""
    cdb, shop = tmp_path / "crm.db", tmp_path / "shop.db"
    customers = Customers(lambda: sqlite3.connect(cdb), "?")
    world = World(customers, shop, seed=33)
    agents = [start_agent(f"sqlite:///{cdb}", logs_dir), start_agent(f"sqlite:///{shop}", logs_dir)]
    credit = joined_on == "spark"
    key = ["cid", "oid"]
    try:
        crm, shop_name, name = f"many_crm_{joined_on}", f"many_shop_{joined_on}", f"customers_orders_{joined_on}"
        api.add_source(crm, agents[0].url)
        api.add_source(shop_name, agents[1].url)
        sql = MANY_SQL.format(crm=crm, shop=shop_name, credit=" AND o.amount + c.credit > 10" if credit else "")
        view = api.add_view(name, sql)
        assert view["key"] == key
        before: dict = {}
        methods, written, padded_seen = [], set(), 0
        for rnd in range(6):
            if rnd:
                world.change() if rnd % 2 else world.small_change()
            now = world.many_truth(credit)
            sync = api.sync(name)
            check_sync(api, name, key, before, now, sync)
            assembly = sync["metrics"]["assembly"]
            methods.append((assembly["method"], assembly.get("joined_on")))
            written.add(assembly["view_written"])
            padded_seen += sum(1 for k in now if k[1] is None)
            before = now
        assert methods[0][0] == "recompute" and set(methods[1:]) == {("delta_rules", joined_on)}, methods
        assert padded_seen and len(before) > len({k[0] for k in before})  # padded customers, and several orders
        assert written == {"whole", "overlay"}, written
    finally:
        for agent in agents:
            agent.stop()


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
            c.execute("INSERT INTO orders VALUES (?, ?, ?, ?, ?)", (999_999, orphan_customer, 42.0, "open", 1))
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
