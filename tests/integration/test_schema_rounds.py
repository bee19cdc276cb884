"""Randomized rounds of data and schema changes on SQLite, PostgreSQL and MariaDB, against the oracle.

Between syncs the legacy application changes rows and, in a random order, its schema: a
decimal widened (taken in place, no reload), a text column lengthened, an unused column
added and another dropped. Two views read the table: one written in SQL over some of its
columns, and a table view, which follows the table's columns (on PostgreSQL the table lives
in a schema outside the search path, `erp`, exposed by `--allow erp.items`). After every sync each view
equals the truth read straight from the source and its delta is exactly the difference —
no row listed because a type widened. At the end a column the SQL view reads is dropped:
its sync fails with `error_code: "schema_changed"` naming the column while the rows stay
served, and a redefinition without it keeps the view's history and its change-feed
positions, its delta the exact difference between the old view and the new one.
"""

from __future__ import annotations

import json
import random
import sqlite3
from decimal import Decimal

import psycopg
import pytest

from tests.support.mariadb_legacy import Owner
from tests.support.oracle import expected_delta, keyed
from workloads.harness import start_agent

pytestmark = pytest.mark.integration

ROWS = 120
#: (name, declared type) of the table at the start, per engine.
START = {
    "sqlite": [
        ("id", "INTEGER PRIMARY KEY"),
        ("name", "VARCHAR(20)"),
        ("price", "DECIMAL(8,2)"),
        ("qty", "INTEGER"),
        ("note", "TEXT"),
    ],
    "postgres": [
        ("id", "integer PRIMARY KEY"),
        ("name", "varchar(20)"),
        ("price", "numeric(8,2)"),
        ("qty", "integer"),
        ("note", "text"),
    ],
    "mariadb": [
        ("id", "INT PRIMARY KEY"),
        ("name", "VARCHAR(20)"),
        ("price", "DECIMAL(8,2)"),
        ("qty", "INT"),
        ("note", "TEXT"),
    ],
}
#: The schema changes taken in place, in a random order: (column, new declared type) or
#: ("+", column, type) for an added column, ("-", column) for a dropped one.
WIDENINGS = {
    "sqlite": [("price", "DECIMAL(12,4)"), ("name", "VARCHAR(200)"), ("+", "extra", "INTEGER"), ("-", "note")],
    "postgres": [
        ("price", "numeric(12,4)"),
        ("name", "varchar(200)"),
        ("qty", "bigint"),
        ("+", "extra", "integer"),
        ("-", "note"),
    ],
    "mariadb": [
        ("price", "DECIMAL(12,4)"),
        ("name", "VARCHAR(200)"),
        ("qty", "BIGINT"),
        ("+", "extra", "INT"),
        ("-", "note"),
    ],
}


def canonical(value):
    """A value as compared across type changes: a decimal by its number, not its scale.

    >>> canonical("1.50") == canonical("1.5000") == canonical(Decimal("1.5"))
    True
    """
    if isinstance(value, (Decimal, float)) or (
        isinstance(value, str) and value.replace(".", "", 1).lstrip("-").isdigit()
    ):
        return str(Decimal(str(value)).normalize())
    return value


class Items:
    """The legacy table on one engine, with its current columns, changed at random."""

    def __init__(self, source, seed: int):
        self.source = source
        self.rng = random.Random(seed)
        self.columns = list(START[source.engine])
        self.next_id = ROWS + 1
        #: on PostgreSQL the table lives outside the default schema, as `source.erp.items` in views
        self.table = "erp.items" if source.engine == "postgres" else "items"
        with self.connect() as c:
            if source.engine == "postgres":
                self.execute(c, "CREATE SCHEMA erp")
                self.execute(c, "GRANT USAGE ON SCHEMA erp TO reader")
            self.execute(c, f"CREATE TABLE {self.table} ({', '.join(f'{n} {t}' for n, t in self.columns)})")
            if source.engine == "postgres":
                self.execute(c, "GRANT SELECT ON erp.items TO reader")
            for i in range(1, ROWS + 1):
                self.insert(c, i)

    def connect(self):
        if self.source.engine == "sqlite":
            return _Sqlite(self.source.path)
        if self.source.engine == "postgres":
            return psycopg.connect(self.source.owner_url, autocommit=True)
        return Owner(self.source.owner_url)

    def execute(self, c, sql: str, params: tuple = ()):
        return c.execute(sql.replace("?", "?" if self.source.engine == "sqlite" else "%s"), params)

    def names(self) -> list[str]:
        return [n for n, _ in self.columns]

    def value(self, column: str):
        rng = self.rng
        return {
            "name": lambda: rng.choice(["ada", "Zoë", "bob", "", None, "x" * 20]),
            "price": lambda: Decimal(rng.randint(0, 99999)) / 100,
            "qty": lambda: rng.choice([None, *range(8)]),
            "note": lambda: rng.choice([None, "n", "note ✓"]),
            "extra": lambda: rng.choice([None, 1, 2, 3]),
        }[column]()

    def insert(self, c, key: int) -> None:
        names = self.names()
        values = tuple(key if n == "id" else self.value(n) for n in names)
        self.execute(c, f"INSERT INTO {self.table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})", values)

    def ids(self, c) -> list[int]:
        return [r[0] for r in self.execute(c, f"SELECT id FROM {self.table} ORDER BY id").fetchall()]

    def change(self) -> None:
        """Rows updated (one column or several), inserted and deleted."""
        with self.connect() as c:
            ids = self.ids(c)
            for key in self.rng.sample(ids, 8):
                columns = self.rng.sample([n for n in self.names() if n != "id"], self.rng.randint(1, 2))
                sets = ", ".join(f"{n} = ?" for n in columns)
                self.execute(
                    c, f"UPDATE {self.table} SET {sets} WHERE id = ?", (*(self.value(n) for n in columns), key)
                )
            for key in self.rng.sample(ids, 3):
                self.execute(c, f"DELETE FROM {self.table} WHERE id = ?", (key,))
            for _ in range(4):
                self.insert(c, self.next_id)
                self.next_id += 1

    def alter(self, change: tuple) -> None:
        """One schema change, in the engine's own DDL (SQLite rebuilds the table to retype a column)."""
        engine = self.source.engine
        if change[0] == "+":
            _, column, declared = change
            self.columns.append((column, declared))
            ddl = [f"ALTER TABLE {self.table} ADD COLUMN {column} {declared}"]
        elif change[0] == "-":
            column = change[1]
            self.columns = [(n, t) for n, t in self.columns if n != column]
            ddl = [f"ALTER TABLE {self.table} DROP COLUMN {column}"]
        else:
            column, declared = change
            self.columns = [(n, declared if n == column else t) for n, t in self.columns]
            if engine == "postgres":
                ddl = [f"ALTER TABLE {self.table} ALTER COLUMN {column} TYPE {declared}"]
            elif engine == "mariadb":
                ddl = [f"ALTER TABLE {self.table} MODIFY COLUMN {column} {declared}"]
            else:  # what a legacy SQLite application does: a new table, copied, renamed
                names = ", ".join(self.names())
                ddl = [
                    f"CREATE TABLE items_new ({', '.join(f'{n} {t}' for n, t in self.columns)})",
                    f"INSERT INTO items_new ({names}) SELECT {names} FROM items",
                    "DROP TABLE items",
                    "ALTER TABLE items_new RENAME TO items",
                ]
        with self.connect() as c:
            for statement in ddl:
                self.execute(c, statement)

    def truth(self, columns: list[str], where: str = "") -> dict:
        with self.connect() as c:
            rows = self.execute(c, f"SELECT {', '.join(columns)} FROM {self.table} {where}").fetchall()
        return keyed(({n: canonical(_json(v)) for n, v in zip(columns, row)} for row in rows), ["id"])


def _json(value):
    return float(value) if isinstance(value, float) else value


class _Sqlite:
    """An autocommit SQLite connection that closes on leaving its block."""

    def __init__(self, path):
        self.conn = sqlite3.connect(path, isolation_level=None)

    def execute(self, sql, params=()):
        # a decimal as its text: the column's NUMERIC affinity stores the number
        return self.conn.execute(sql, tuple(str(p) if isinstance(p, Decimal) else p for p in params))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.conn.close()


def served(api, view: str) -> dict:
    return keyed(({k: canonical(v) for k, v in row.items()} for row in api.rows(view)), ["id"])


def check(api, view: str, sync: dict, before: dict, truth: dict) -> None:
    """The view equals the truth and its delta is exactly the difference (after its schema line)."""
    assert sync["status"] == "succeeded", sync["error"]
    assert served(api, view) == truth, view
    columns = next(iter(truth.values())).keys() if truth else ()
    projected = {k: {c: row.get(c) for c in columns} for k, row in before.items()}
    want = expected_delta(projected, truth)
    lines = api.delta(view, sync["id"])
    got = {}
    for line in lines:
        if line["op"] == "schema":
            continue
        k = (line["row"]["id"],)
        assert k not in got, f"key {k} twice in the delta of {view}"
        got[k] = line["op"]
    assert got == {k: op for k, (op, _) in want.items()}, (view, sync["id"])


def post_view(api, body: dict) -> dict:
    r = api.http.post("/v1/views", json=body)
    assert r.status_code == 201, r.text
    return r.json()


def test_schema_changes_between_syncs_keep_both_views_exact(api, source, logs_dir):
    engine = source.engine
    items = Items(source, seed={"sqlite": 36, "postgres": 63, "mariadb": 360}[engine])
    agent = start_agent(source.reader_url, logs_dir, allow=["erp.items"] if engine == "postgres" else None)
    src = f"sr_{engine}"
    table = f"{src}.{items.table}"
    sql_view, table_view = f"sr_{engine}_sql", f"sr_{engine}_table"
    sql_columns = ["id", "name", "price", "qty"]
    try:
        api.add_source(src, agent.url)
        post_view(api, {"name": sql_view, "sql": f"SELECT i.id, i.name, i.price, i.qty FROM {table} i WHERE i.qty > 2"})
        post_view(api, {"name": table_view, "table": table})
        before = {sql_view: {}, table_view: {}}
        changes = items.rng.sample(WIDENINGS[engine], len(WIDENINGS[engine]))
        for rnd in range(len(changes) + 1):
            if rnd:
                items.change()
                items.alter(changes[rnd - 1])
            truths = {sql_view: items.truth(sql_columns, "WHERE qty > 2"), table_view: items.truth(items.names())}
            for view in (sql_view, table_view):
                sync = api.sync(view)
                check(api, view, sync, before[view], truths[view])
                before[view] = truths[view]
            if rnd and changes[rnd - 1][0] == "price":
                widened = sync["metrics"].get("schema_changes")
                assert widened and widened[0]["column"] == "price", sync["metrics"]
        view = api.http.get(f"/v1/views/{sql_view}").json()
        assert view["column_types"]["price"] == "decimal(12,4)", view
        feed_from = api.http.get(f"/v1/views/{sql_view}/syncs").json()[0]["id"]
        history = len(api.http.get(f"/v1/views/{sql_view}/syncs").json())

        # a column the SQL view reads is dropped: its sync fails and says so; its rows stay
        items.change()
        items.alter(("-", "qty"))
        failed = api.sync(sql_view)
        assert failed["status"] == "failed" and failed["error_code"] == "schema_changed", failed
        assert "qty" in failed["error"] and f"/v1/views/{sql_view}" in failed["error"], failed["error"]
        assert served(api, sql_view) == before[sql_view]
        table_truth = items.truth(items.names())
        check(api, table_view, api.sync(table_view), before[table_view], table_truth)

        # redefined without it: history and feed positions kept, the delta the exact difference
        r = api.http.put(
            f"/v1/views/{sql_view}",
            json={"sql": f"SELECT i.id, i.name, i.price FROM {table} i WHERE i.price > 100"},
        )
        assert r.status_code == 200, r.text
        sync = api.sync(sql_view)
        assert sync["trigger"] == "redefine", sync
        check(api, sql_view, sync, before[sql_view], items.truth(["id", "name", "price"], "WHERE price > 100"))
        assert len(api.http.get(f"/v1/views/{sql_view}/syncs").json()) == history + 2
        feed = api.http.get(f"/v1/views/{sql_view}/changes", params={"after": feed_from})
        assert feed.status_code == 200, feed.text
        lines = [json.loads(line) for line in feed.text.splitlines() if line]
        schema = [line for line in lines if line.get("op") == "schema"]
        assert len(schema) == 1 and schema[0]["sync"] == sync["id"], schema
        assert [c["name"] if isinstance(c, dict) else c for c in schema[0]["columns"]] == ["id", "name", "price"]
    finally:
        agent.stop()
