"""strategy row_version against the oracle, on PostgreSQL (tables with no timestamp at all).

Orders and their lines (a join within one site, a composite key) changed at random: updates,
inserts, hard deletes, rows leaving and entering the WHERE clause through either table, and
UPDATEs that rewrite equal values (read as candidates, no delta row). After every sync the
view equals the truth read straight from the database, the delta is exact, and the changed
read returned exactly the view rows whose line or order was written since the last sync.
Then the subtle cases, each on a small table: a transaction open across a sync, and the same
with its write inside a savepoint; 32-bit wraparound with epochs and frozen rows on a cluster
whose counter starts just below 2^32, then a jump of 2^31 transactions (a full
reconciliation, after which the frozen rows, a little less than 2^31 behind, are not read
again); and a restore onto a new cluster, which the next sync detects and answers with a
full reconciliation.
"""

from __future__ import annotations

import random
import sqlite3

import httpx
import psycopg
import pytest

from deltasieve_protocol import frames
from deltasieve_protocol.models import ExtractControl, SiteSpec
from tests.support.oracle import check_sync
from tests.support.xid_cluster import burn_xids, jump_xids, next_xid, restore_in_place, start_near_wraparound
from workloads.harness import start_agent

pytestmark = pytest.mark.integration

#: Rounds of changes; the second is a periodic full reconciliation.
ROUNDS = 3  # the third reads changes again after a reconciliation
RECONCILE_EVERY = 2
VIEW_SQL = (
    "SELECT l.order_id, l.line_no, l.amount, l.note, o.order_id AS oid, o.customer FROM {src}.lines l "
    "JOIN {src}.orders o ON l.order_id = o.order_id WHERE l.amount > 10 AND o.status <> 'void'"
)
TRUTH_SQL = (
    "SELECT l.order_id, l.line_no, l.amount, l.note, o.order_id AS oid, o.customer FROM lines l "
    "JOIN orders o ON l.order_id = o.order_id WHERE l.amount > 10 AND o.status <> 'void'"
)
COLUMNS = ["order_id", "line_no", "amount", "note", "oid", "customer"]


def report(sync: dict) -> dict:
    m = sync["metrics"]
    return m["sites"][0]["row_version"] if "sites" in m else m["row_version"]


class Shop:
    """Orders and lines without any timestamp; each change an autocommitted statement."""

    def __init__(self, url: str, seed: int, orders: int = 600, lines: int = 4000):
        self.url = url
        self.rng = random.Random(seed)
        self.orders, self.lines = orders, set()
        with self.connect() as c:
            c.execute("CREATE TABLE orders (order_id integer PRIMARY KEY, customer text, status text)")
            c.execute(
                "CREATE TABLE lines (order_id integer NOT NULL, line_no integer NOT NULL, amount integer, "
                "note text, PRIMARY KEY (order_id, line_no))"
            )
            for table in ("orders", "lines"):  # no autovacuum transaction running at a snapshot
                c.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
            with c.transaction(), c.cursor() as cursor:
                statuses = [self.rng.choice(["open", "open", "void"]) for _ in range(orders)]
                cursor.executemany(
                    "INSERT INTO orders VALUES (%s, %s, %s)",
                    [(n, f"customer {n % 50}", status) for n, status in enumerate(statuses, start=1)],
                )
                for _ in range(lines):
                    self.insert_line(c)

    def connect(self) -> psycopg.Connection:
        return psycopg.connect(self.url, autocommit=True)

    def insert_line(self, c) -> tuple[int, int]:
        while True:
            key = (self.rng.randint(1, self.orders), self.rng.randint(1, 30))
            if key not in self.lines:
                break
        self.lines.add(key)
        c.execute("INSERT INTO lines VALUES (%s, %s, %s, %s)", (*key, self.rng.randrange(100), self.rng.choice("xy")))
        return key

    def change(self) -> tuple[set, set, set]:
        """A round of changes: (lines written, orders written, lines rewritten with equal values)."""
        rng, lines, orders = self.rng, set(), set()
        with self.connect() as c:
            keys = sorted(self.lines)
            for key in rng.sample(keys, 15):  # updates; some cross the WHERE clause (amount > 10)
                c.execute(
                    "UPDATE lines SET amount = %s WHERE order_id = %s AND line_no = %s", (rng.randrange(100), *key)
                )
                lines.add(key)
            same = set(rng.sample([k for k in keys if k not in lines], 8))
            for key in same:  # rewritten with the values they had: candidates, but no change
                c.execute("UPDATE lines SET note = note, amount = amount WHERE order_id = %s AND line_no = %s", key)
            for key in rng.sample(keys, 4):  # hard deletes
                c.execute("DELETE FROM lines WHERE order_id = %s AND line_no = %s", key)
                self.lines.discard(key)
                lines.discard(key)
                same.discard(key)
            for order in rng.sample(range(1, self.orders + 1), 3):  # orders renamed, voided, reopened
                what = rng.choice(["customer = 'renamed'", "status = 'void'", "status = 'open'"])
                c.execute(f"UPDATE orders SET {what} WHERE order_id = %s", (order,))
                orders.add(order)
            for _ in range(8):
                lines.add(self.insert_line(c))
        return lines, orders, same

    def truth(self, key: list[str]) -> dict:
        with self.connect() as c:
            rows = [dict(zip(COLUMNS, r, strict=True)) for r in c.execute(TRUTH_SQL).fetchall()]
        return {tuple(r[k] for k in key): r for r in rows}


def ran_at_snapshot(rv: dict) -> bool:
    """Whether a transaction (any database's: another test's autovacuum ANALYZE) was running at the previous snapshot."""
    return rv["previous_snapshot"]["xmin"] < rv["previous_snapshot"]["xmax"]


def assert_read(rv: dict, written: int) -> None:
    """The changed read returned exactly the `written` rows; more only when some transaction
    was running at the previous snapshot (the rows of those that ended after its xmin are read again)."""
    if ran_at_snapshot(rv):
        assert rv["rows_read"] >= written, (written, rv)
    else:
        assert rv["rows_read"] == written, (written, rv)


def written_since(truth: dict, lines: set, orders: set) -> int:
    """View rows whose line or order was written by the round: what the changed read must return."""
    return sum(1 for r in truth.values() if (r["order_id"], r["line_no"]) in lines or r["oid"] in orders)


def test_row_version_rounds_are_exact(api, postgres, logs_dir):
    shop = Shop(postgres.owner_url, seed=1616)
    agent = start_agent(postgres.reader_url, logs_dir)
    try:
        api.add_source("rv_shop", agent.url)
        view = api.add_view(
            "rv_lines", VIEW_SQL.format(src="rv_shop"), strategy="row_version", reconcile_every=RECONCILE_EVERY
        )
        key = view["key"]
        assert (view["strategy"], view["reconcile_every"]) == ("row_version", RECONCILE_EVERY), view
        before = shop.truth(key)
        load = api.sync("rv_lines")
        check_sync(api, "rv_lines", key, {}, before, load)
        tables = []
        for rnd in range(1, ROUNDS + 1):
            lines, orders, same = shop.change()
            truth = shop.truth(key)
            sync = api.sync("rv_lines")
            check_sync(api, "rv_lines", key, before, truth, sync)
            rv = report(sync)
            assert "fallback" not in rv, rv
            assert sync["metrics"]["executor"] == "arrow", sync["metrics"]  # small: no Spark job (check_sync)
            assert rv["reconciled"] is (rnd % RECONCILE_EVERY == 0), rv
            assert rv["read_from_xmin"] == rv["previous_snapshot"]["xmin"] <= rv["snapshot"]["xmin"], rv
            assert_read(rv, written_since(truth, lines | same, orders))
            assert rv["rows_read"] < len(truth) / 20 or ran_at_snapshot(rv), rv
            rewritten = {
                k for k, r in truth.items() if (r["order_id"], r["line_no"]) in same and r["oid"] not in orders
            }
            delta = {tuple(line["row"][c] for c in key) for line in api.delta("rv_lines", sync["id"])}
            assert rewritten and not rewritten & delta, "a rewrite of equal values made a delta row"
            if rv["reconciled"]:
                assert rv["rows_missed"] == 0, rv
            else:
                assert rv["key_reconciliation"] in ("sketch", "range_checksum"), rv
                assert rv["keys_reconciled"] < len(truth) / 4, rv
                assert rv["key_reconciliation_beside"] is True, rv  # beside the changed read
                tables += [rv["key_table"]] if rv["key_reconciliation"] == "sketch" else []
            before = truth
        # the table of the keys is built with the load, then kept up to date by every sync, the reconciling ones included
        assert tables and set(tables) == {"kept"}, tables
    finally:
        agent.stop()


ITEMS_SQL = "SELECT i.id, i.name, i.qty FROM {src}.{table} i WHERE i.qty >= 0"
ITEM_COLUMNS = ["id", "name", "qty"]


def make_items(url: str, rows: int = 300, table: str = "items") -> None:
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(f"CREATE TABLE {table} (id integer PRIMARY KEY, name text, qty integer)")
        c.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
        c.execute(f"INSERT INTO {table} SELECT g, 'item ' || g, g %% 7 FROM generate_series(1, %s) AS g", (rows,))


def items_truth(url: str, table: str = "items") -> dict:
    with psycopg.connect(url, autocommit=True) as c:
        rows = c.execute(f"SELECT id, name, qty FROM {table} WHERE qty >= 0").fetchall()
    return {(r[0],): dict(zip(ITEM_COLUMNS, r, strict=True)) for r in rows}


class ItemsView:
    """A one-table view over `items`, synced and checked against the oracle at each step."""

    def __init__(self, api, name: str, url: str, source_url: str, table: str = "items"):
        self.api, self.name, self.url, self.table = api, name, url, table
        api.add_source(name, source_url)
        api.add_view(name, ITEMS_SQL.format(src=name, table=table), strategy="row_version", reconcile_every=1000)
        self.before: dict = {}

    def sync(self) -> dict:
        truth = items_truth(self.url, self.table)
        sync = self.api.sync(self.name)
        check_sync(self.api, self.name, ["id"], self.before, truth, sync)
        self.before = truth
        return sync


def test_row_version_catches_transactions_open_across_a_sync(api, postgres, logs_dir):
    """Transactions running at the snapshot commit after the sync: the next sync reads their
    rows, also a row written inside a savepoint, whose subtransaction id the snapshot does
    not list (a test of visibility in the previous snapshot would take it as seen). While
    they run, a sync is carried over by its change token; once they commit, or anything
    else does, the next one reads."""
    url = postgres.owner_url
    make_items(url)
    agent = start_agent(postgres.reader_url, logs_dir)
    try:
        view = ItemsView(api, "rv_open", url, agent.url)
        view.sync()
        with (
            psycopg.connect(url) as plain,
            psycopg.connect(url) as nested,
            psycopg.connect(url, autocommit=True) as now,
        ):
            for late in (plain, nested):  # each has its id before the snapshot
                late.execute("SELECT pg_current_xact_id()")
            plain.execute("UPDATE items SET name = 'late' WHERE id = 2")
            nested.execute("SAVEPOINT s")
            nested.execute("UPDATE items SET name = 'late in a savepoint' WHERE id = 3")
            nested.execute("RELEASE SAVEPOINT s")
            now.execute("UPDATE items SET qty = qty + 1 WHERE id = 10")
            during = view.sync()  # sees the committed update only
            assert {r["row"]["id"] for r in api.delta("rv_open", during["id"])} == {10}
            # nothing committed since, two transactions running: the change token proves it, nothing is read
            still = view.sync()["metrics"]
            assert still["unchanged_by_token"] is True and still["rows_scanned"] == 0, still
            plain.commit()
            nested.commit()
            written = dict(now.execute("SELECT id, xmin::text::bigint FROM items WHERE id IN (2, 3)").fetchall())
        snapshot = report(during)["snapshot"]
        running = [x % 2**32 for x in snapshot["xip"]]
        assert written[2] in running, (written, snapshot)
        # the savepoint's id: at or above xmin and below xmax, yet not listed as running
        assert snapshot["xmin"] % 2**32 <= written[3] < snapshot["xmax"] % 2**32, (written, snapshot)
        assert written[3] not in running, (written, snapshot)
        after = view.sync()
        assert {r["row"]["id"] for r in api.delta("rv_open", after["id"])} == {2, 3}, "a late write was missed"
        assert report(after)["rows_read"] <= 3 and after["metrics"]["unchanged_by_token"] is False, after["metrics"]
        assert view.sync()["metrics"]["unchanged_by_token"] is True
        # a write committed to a table the view does not read: the next sync reads, and finds nothing
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("CREATE TABLE rv_elsewhere (n integer)")
        elsewhere = view.sync()["metrics"]
        assert elsewhere["unchanged_by_token"] is False and elsewhere["rows_scanned"] > 0, elsewhere
    finally:
        agent.stop()


def test_row_version_with_one_extraction_slot_at_the_agent(api, postgres, logs_dir):
    """An agent that runs one extraction at a time refuses the key reconciliation's request
    beside the changed read (429), or the changed read's: the sync runs them one after the
    other instead, exact and without a retry."""
    url = postgres.owner_url
    make_items(url, table="one_slot")
    agent = start_agent(postgres.reader_url, logs_dir, extra=["--max-concurrent-extractions", "1"])
    try:
        view = ItemsView(api, "rv_one_slot", url, agent.url, table="one_slot")
        view.sync()
        for n in range(2):
            with psycopg.connect(url, autocommit=True) as c:
                c.execute("UPDATE one_slot SET qty = qty + 1 WHERE id %% 37 = %s", (n,))
                c.execute("DELETE FROM one_slot WHERE id %% 53 = %s", (n,))
                c.execute("INSERT INTO one_slot VALUES (%s, 'new', 1)", (1000 + n,))
            sync = view.sync()
            rv = report(sync)
            assert (rv["reconciled"], sync["metrics"]["retries"]) == (False, 0), (rv, sync["metrics"])
            assert rv["keys_deleted"] > 0 and rv["key_reconciliation_beside"] in (True, False), rv
    finally:
        agent.stop()


@pytest.fixture(scope="module")
def wrapped(tmp_path_factory):
    """A cluster of its own whose transaction ids start 2,000 short of 2^32 (epoch 1)."""
    server = start_near_wraparound(tmp_path_factory.mktemp("rv_wrap"), below=2000)
    yield server
    server.stop()


def test_row_version_across_the_wraparound_and_frozen_rows(api, wrapped, logs_dir):
    url = wrapped.owner_url
    make_items(url)
    agent = start_agent(wrapped.reader_url, logs_dir)
    try:
        view = ItemsView(api, "rv_wrap", url, agent.url)
        burn_xids(url, 2**33 - 12)  # the load below, then 25 transactions across 2^32
        view.sync()
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("VACUUM FREEZE items")  # frozen rows keep their raw xmin: they must not look new
            for n in range(20):
                c.execute("UPDATE items SET qty = qty + 1 WHERE id = %s", (n + 1,))
            c.execute("DELETE FROM items WHERE id = 300")
            for n in range(4):
                c.execute("INSERT INTO items VALUES (%s, 'new', 1)", (1000 + n,))
        rv = report(view.sync())
        assert "fallback" not in rv and not rv["reconciled"], rv
        epochs = rv["previous_snapshot"]["xmin"] >> 32, rv["snapshot"]["xmin"] >> 32
        assert epochs == (1, 2), f"the round did not cross the wraparound: {rv}, next xid {next_xid(url)}"
        assert_read(rv, 24)
        # 2^31 transactions later (every row frozen): 32-bit distances no longer tell old from new
        jump_xids(wrapped, 2**31 + 5000, ("legacy",))
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("UPDATE items SET name = 'after the jump' WHERE id = 1")
        rv = report(view.sync())
        assert rv["reconciled"] and "more than 32-bit xids can compare" in rv["fallback"], rv
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("UPDATE items SET name = 'then' WHERE id IN (2, 3)")
        rv = report(view.sync())
        # the frozen rows' xmins lie a little less than 2^31 behind the snapshot's: a bound of
        # 2^31 instead of the current xmax would read them all again
        assert "fallback" not in rv, rv
        assert_read(rv, 2)
    finally:
        agent.stop()


def test_row_version_after_a_restore_onto_a_new_cluster(api, wrapped, logs_dir):
    url = wrapped.owner_url
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS items")
    make_items(url)
    agent = start_agent(wrapped.reader_url, logs_dir)
    try:
        view = ItemsView(api, "rv_restored", url, agent.url)
        view.sync()
        restore_in_place(wrapped, "legacy")
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("UPDATE items SET name = 'after restore' WHERE id IN (4, 5)")
            c.execute("DELETE FROM items WHERE id = 6")
        sync = view.sync()
        rv = report(sync)
        assert rv["reconciled"] and "another server" in rv["fallback"], rv
        assert rv["rows_read"] == 0, rv  # the counter went back: the changed read alone would miss all
        identities = rv["previous_snapshot"]["system_identifier"], rv["snapshot"]["system_identifier"]
        assert identities[0] != identities[1] and rv["rows_missed"] is None, rv
        assert (sync["metrics"]["rows_updated"], sync["metrics"]["rows_deleted"]) == (2, 1)
        with psycopg.connect(url, autocommit=True) as c:  # a failed sync keeps the snapshot it started from
            c.execute("ALTER TABLE items RENAME TO items_away")
        failed = api.sync("rv_restored")
        assert failed["status"] == "failed", failed
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("ALTER TABLE items_away RENAME TO items")
            c.execute("UPDATE items SET qty = 9 WHERE id = 7")
        again = report(view.sync())
        assert "fallback" not in again, again
        assert_read(again, 1)
        assert again["previous_snapshot"] == rv["snapshot"], (again, rv)
    finally:
        agent.stop()


def test_row_version_needs_postgresql(api, tmp_path, logs_dir):
    """A view over a SQLite source cannot use row_version (422), and a SQLite agent refuses
    the request fields (422) and a bad xmin (4xx) before reading anything."""
    path = tmp_path / "items.db"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, qty INTEGER)")
    agent = start_agent(f"sqlite:///{path}", logs_dir)
    try:
        api.add_source("rv_lite", agent.url)
        r = api.http.post(
            "/v1/views",
            json={
                "name": "rv_lite_v",
                "sql": ITEMS_SQL.format(src="rv_lite", table="items"),
                "strategy": "row_version",
            },
        )
        assert r.status_code == 422 and "needs PostgreSQL" in r.text and "rv_lite (sqlite)" in r.text, r.text
        site = SiteSpec(
            sql='SELECT "i"."id" AS "id" FROM "items" AS "i"', key=["id"], columns=[{"name": "id", "type": "int"}]
        )
        for extra in ({"source_snapshot": True}, {"changed_since": {"xmin": 5}}, {"changed_since": {"xmin": -1}}):
            control = {**ExtractControl(site=site, seed=7).model_dump(), **extra}
            r = httpx.post(
                f"{agent.url}/v1/extract",
                content=frames.json_frame(frames.CONTROL, control),
                headers={"Content-Type": frames.MEDIA_TYPE},
                timeout=60,
            )
            words = "row_version needs PostgreSQL" if extra != {"changed_since": {"xmin": -1}} else "xmin"
            assert 400 <= r.status_code < 500 and words in r.text, (extra, r.status_code, r.text)
    finally:
        agent.stop()
