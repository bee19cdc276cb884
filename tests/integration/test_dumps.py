"""Sources that are directories of dump files (agent `--db-url file:///DIR`), every strategy.

A legacy system writes a new dump of its tables each round — CSV (some gzipped) and
fixed-width records — rewriting the rows in an order close to the last one's, with a few
rows moved far. The truth is read straight from the newest dump with Python's csv module
and string slicing (not DuckDB, which the agent reads with), filtered as the view says.
After every sync the view equals it and the delta is exact, whatever the strategy:
snapshot_diff with each of paper 000's algorithms (the window with buffers small enough to
produce useless pairs, which the warehouse folds), auto (which takes snapshot_diff on a
dump source), and the differencing strategies over the same files.
"""

from __future__ import annotations

import csv
import datetime as dt
import gzip
import io
import json
import random
import sqlite3
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest

from tests.support.oracle import check_sync, keyed
from tests.support.pairing import MATCH, READINGS, oracle_pairs
from workloads.harness import start_agent

pytestmark = pytest.mark.integration

CUSTOMERS = {
    "format": "csv",
    "key": ["id"],
    "columns": [
        {"name": "id", "type": "int", "nullable": False},
        {"name": "name", "type": "text"},
        {"name": "balance", "type": "decimal(10,2)"},
        {"name": "since", "type": "date"},
        {"name": "updated", "type": "timestamp", "nullable": False},
    ],
    "csv": {"delimiter": ",", "header": True, "null": ""},
}
STOCK = {
    "format": "fixed",
    "key": ["code", "site"],
    "columns": [
        {"name": "code", "type": "text", "width": 6},
        {"name": "site", "type": "int", "width": 3},
        {"name": "qty", "type": "int", "width": 7},
        {"name": "price", "type": "decimal(8,2)", "width": 9},
    ],
}
VIEW = "SELECT c.id, c.name, c.balance, c.since FROM {src}.customers c WHERE c.balance > 10 OR c.balance IS NULL"
STOCK_VIEW = "SELECT s.code, s.site, s.qty, s.price FROM {src}.stock s WHERE s.qty > 0"
#: view name suffix -> view options
STRATEGIES = {
    "window": {"strategy": "snapshot_diff", "snapshot_diff": {"algorithm": "window", "aging_rows": 3, "block_rows": 2}},
    "sortmerge": {"strategy": "snapshot_diff", "snapshot_diff": {"algorithm": "sort_merge", "aging_rows": 40}},
    "phash": {"strategy": "snapshot_diff", "snapshot_diff": {"algorithm": "partitioned_hash"}},
    "auto": {},
    "sketch": {"strategy": "sketch"},
    "group_hash": {"strategy": "group_hash"},
    "tuple_hash": {"strategy": "tuple_hash"},
    "range_checksum": {"strategy": "range_checksum"},
    "full_ship": {"strategy": "full_ship"},
    # the rows the legacy system stamped since the last sync; hard deletes found by the keys
    "timestamp": {"strategy": "timestamp", "timestamps": {"customers": "updated"}, "timestamp_lag_s": 1},
}


def now() -> str:
    """The legacy system's stamp of a row it writes: its clock, in UTC."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


class Dumps:
    """A legacy system that dumps its customers (CSV) and stock (fixed width) into a directory."""

    def __init__(self, path: Path, seed: int):
        self.path = path
        self.rng = random.Random(seed)
        self.round = 0
        (path / "customers.table.json").write_text(json.dumps(CUSTOMERS))
        (path / "stock.table.json").write_text(json.dumps(STOCK))
        self.customers = [self._customer(i) for i in range(1, 121)]
        self.stock = [self._item(code, site) for code in ("AX", "BQ-7", "C") for site in range(1, 16)]
        self.next_id = 121
        self.dump()

    def _customer(self, i: int) -> list:
        rng = self.rng
        balance = None if rng.random() < 0.1 else f"{rng.randint(0, 4000) / 100:.2f}"
        since = None if rng.random() < 0.1 else f"20{rng.randint(10, 25)}-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}"
        name = rng.choice(["Ann", 'Bob "B"', "Cy, Jr.", "Dee"]) + f" {rng.randint(0, 99)}"
        return [i, name, balance, since, now()]

    def _item(self, code: str, site: int) -> list:
        return [code, site, self.rng.randint(-3, 500), f"{self.rng.randint(1, 99999) / 100:.2f}"]

    def change(self) -> None:
        """Updates, deletes, inserts; the rows rewritten close to their old order, a few moved far."""
        rng = self.rng
        for row in self.customers:
            if rng.random() < 0.15:
                column = rng.choice([1, 2, 2, 3])
                row[column] = self._customer(row[0])[column]
                row[4] = now()
        self.customers = [r for r in self.customers if rng.random() > 0.08]
        for _ in range(rng.randint(3, 12)):
            self.customers.insert(rng.randrange(len(self.customers) + 1), self._customer(self.next_id))
            self.next_id += 1
        for i in range(len(self.customers) - 1):  # local moves: the window matches them
            if rng.random() < 0.3:
                self.customers[i], self.customers[i + 1] = self.customers[i + 1], self.customers[i]
        for _ in range(4):  # far moves: further than a small window reaches (useless pairs)
            self.customers.insert(rng.randrange(len(self.customers)), self.customers.pop(rng.randrange(10)))
        for row in self.stock:
            if rng.random() < 0.2:
                row[2] = rng.randint(-3, 500)
        self.stock = [r for r in self.stock if rng.random() > 0.05]
        self.stock.append(self._item(rng.choice(["AX", "ZED"]), 100 + self.round))
        rng.shuffle(self.stock)  # not close in order at all
        self.dump()

    def dump(self) -> None:
        """A new dump of both tables (written aside, then renamed into place)."""
        self.round += 1
        stamp = f"2026-11-{self.round:02d}T0300"
        text = io.StringIO()
        writer = csv.writer(text)
        writer.writerow(["id", "name", "balance", "since", "updated"])
        writer.writerows([["" if v is None else v for v in row] for row in self.customers])
        data = text.getvalue().encode()
        name = f"customers.{stamp}.csv" + (".gz" if self.round % 2 else "")
        self._place(name, gzip.compress(data) if name.endswith(".gz") else data)
        lines = "".join(f"{c:<6}{s:>3}{q:>7}{p:>9}\n" for c, s, q, p in self.stock)
        self._place(f"stock.{stamp}.txt", lines.encode())

    def _place(self, name: str, data: bytes) -> None:
        partial = self.path / (name + ".part")
        partial.write_bytes(data)
        partial.rename(self.path / name)

    def newest(self, table: str) -> Path:
        return sorted(p for p in self.path.iterdir() if p.name.startswith(table + ".2026"))[-1]

    def truth(self) -> dict:
        """The view over the newest customers dump, read with Python's csv module."""
        path = self.newest("customers")
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        rows = []
        for rid, name, balance, since, _ in list(csv.reader(io.StringIO(data.decode())))[1:]:
            if balance == "" or Decimal(balance) > 10:
                rows.append({"id": int(rid), "name": name, "balance": balance or None, "since": since or None})
        return keyed(rows, ["id"])

    def stock_truth(self) -> dict:
        rows = []
        for line in self.newest("stock").read_text().splitlines():
            code, site, qty, price = line[0:6].strip(), int(line[6:9]), int(line[9:16]), line[16:25].strip()
            if qty > 0:
                rows.append({"code": code, "site": site, "qty": qty, "price": price})
        return keyed(rows, ["code", "site"])


def _site(metrics: dict) -> dict:
    return metrics["sites"][0] if "sites" in metrics else metrics


def test_every_strategy_on_dump_files(api, tmp_path, logs_dir):
    legacy = Dumps(tmp_path, seed=18)
    agent = start_agent(f"file://{tmp_path}", logs_dir, extra=["--cache-dir", str(tmp_path.parent / "agent-cache")])
    try:
        api.add_source("dumps", agent.url)
        for suffix, options in STRATEGIES.items():
            view = api.add_view(f"dump_{suffix}", VIEW.format(src="dumps"), **options)
            assert view["key"] == ["id"], view
        stock = api.add_view("dump_stock", STOCK_VIEW.format(src="dumps"), strategy="snapshot_diff")
        assert stock["key"] == ["code", "site"], stock
        before = {name: {} for name in STRATEGIES}
        stock_before: dict = {}
        pairs = {"window": 0, "window_cancelled": 0, "window_split": 0, "exact": 0}
        for rnd in range(4):  # the load, a change, no new dump, a change
            if rnd in (1, 3):
                legacy.change()
            truth = legacy.truth()
            for suffix in STRATEGIES:
                name = f"dump_{suffix}"
                sync = api.sync(name)
                check_sync(api, name, ["id"], before[suffix], truth, sync)
                assert sync["metrics"]["executor"] == "arrow", (name, sync["metrics"])  # small: no Spark job
                before[suffix] = truth
                site = _site(sync["metrics"])
                if rnd and suffix in ("window", "sortmerge", "phash", "auto"):
                    report = site["snapshot_diff"]
                    assert report["reconciled"] is False and "fallback" not in report, report
                    assert report["unchanged"] is (rnd == 2), report
                    if suffix == "window":
                        # past 10 % of the records in useless pairs, the record says to widen the buffers
                        assert ("advice" in report) is (report.get("useless_pairs", 0) > 0.1 * report["records"]["new"])
                        pairs["window"] += report.get("useless_pairs", 0)
                        pairs["window_cancelled"] += report.get("cancelled", 0)
                        pairs["window_split"] += report.get("split_updates", 0)
                    elif suffix != "auto":
                        pairs["exact"] += report.get("useless_pairs", 0)
                    if rnd == 2:  # the same dumps: nothing read, nothing shipped
                        assert site["rows_received"] == 0 and sync["metrics"]["bytes_from_agent"] < 2000, site
                if suffix == "auto" and rnd:
                    assert site["chosen"] == "snapshot_diff", site
                if suffix == "timestamp" and rnd:  # the stamped rows and the keys, from the agent's clock
                    assert site["timestamp"]["reconciled"] is False and site["timestamp"]["watermark"], site[
                        "timestamp"
                    ]
            stock_truth = legacy.stock_truth()
            sync = api.sync("dump_stock")
            check_sync(api, "dump_stock", ["code", "site"], stock_before, stock_truth, sync)
            stock_before = stock_truth
        # the small window met rows moved further than it reaches: useless pairs, all folded
        assert pairs["window"] > 0 and pairs["window_cancelled"] > 0, pairs
        assert pairs["exact"] == 0, pairs
    finally:
        agent.stop()


def test_a_gone_dump_falls_back_and_bad_dumps_fail_cleanly(api, tmp_path, logs_dir):
    legacy = Dumps(tmp_path, seed=7)
    agent = start_agent(f"file://{tmp_path}", logs_dir)
    try:
        api.add_source("dumps2", agent.url)
        api.add_view("gone_window", VIEW.format(src="dumps2"), strategy="snapshot_diff")
        check_sync(api, "gone_window", ["id"], {}, (before := legacy.truth()), api.sync("gone_window"))
        legacy.change()
        legacy.change()  # the dump the view was loaded from is now two behind; remove it
        for path in sorted(tmp_path.glob("customers.2026*"))[:-1]:
            path.unlink()
        truth = legacy.truth()
        sync = api.sync("gone_window")
        check_sync(api, "gone_window", ["id"], before, truth, sync)
        report = _site(sync["metrics"])["snapshot_diff"]
        assert report["reconciled"] is True and "is no longer in" in report["fallback"], report
        legacy.change()  # the state now names the dump the fall-back read: a plain diff again
        sync = api.sync("gone_window")
        check_sync(api, "gone_window", ["id"], truth, (after := legacy.truth()), sync)
        assert _site(sync["metrics"])["snapshot_diff"]["reconciled"] is False
        # a dump whose key is not unique fails the sync and leaves the view as it was
        legacy.customers.append(list(legacy.customers[0]))
        legacy.dump()
        failed = api.sync("gone_window")
        assert failed["status"] == "failed" and "more than once" in failed["error"], failed
        assert keyed(api.rows("gone_window"), ["id"]) == after
        # snapshot_diff is refused where a source is a database
        db = tmp_path.parent / "shop.db"
        with sqlite3.connect(db) as conn:
            conn.execute("CREATE TABLE orders (oid INTEGER PRIMARY KEY, cust INTEGER, amount REAL)")
        shop = start_agent(f"sqlite:///{db}", logs_dir)
        try:
            api.add_source("shop2", shop.url)
            refused = api.http.post(
                "/v1/views",
                json={
                    "name": "nodiff",
                    "sql": "SELECT o.oid, o.amount FROM shop2.orders o",
                    "strategy": "snapshot_diff",
                },
            )
            assert refused.status_code == 422 and "dump files" in refused.json()["detail"], refused.text
        finally:
            shop.stop()
    finally:
        agent.stop()


JOIN_VIEW = (
    "SELECT o.oid, o.amount, c.id AS cid, c.name FROM {shop}.orders o JOIN {dumps}.customers c ON o.cust = c.id "
    "WHERE c.balance > 10 OR c.balance IS NULL"
)


def test_a_dump_table_joined_with_a_database_table(api, tmp_path, logs_dir):
    dumps_dir = tmp_path / "dumps"
    dumps_dir.mkdir()
    legacy = Dumps(dumps_dir, seed=31)
    db = tmp_path / "shop.db"
    rng = random.Random(5)
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE orders (oid INTEGER PRIMARY KEY, cust INTEGER, amount INTEGER)")
        conn.executemany("INSERT INTO orders VALUES (?, ?, ?)", [(i, rng.randint(1, 140), i % 97) for i in range(300)])

    def truth() -> dict:
        customers = legacy.truth()
        with sqlite3.connect(db) as conn:
            orders = conn.execute("SELECT oid, cust, amount FROM orders").fetchall()
        rows = [
            {"oid": oid, "amount": amount, "cid": cust, "name": customers[(cust,)]["name"]}
            for oid, cust, amount in orders
            if (cust,) in customers
        ]
        return keyed(rows, ["oid"])

    agents = [start_agent(f"file://{dumps_dir}", logs_dir), start_agent(f"sqlite:///{db}", logs_dir)]
    try:
        api.add_source("jdumps", agents[0].url)
        api.add_source("jshop", agents[1].url)
        view = api.add_view("dump_join", JOIN_VIEW.format(shop="jshop", dumps="jdumps"))
        assert view["key"] == ["oid"] and len(view["sites"]) == 2, view
        before: dict = {}
        for rnd in range(4):
            if rnd:
                legacy.change()
                with sqlite3.connect(db) as conn:
                    for oid in rng.sample(range(300), 20):
                        conn.execute(
                            "UPDATE orders SET cust = ?, amount = ? WHERE oid = ?", (rng.randint(1, 140), rnd, oid)
                        )
            now = truth()
            sync = api.sync("dump_join")
            check_sync(api, "dump_join", ["oid"], before, now, sync)
            before = now
            if rnd:
                by_source = {s["source"]: s for s in sync["metrics"]["sites"]}
                assert by_source["jdumps"]["chosen"] == "snapshot_diff", by_source["jdumps"]
                assert by_source["jshop"]["chosen"] != "snapshot_diff"
    finally:
        for agent in agents:
            agent.stop()


READINGS_TABLE = {
    "format": "csv",
    "columns": [
        {"name": "at", "type": "int", "nullable": False},
        {"name": "sensor", "type": "text"},
        {"name": "v", "type": "float"},
    ],
}
#: keyless views over the readings dump: name suffix -> options
KEYLESS = {
    "window": {"strategy": "snapshot_diff", "snapshot_diff": {"algorithm": "window", "aging_rows": 2, "block_rows": 2}},
    "auto": {},
    "sketch": {"strategy": "sketch"},
    "match": {"match": MATCH},
}


class ReadingDumps:
    """A table without a key, dumped as CSV: readings that drift, duplicates, NULLs."""

    def __init__(self, path: Path, seed: int):
        self.path, self.rng, self.round = path, random.Random(seed), 0
        (path / "readings.table.json").write_text(json.dumps(READINGS_TABLE))
        rows = [self.row() for _ in range(60)]
        self.rows = rows + rows[:10]
        self.dump()

    def row(self) -> list:
        r = self.rng
        return [r.randint(0, 60), r.choice(["s1", "s2", None]), None if r.random() < 0.1 else r.randint(0, 8) / 4]

    def change(self) -> None:
        r = self.rng
        for row in r.sample(self.rows, 12):  # drift: within epsilon, or beyond
            row[2] = None if row[2] is None or r.random() < 0.1 else row[2] + r.choice([-0.75, -0.25, 0, 0.25, 0.5])
            row[0] += r.randint(-3, 3)
        for row in r.sample(self.rows, 4):
            self.rows.remove(row)
        self.rows += [self.row() for _ in range(4)] + [list(self.rows[0])]
        r.shuffle(self.rows)
        self.dump()

    def dump(self) -> None:
        self.round += 1
        text = io.StringIO()
        writer = csv.writer(text)
        writer.writerow(READINGS)
        writer.writerows([["" if v is None else v for v in row] for row in self.rows])
        (self.path / f"readings.{self.round:03d}.csv").write_text(text.getvalue())

    def truth(self) -> Counter:
        """The view (at >= 0) over the newest dump, read with the csv module."""
        newest = sorted(self.path.glob("readings.*.csv"))[-1]
        out = Counter()
        for at, sensor, v in list(csv.reader(io.StringIO(newest.read_text())))[1:]:
            if int(at) >= 0:
                out[(int(at), sensor or None, float(v) if v else None)] += 1
        return out


def test_a_dump_table_without_a_key(api, tmp_path, logs_dir):
    legacy = ReadingDumps(tmp_path, seed=2)
    agent = start_agent(f"file://{tmp_path}", logs_dir)
    try:
        api.add_source("kdumps", agent.url)
        for suffix, options in KEYLESS.items():
            view = api.add_view(
                f"kd_{suffix}", "SELECT r.at, r.sensor, r.v FROM kdumps.readings r WHERE r.at >= 0", **options
            )
            assert view["key"] == [], view
        before, paired = Counter(), 0
        for rnd in range(4):
            if rnd:
                legacy.change()
            truth = legacy.truth()
            assert max(truth.values()) > 1
            for suffix in KEYLESS:
                name = f"kd_{suffix}"
                sync = api.sync(name)
                assert sync["status"] == "succeeded", sync["error"]
                assert Counter(tuple(r[c] for c in READINGS) for r in api.rows(name)) == truth, name
                pairs, gone, came = Counter(), Counter(), Counter()
                for line in api.delta(name, sync["id"]):
                    row = tuple(line["row"][c] for c in READINGS)
                    if line["op"] == "update":
                        pairs[(tuple(line["old"][c] for c in READINGS), row)] += 1
                    else:
                        (came if line["op"] == "insert" else gone)[row] += line.get("count", 1)
                if suffix == "match":
                    assert (pairs, gone, came) == oracle_pairs(before - truth, truth - before), f"round {rnd}"
                    paired += sum(pairs.values())
                else:
                    assert not pairs and came == truth - before and gone == before - truth, (name, rnd)
                if rnd and suffix in ("window", "auto"):
                    site = _site(sync["metrics"])
                    assert site.get("chosen", "snapshot_diff") == "snapshot_diff", site
                    assert site["snapshot_diff"]["reconciled"] is False, site["snapshot_diff"]
            before = truth
        assert paired > 3, "the drift must have produced pairs"
    finally:
        agent.stop()
