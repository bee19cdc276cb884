"""A view's column_types on SQLite: text read as a timestamp and as a decimal, against the oracle.

A legacy application keeps its stamps as ISO text in a TEXT column, written now with a
space and now with a T, with and without a fraction or a UTC zone, and its amounts as text.
The view reads them as `timestamp` and `decimal(10,2)` under the timestamp strategy: over
randomized rounds of inserts, updates and deletes the view equals the truth, its delta is
exact, and each ranged read reads the changed rows only (its text comparison with the
watermark is exact whatever the layout). A value that later does not parse fails the sync
naming its row's key, and the previous version is still served. At definition, a sample
holding a value that does not parse answers 422 quoting it with its key; an ambiguous
`table.column`, and a pair that is not allowed, answer 422.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import sqlite3
import subprocess
import sys
import time
from decimal import Decimal

import httpx
import pytest

from deltasieve_protocol.models import ColumnSampleRequest
from tests.support.oracle import check_sync, keyed
from workloads.harness import start_agent

pytestmark = pytest.mark.integration

ROUNDS = 3
#: The timestamp strategy's lag; each round's changes are written longer than this before its sync.
LAG_S = 1.0
COLUMNS = ["order_id", "customer", "amount", "updated_at"]
COLUMN_TYPES = {"orders.updated_at": "timestamp", "orders.amount": "decimal(10,2)"}


def stamp(rng: random.Random) -> str:
    """Now, in UTC, as the legacy application writes it: a space or a T, any fraction, maybe a UTC zone."""
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    text = now.isoformat(sep=rng.choice(" T"), timespec=rng.choice(["seconds", "milliseconds", "microseconds"]))
    return text + rng.choice(["", "", "Z", "+00:00"])


def read_stamp(text: str) -> str:
    """The view's value of a stamp (ISO 8601 as the API writes a timestamp), read independently of the agent."""
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).replace(tzinfo=None).isoformat()


class TextStamps:
    """Orders whose stamp and amount are text, changed at random and stamped by the application."""

    def __init__(self, path, seed: int):
        self.path = path
        self.rng = random.Random(seed)
        self.next_id = 1
        with self.connect() as c:
            c.execute("CREATE TABLE orders (order_id INTEGER PRIMARY KEY, customer TEXT, amount TEXT, updated_at TEXT)")
            c.execute("CREATE INDEX orders_at ON orders (updated_at)")
            for _ in range(400):
                self.insert(c)

    def connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, isolation_level=None)

    def amount(self) -> str:
        return self.rng.choice([f"{self.rng.randrange(10_000) / 100}", str(self.rng.randrange(500)), None])

    def insert(self, c) -> None:
        c.execute(
            "INSERT INTO orders VALUES (?, ?, ?, ?)",
            (self.next_id, f"customer {self.rng.randrange(50)}", self.amount(), stamp(self.rng)),
        )
        self.next_id += 1

    def change(self) -> int:
        """Inserts, updates and deletes; the rows stamped (those the ranged read must read)."""
        rng = self.rng
        with self.connect() as c:
            ids = [r[0] for r in c.execute("SELECT order_id FROM orders")]
            changed = rng.sample(ids, 12)
            for order in changed[:8]:
                c.execute(
                    "UPDATE orders SET amount = ?, updated_at = ? WHERE order_id = ?",
                    (self.amount(), stamp(rng), order),
                )
            for order in changed[8:]:
                c.execute("DELETE FROM orders WHERE order_id = ?", (order,))
            for _ in range(6):
                self.insert(c)
        return 8 + 6

    def truth(self) -> dict:
        with self.connect() as c:
            rows = c.execute("SELECT order_id, customer, amount, updated_at FROM orders").fetchall()
        out = {}
        for order, customer, amount, at in rows:
            value = None if amount is None else str(Decimal(amount).quantize(Decimal("0.01")))
            out[(order,)] = dict(zip(COLUMNS, (order, customer, value, read_stamp(at)), strict=True))
        return out


def site_metrics(sync: dict) -> dict:
    metrics = sync["metrics"]
    return metrics["sites"][0] if "sites" in metrics else metrics


@pytest.mark.engines("sqlite")
def test_text_timestamps_under_the_timestamp_strategy(api, source, logs_dir):
    legacy = TextStamps(source.path, seed=3607)
    agent = start_agent(source.reader_url, logs_dir)
    name = "coltypes_orders"
    try:
        api.add_source("coltypes", agent.url)
        view = api.add_view(
            name,
            "SELECT o.order_id, o.customer, o.amount, o.updated_at FROM coltypes.orders o",
            strategy="timestamp",
            timestamps={"orders": "updated_at"},
            column_types=COLUMN_TYPES,
            timestamp_lag_s=LAG_S,
            reconcile_every=1000,  # ranged reads only: every change must be found by its stamp
        )
        assert view["source_column_types"] == COLUMN_TYPES, view
        assert view["column_types"] == {
            "order_id": "int",
            "customer": "text",
            "amount": "decimal(10,2)",
            "updated_at": "timestamp",
        }
        key = view["key"]
        before = legacy.truth()
        time.sleep(LAG_S + 0.5)  # the load's watermark minus the lag lies after the rows' creation
        check_sync(api, name, key, {}, before, api.sync(name))
        for _ in range(ROUNDS):
            stamped = legacy.change()
            time.sleep(LAG_S + 0.5)  # the next watermark minus the lag lies after every stamp written so far
            truth = legacy.truth()
            sync = api.sync(name)
            check_sync(api, name, key, before, truth, sync)
            report = site_metrics(sync)["timestamp"]
            assert report["rows_read"] == stamped, f"the ranged read read other rows than the changed ones: {report}"
            before = truth

        # a stamp the application wrote in another form: the sync fails naming the row, the view stays
        with legacy.connect() as c:
            bad = next(iter(before))[0]
            c.execute("UPDATE orders SET updated_at = '27/11/2026 03:40' WHERE order_id = ?", (bad,))
        failed = api.sync(name)
        assert failed["status"] == "failed", failed
        assert "27/11/2026 03:40" in failed["error"] and f"'order_id': {bad}" in failed["error"], failed["error"]
        assert keyed(api.rows(name), key) == before, "the failed sync changed the view"
    finally:
        agent.stop()


def test_a_text_stamp_the_view_does_not_select(api, tmp_path, logs_dir):
    """The stamp column is the timestamp strategy's alone: column_types reads it as a timestamp
    although the view leaves it out, and the ranged reads find every change by it."""
    legacy = TextStamps(tmp_path / "unselected.db", seed=4711)
    agent = start_agent(f"sqlite:///{legacy.path}", logs_dir)
    name, columns = "coltypes_unselected", ["order_id", "customer", "amount"]
    try:
        api.add_source("coltypes_un", agent.url)
        view = api.add_view(
            name,
            "SELECT o.order_id, o.customer, o.amount FROM coltypes_un.orders o",
            strategy="timestamp",
            timestamps={"orders": "updated_at"},
            column_types=COLUMN_TYPES,
            timestamp_lag_s=LAG_S,
            reconcile_every=1000,  # ranged reads only: every change must be found by its stamp
        )
        assert view["columns"] == columns and view["source_column_types"] == COLUMN_TYPES, view

        def truth() -> dict:
            return {k: {c: row[c] for c in columns} for k, row in legacy.truth().items()}

        before = truth()
        time.sleep(LAG_S + 0.5)
        check_sync(api, name, view["key"], {}, before, api.sync(name))
        for _ in range(ROUNDS):
            stamped = legacy.change()
            time.sleep(LAG_S + 0.5)
            after = truth()
            sync = api.sync(name)
            check_sync(api, name, view["key"], before, after, sync)
            report = site_metrics(sync)["timestamp"]
            assert report["rows_read"] == stamped, f"the ranged read read other rows than the changed ones: {report}"
            before = after
    finally:
        agent.stop()


@pytest.fixture(scope="module")
def two_sources(api, tmp_path_factory, logs_dir):
    """Two SQLite sources that both have a table `orders`; one of its stamps is not ISO 8601."""
    agents = []
    for name in ("cta", "ctb"):
        path = tmp_path_factory.mktemp(name) / "legacy.db"
        api.db_paths = {**getattr(api, "db_paths", {}), name: path}
        with sqlite3.connect(path) as c:
            c.execute("CREATE TABLE orders (order_id INTEGER PRIMARY KEY, customer TEXT, updated_at TEXT)")
            c.executemany(
                "INSERT INTO orders VALUES (?, ?, ?)",
                [(i, f"c{i}", f"2026-11-{1 + i % 28:02d} 10:00:00") for i in range(1, 200)],
            )
            if name == "ctb":
                c.execute("UPDATE orders SET updated_at = '2026-11-27 3:40:00' WHERE order_id = 77")
        agent = start_agent(f"sqlite:///{path}", logs_dir)
        agents.append(agent)
        api.add_source(name, agent.url)
    yield api, agents
    for agent in agents:
        agent.stop()


JOINED = "SELECT a.order_id, a.updated_at, b.order_id AS b_id, b.customer FROM cta.orders a JOIN ctb.orders b ON b.order_id = a.order_id"


@pytest.mark.parametrize(
    ("sql", "column_types", "words"),
    [
        (JOINED, {"orders.updated_at": "timestamp"}, ["ambiguous", "cta.orders.updated_at or ctb.orders.updated_at"]),
        (
            "SELECT o.order_id, o.updated_at FROM ctb.orders o",
            {"orders.updated_at": "timestamp"},
            ["'2026-11-27 3:40:00'", "the row with key order_id=77"],
        ),
        (
            "SELECT o.order_id, o.customer FROM cta.orders o",
            {"orders.customer": "float"},
            ["cannot be read as float", "text -> int, decimal(p,s), bool, date, timestamp, timestamptz"],
        ),
        ("SELECT o.order_id, o.customer FROM cta.orders o", {"orders.updated_at": "timestamp"}, ["does not select"]),
        ("SELECT o.order_id FROM cta.orders o", {"orders.order_id": "bool"}, ["key column"]),
        ("SELECT o.order_id FROM cta.orders o", {"updated_at": "timestamp"}, ["table.column"]),
    ],
    ids=["ambiguous", "bad-sample", "pair-not-allowed", "not-selected", "key", "no-table"],
)
def test_bad_column_types_are_422(two_sources, sql, column_types, words):
    api, _ = two_sources
    r = api.http.post("/v1/views", json={"name": "ct_bad", "sql": sql, "column_types": column_types})
    assert r.status_code == 422, r.text
    for word in words:
        assert word in r.json()["detail"], r.json()["detail"]


def test_source_qualified_column_and_its_sample(two_sources):
    api, (agent_a, _) = two_sources
    view = api.add_view("ct_joined", JOINED, column_types={"cta.orders.updated_at": "timestamp"})
    assert view["source_column_types"] == {"cta.orders.updated_at": "timestamp"}
    assert view["column_types"]["updated_at"] == "timestamp"
    assert api.http.get("/v1/views/ct_joined").json()["source_column_types"] == view["source_column_types"]
    kept = api.http.put("/v1/views/ct_joined", json={"sql": JOINED})  # left out: kept
    assert kept.status_code == 200, kept.text
    assert kept.json()["source_column_types"] == view["source_column_types"]
    dropped = api.http.put("/v1/views/ct_joined", json={"sql": JOINED, "column_types": {}}).json()
    assert (dropped["source_column_types"], dropped["column_types"]["updated_at"]) == ({}, "text")
    # the check's read at the agent: bounded, and a few hundred bytes either way
    body = ColumnSampleRequest(table="orders", column="updated_at", read_from="text", type="timestamp", rows=50)
    r = httpx.post(f"{agent_a.url}/v1/column_sample", json=body.model_dump(), timeout=30)
    assert r.status_code == 200, r.text
    assert r.json() == {"rows_read": 50, "nulls": 0, "bad": None}
    assert len(r.request.content) + len(r.content) < 400


def test_the_cli_gives_column_types(two_sources, service):
    api, _ = two_sources
    args = ["view", "add", "ct_cli", "SELECT o.order_id, o.updated_at FROM cta.orders o", "--json"]
    given = ["--column-type", "orders.updated_at=timestamptz"]
    result = subprocess.run(
        [sys.executable, "-m", "deltasieve_cli", "--url", service.url, *args, *given],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    view = json.loads(result.stdout)
    assert view["source_column_types"] == {"orders.updated_at": "timestamptz"}
    assert view["column_types"]["updated_at"] == "timestamptz"
    synced = api.sync("ct_cli")
    assert synced["status"] == "succeeded", synced
    row = next(r for r in api.rows("ct_cli") if r["order_id"] == 3)
    assert row["updated_at"] == "2026-11-04T10:00:00+00:00"


STRATEGIES = ["sketch", "group_hash", "tuple_hash", "range_checksum", "full_ship"]


def test_every_strategy_reads_the_asked_type(two_sources):
    api, _ = two_sources
    sql = "SELECT o.order_id, o.updated_at FROM cta.orders o WHERE o.order_id < 100"
    for strategy in STRATEGIES:
        api.add_view(f"ct_{strategy}", sql, strategy=strategy, column_types={"orders.updated_at": "timestamp"})
        assert api.sync(f"ct_{strategy}")["status"] == "succeeded"
    with sqlite3.connect(api.db_paths["cta"]) as c:
        c.execute("UPDATE orders SET updated_at = '2026-12-01T08:30:00.25Z' WHERE order_id = 5")
        c.execute("DELETE FROM orders WHERE order_id = 6")
        truth = {
            (k,): {"order_id": k, "updated_at": read_stamp(at)}
            for k, at in c.execute("SELECT order_id, updated_at FROM orders WHERE order_id < 100")
        }
    for strategy in STRATEGIES:
        sync = api.sync(f"ct_{strategy}")
        assert sync["status"] == "succeeded", (strategy, sync["error"])
        assert keyed(api.rows(f"ct_{strategy}"), ["order_id"]) == truth, strategy
        assert (sync["metrics"]["rows_updated"], sync["metrics"]["rows_deleted"]) == (1, 1), (strategy, sync["metrics"])
