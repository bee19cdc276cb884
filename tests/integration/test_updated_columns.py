"""Every update line says which columns it changed, exactly, on SQLite, PostgreSQL and MariaDB.

A `people` table changed at random between syncs: most updates touch one column, some
keys have every non-key column changed at once, and some keys' `city` goes from NULL to
a value and back round after round. Four views read it: the default strategy; full_ship,
which compares every row; sketch, whose updated rows come as their changed cells alone
(protocol 4, deltasieve_protocol/column_digests.py); and sketch through an agent whose column digests
all collide (AGENT_SKETCH_DIGEST_BITS=0), so that every updated row fails its rebuild's
check and is fetched whole. The agents predate the sketch request's `updated_rows`
(tests/support/older_agent.py): a current one, asked by a warehouse that expects as few
updated rows as these rounds change, sends them whole (test_small_syncs.py), and an older
one sends digests whatever it is asked, so the changed-cells path runs here, on every
engine, as it does against a current agent where more rows are updated. After every sync each view equals the truth read
straight from the database (tests/support/oracle.py), every update line of its delta
carries `changed`, the columns whose values truly changed (NULL to a value and back
count), inserts and deletes none, and the sync's `metrics.columns_changed` counts the
updates per column. The change feed says the same in NDJSON and in Parquet.
"""

from __future__ import annotations

import io
import random
import sqlite3

import psycopg
import pyarrow.parquet as pq
import pytest

from tests.support import older_agent
from tests.support.mariadb_legacy import Owner
from tests.support.oracle import changed_columns, check_sync, keyed
from workloads.harness import start_agent

pytestmark = pytest.mark.integration

ROWS = 150
ROUNDS = 4
COLUMNS = ["id", "name", "age", "city", "score"]
VALUES = COLUMNS[1:]
#: Keys whose `city` turns from NULL to a value and back each round.
FLIPPING = range(1, 6)
#: Keys whose every non-key column changes each round.
ALL_CHANGE = range(6, 11)


class People:
    """`people` on one engine, changed at random by the legacy application."""

    def __init__(self, source, seed: int):
        self.source = source
        self.rng = random.Random(seed)
        self.ids = set(range(1, ROWS + 1))
        self.next_id = ROWS + 1
        self.round = 0
        with self.connect() as c:
            c.execute(
                "CREATE TABLE people (id integer PRIMARY KEY, name varchar(40), age integer, city varchar(40), score integer)"
            )
            for i in sorted(self.ids):
                city = None if i in FLIPPING else self.city()
                self.run(c, "INSERT INTO people VALUES (?, ?, ?, ?, ?)", (i, f"p{i}", 20 + i % 50, city, i % 7))

    def connect(self):
        if self.source.engine == "sqlite":
            return _Sqlite(self.source.path)
        if self.source.engine == "postgres":
            return psycopg.connect(self.source.owner_url, autocommit=True)
        return Owner(self.source.owner_url)

    def run(self, c, sql: str, params: tuple = ()) -> None:
        c.execute(sql if self.source.engine == "sqlite" else sql.replace("?", "%s"), params)

    def city(self) -> str:
        return self.rng.choice(["Oslo", "Lyon", "Graz", "Ås"])

    def change(self) -> None:
        """One round: flips, all-column changes, single-column updates, inserts, deletes."""
        rng = self.rng
        self.round += 1
        with self.connect() as c:
            for i in FLIPPING:  # NULL -> value -> NULL ...
                self.run(c, "UPDATE people SET city = ? WHERE id = ?", (self.city() if self.round % 2 else None, i))
            for i in ALL_CHANGE:
                self.run(
                    c,
                    "UPDATE people SET name = ?, age = ?, city = ?, score = ? WHERE id = ?",
                    (f"all{self.round}-{i}", 100 + self.round, f"c{self.round}", None if self.round % 2 else -i, i),
                )
            plain = sorted(self.ids - set(FLIPPING) - set(ALL_CHANGE))
            for i in rng.sample(plain, 12):
                column = rng.choice(VALUES)
                value = {
                    "name": f"n{rng.randrange(1000)}",
                    "age": rng.choice([None, rng.randrange(90)]),
                    "city": rng.choice([None, self.city()]),
                    "score": rng.randrange(7),
                }[column]
                self.run(c, f"UPDATE people SET {column} = ? WHERE id = ?", (value, i))
            gone = rng.sample(sorted(set(plain)), 3)
            for i in gone:
                self.run(c, "DELETE FROM people WHERE id = ?", (i,))
            for _ in range(3):
                self.run(c, "INSERT INTO people VALUES (?, ?, ?, ?, ?)", (self.next_id, "new", 30, self.city(), None))
                self.ids.add(self.next_id)
                self.next_id += 1
        self.ids -= set(gone)

    def truth(self) -> dict:
        with self.connect() as c:
            rows = c.execute(f"SELECT {', '.join(COLUMNS)} FROM people").fetchall()
        return keyed((dict(zip(COLUMNS, r, strict=True)) for r in rows), ["id"])


class _Sqlite:
    """An autocommit SQLite connection that closes on leaving its block."""

    def __init__(self, path):
        self.conn = sqlite3.connect(path, isolation_level=None)

    def execute(self, sql, params=()):
        return self.conn.execute(sql, params)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.conn.close()


def test_updates_say_exactly_which_columns_changed(api, source, logs_dir):
    legacy = People(source, seed={"sqlite": 39, "postgres": 93, "mariadb": 390}[source.engine])
    agent = start_agent(source.reader_url, logs_dir, prefix=older_agent.PREFIX)
    colliding = start_agent(
        source.reader_url, logs_dir, env={"AGENT_SKETCH_DIGEST_BITS": "0"}, prefix=older_agent.PREFIX
    )
    src, src_colliding = f"cc_{source.engine}", f"ccx_{source.engine}"
    cells, collide = f"cc_sketch_{source.engine}", f"cc_collide_{source.engine}"
    views = {
        f"cc_auto_{source.engine}": "auto",
        f"cc_full_{source.engine}": "full_ship",
        cells: "sketch",
        collide: "sketch",
    }
    try:
        api.add_source(src, agent.url)
        api.add_source(src_colliding, colliding.url)
        for name, strategy in views.items():
            at = src_colliding if name == collide else src
            api.add_view(name, f"SELECT {', '.join(COLUMNS)} FROM {at}.people", strategy=strategy)
        before: dict = {name: {} for name in views}
        seen = {"flip": 0, "all": 0}
        as_cells = {cells: 0, collide: 0}  # rounds whose updated rows went the changed-cells way
        for rnd in range(ROUNDS + 1):
            if rnd:
                legacy.change()
            truth = legacy.truth()
            for name in views:
                sync = api.sync(name)
                check_sync(api, name, ["id"], before[name], truth, sync)  # `changed` exact where present
                lines = api.delta(name, sync["id"])
                updates = [line for line in lines if line["op"] == "update"]
                assert all("changed" not in line for line in lines if line["op"] != "update"), lines
                assert all("changed" in line for line in updates), updates
                for line in updates:
                    k = line["row"]["id"]
                    seen["flip"] += k in FLIPPING and line["changed"] == ["city"]
                    seen["all"] += k in ALL_CHANGE and line["changed"] == VALUES
                counts = sync["metrics"].get("columns_changed")
                if rnd:
                    assert counts is not None and set(counts) == set(VALUES), sync["metrics"]
                    assert sum(counts.values()) == sum(len(line["changed"]) for line in updates)
                    if name in as_cells and not sync["metrics"].get("fallback"):
                        _shipped_as_cells(sync["metrics"], name, cells, collide, len(updates), sum(counts.values()))
                        as_cells[name] += 1
                else:
                    assert counts is None, counts  # a load updates nothing
                before[name] = truth
        # a sketch fails to peel about one sync in a hundred by design, and then ships whole
        # (`fallback` in its metrics): at most one round of each view may have
        assert min(as_cells.values()) >= ROUNDS - 1, as_cells
        # every round flipped 5 keys and changed every column of 5 others, in every view
        assert seen == {"flip": len(views) * ROUNDS * len(FLIPPING), "all": len(views) * ROUNDS * len(ALL_CHANGE)}, seen
        _feed_says_the_same(api, next(iter(views)))
    finally:
        agent.stop()
        colliding.stop()


def _shipped_as_cells(m: dict, name: str, cells: str, collide: str, updates: int, changed: int) -> None:
    """The sketch views' updated rows came as their changed cells, or (digests colliding) whole."""
    if name == cells:
        # a cell per changed column of each rebuilt row; a row whose digests collided came
        # whole. One collision between two values sends every row that moves between them in
        # that exchange (the five all-change rows share their age and city): not most rows.
        got, whole = m["cells_received"], m["cells_fallback_rows"]
        assert got <= changed <= got + len(VALUES) * whole and whole <= updates // 2, m
    elif name == collide:
        assert m["cells_received"] == 0 and m["cells_fallback_rows"] == updates, m


def _feed_says_the_same(api, view: str) -> None:
    """The change feed's update lines carry `changed` as the deltas do, in NDJSON and Parquet."""
    lines = api.ndjson(f"/v1/views/{view}/changes?with_before=true")
    updates = [line for line in lines if line["op"] == "update"]
    assert updates
    for line in updates:
        assert line["changed"] == changed_columns(line["before"], line["row"], ["id"]), line
    r = api.http.get(f"/v1/views/{view}/changes", params={"format": "parquet"})
    assert r.status_code == 200, r.text
    table = pq.read_table(io.BytesIO(r.content))
    assert table.schema.field("changed").type.value_type == "string"
    parquet = [(row["op"], row["changed"]) for row in table.select(["op", "changed"]).to_pylist()]
    assert parquet == [(line["op"], line.get("changed")) for line in lines]
