"""strategy range_checksum reads only the ranges that differed, exactly, on every engine.

A table of 20,000 rows changed by a handful of rows a round (updates, rows crossing the
WHERE clause, inserts between existing keys, deletes), at random places: after every sync
the view equals the truth read straight from the database, and the rows the agent read
(`rows_scanned`) are the table once plus the few ranges that differed, where every
bisection round used to read the whole table. On PostgreSQL, text keys under a language
collation, which orders case and accents otherwise than byte by byte: the ranged reads
must filter in the agent's (byte, code point) order, or rows would be missed.
"""

from __future__ import annotations

import math
import random
import sqlite3

import psycopg
import pytest

from tests.support.collations import STEMS, VARIANTS, language_collation
from tests.support.oracle import check_sync, keyed
from warehouse.strategies.range_checksum import INITIAL_RANGES, SHIP_THRESHOLD
from workloads.harness import start_agent

pytestmark = pytest.mark.integration

ROWS = 20_000
ROUNDS = 2


class Items:
    """`items` on one engine: even ids at first (inserts take odd ones), changed at random."""

    def __init__(self, source, seed: int):
        self.source = source
        self.rng = random.Random(seed)
        self.mark = "?" if source.engine == "sqlite" else "%s"
        self.ids = set(range(0, 2 * ROWS, 2))
        with self.connect() as c:
            c.execute("CREATE TABLE items (id integer PRIMARY KEY, name text, amount integer)")
            self.run_many(c, "INSERT INTO items VALUES (?, ?, ?)", [(i, f"item {i}", i % 50) for i in sorted(self.ids)])

    def connect(self):
        if self.source.engine == "sqlite":
            return sqlite3.connect(self.source.path)
        return psycopg.connect(self.source.owner_url, autocommit=True)

    def run_many(self, c, sql: str, rows: list[tuple]) -> None:
        sql = sql.replace("?", self.mark)
        if self.source.engine == "sqlite":
            c.executemany(sql, rows)
        else:
            c.cursor().executemany(sql, rows)

    def change(self) -> int:
        """A handful of changes at random keys; returns how many rows changed."""
        rng = self.rng
        updated = rng.sample(sorted(self.ids), 4)
        crossing = rng.sample(sorted(self.ids - set(updated)), 2)  # amount below the WHERE's bound, or back
        deleted = rng.sample(sorted(self.ids - set(updated) - set(crossing)), 2)
        inserted = [k for k in (rng.randrange(2 * ROWS) | 1 for _ in range(3)) if k not in self.ids]
        with self.connect() as c:
            self.run_many(c, "UPDATE items SET name = name || ' +' WHERE id = ?", [(k,) for k in updated])
            self.run_many(c, "UPDATE items SET amount = -1 - amount WHERE id = ?", [(k,) for k in crossing])
            self.run_many(c, "DELETE FROM items WHERE id = ?", [(k,) for k in deleted])
            self.run_many(c, "INSERT INTO items VALUES (?, ?, ?)", [(k, f"new {k}", k % 50) for k in inserted])
        self.ids = (self.ids - set(deleted)) | set(inserted)
        return len(updated) + len(crossing) + len(deleted) + len(inserted)

    def truth(self) -> dict:
        with self.connect() as c:
            rows = c.execute("SELECT id, name, amount FROM items WHERE amount >= 0").fetchall()
        return keyed(({"id": i, "name": n, "amount": a} for i, n, a in rows), ["id"])


def read_bound(rows_before: int, changed: int, rounds: int) -> int:
    """Rows a sync's later rounds may read: each changed row's range at every level.

    A range of the first round holds ceil(rows / INITIAL_RANGES) snapshot rows, a part of
    it at most as many, a shipped range at most SHIP_THRESHOLD; each may also hold the
    changed rows themselves. (Every round reading the whole table: `rounds` x rows.)

    >>> read_bound(20_000, 10, 3)
    6460
    """
    per_range = math.ceil(rows_before / INITIAL_RANGES) + changed
    return changed * (rounds - 1) * max(per_range, SHIP_THRESHOLD + changed)


@pytest.mark.engines("sqlite", "postgres")  # MariaDB's ranged reads: tests/integration/test_mariadb.py
def test_range_checksum_reads_the_differing_ranges_only(api, source, logs_dir):
    legacy = Items(source, seed=16)
    agent = start_agent(source.reader_url, logs_dir)
    src, name = f"rr_{source.engine}", f"rr_items_{source.engine}"
    try:
        api.add_source(src, agent.url)
        api.add_view(
            name, f"SELECT i.id, i.name, i.amount FROM {src}.items i WHERE i.amount >= 0", strategy="range_checksum"
        )
        before = legacy.truth()
        check_sync(api, name, ["id"], {}, before, api.sync(name))
        for _ in range(ROUNDS):
            changed = legacy.change()
            truth = legacy.truth()
            sync = api.sync(name)
            check_sync(api, name, ["id"], before, truth, sync)
            m = sync["metrics"]
            reads = m["range_reads"]
            assert reads["rows_per_round"][0] == len(truth), reads  # the first round reads the whole query
            assert reads["ranged_rounds"] == m["range_rounds"] - 1 >= 1, reads
            bound = len(truth) + read_bound(len(before), changed, m["range_rounds"])
            print(
                source.engine,
                m["rows_scanned"],
                bound,
                len(truth),
                m["range_rounds"],
                reads,
                m["wall_seconds"],
            )
            assert m["rows_scanned"] <= bound, (m["rows_scanned"], bound, reads)
            before = truth
    finally:
        agent.stop()


# -- PostgreSQL: text keys under a language collation -----------------------------------------


class Words:
    """`words (w, n)` keyed by a text column under a language collation and an integer."""

    def __init__(self, url: str, seed: int):
        self.url = url
        self.rng = random.Random(seed)
        self.keys: set[tuple[str, int]] = set()
        with psycopg.connect(url, autocommit=True) as c:
            self.collation = language_collation(c)
            c.execute(f'CREATE TABLE words (w text COLLATE "{self.collation}", n integer, v text, PRIMARY KEY (w, n))')
            rows = [self.fresh() for _ in range(5_000)]
            c.cursor().executemany("INSERT INTO words VALUES (%s, %s, %s)", rows)

    def fresh(self) -> tuple[str, int, str]:
        while True:
            stem = self.rng.choice(STEMS)
            key = (self.rng.choice(VARIANTS)(stem) + self.rng.choice(["", " ", "s", "Z", "é"]), self.rng.randrange(60))
            if key not in self.keys:
                self.keys.add(key)
                return (*key, f"v{self.rng.randrange(1000)}")

    def change(self) -> None:
        rng = self.rng
        picked = rng.sample(sorted(self.keys), 8)
        with psycopg.connect(self.url, autocommit=True) as c:
            cur = c.cursor()
            cur.executemany("UPDATE words SET v = v || '+' WHERE w = %s AND n = %s", picked[:4])
            cur.executemany("DELETE FROM words WHERE w = %s AND n = %s", picked[4:])
            self.keys -= set(picked[4:])
            cur.executemany("INSERT INTO words VALUES (%s, %s, %s)", [self.fresh() for _ in range(4)])

    def truth(self) -> dict:
        with psycopg.connect(self.url) as c:
            rows = c.execute("SELECT w, n, v FROM words").fetchall()
        return keyed(({"w": w, "n": n, "v": v} for w, n, v in rows), ["w", "n"])


def test_range_checksum_text_keys_under_a_language_collation(api, postgres, logs_dir):
    legacy = Words(postgres.owner_url, seed=7)
    with psycopg.connect(postgres.owner_url) as c:  # the premise: the two orders differ here
        db_order = [r[0] for r in c.execute("SELECT DISTINCT w FROM words ORDER BY w").fetchall()]
    assert db_order != sorted(db_order), legacy.collation
    agent = start_agent(postgres.reader_url, logs_dir)
    try:
        api.add_source("rr_icu", agent.url)
        api.add_view("rr_words", "SELECT x.w, x.n, x.v FROM rr_icu.words x", strategy="range_checksum")
        before = legacy.truth()
        check_sync(api, "rr_words", ["w", "n"], {}, before, api.sync("rr_words"))
        ranged = 0
        for _ in range(ROUNDS):
            legacy.change()
            truth = legacy.truth()
            sync = api.sync("rr_words")
            check_sync(api, "rr_words", ["w", "n"], before, truth, sync)
            ranged += sync["metrics"]["range_reads"]["ranged_rounds"]
            before = truth
        assert ranged >= ROUNDS, "the later rounds read ranges, bounded in byte order"
    finally:
        agent.stop()
