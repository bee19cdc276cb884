"""Multiset views over several sites: tables without a key joined across sources, and by
LEFT JOIN, agent and service as real processes.

Two SQLite sources, each with a table without a key; randomized rounds insert copies of
rows, delete some copies, change join columns (NULLs set and cleared). The truth is the
view's own SQL run by SQLite over both files attached under the sources' names, so inner
and left joins, NULL never joining and counts multiplying are SQLite's, not ours. After
every sync the view equals it as a multiset and the delta is exact and minimal
(support/multisets.py). The rounds pass through both ways of maintaining the join: the
delta rules, on the driver (equalities of NOT NULL columns) and on Spark (conditions on
nullable columns), and the recompute (a change of most of a site's rows).
"""

from __future__ import annotations

import random
import sqlite3
from collections import Counter

import pytest

from tests.support.multisets import check_sample, check_sync
from workloads.harness import start_agent

pytestmark = pytest.mark.integration

LEVELS = ["info", "warn", "error", None]
#: Each view keeps a random sample of this many occurrences.
SAMPLE = 30
MESSAGES = ["boot", "disk", "net", None]
# name -> (SQL over sources kja and kjb, columns, strategy, where the delta rules join)
VIEWS = {
    "kj_inner": (
        "SELECT l.at, l.msg, t.tag FROM kja.logs l JOIN kjb.tags t ON t.level = l.level",
        ["at", "msg", "tag"],
        "sketch",
        "spark",
    ),
    "kj_equi": (
        "SELECT l.msg, k.rank FROM kja.logs l JOIN kjb.codes k ON k.code = l.code",
        ["msg", "rank"],
        "tuple_hash",
        "driver",
    ),
    "kj_left": (
        "SELECT l.at, l.level, t.tag FROM kja.logs l LEFT JOIN kjb.tags t ON t.level = l.level AND t.tag <> l.msg",
        ["at", "level", "tag"],
        "auto",
        "spark",
    ),
    "kj_left_local": (
        "SELECT l.code, n.note FROM kja.logs l LEFT JOIN kja.notes n ON n.code = l.code",
        ["code", "note"],
        "group_hash",
        "driver",
    ),
}


class Sources:
    """The two source databases, changed at random; small domains make equal rows."""

    def __init__(self, a, b, seed: int):
        self.a, self.b, self.rng = a, b, random.Random(seed)
        with sqlite3.connect(a) as c:
            c.execute("CREATE TABLE logs (at INTEGER NOT NULL, level TEXT, msg TEXT, code TEXT NOT NULL)")
            c.execute("CREATE TABLE notes (code TEXT NOT NULL, note TEXT)")
            c.executemany("INSERT INTO logs VALUES (?, ?, ?, ?)", [self.log() for _ in range(80)] * 2)
            c.executemany("INSERT INTO notes VALUES (?, ?)", [self.note() for _ in range(12)])
        with sqlite3.connect(b) as c:
            c.execute("CREATE TABLE tags (level TEXT, tag TEXT)")
            c.execute("CREATE TABLE codes (code TEXT NOT NULL PRIMARY KEY, rank INTEGER)")
            c.executemany("INSERT INTO tags VALUES (?, ?)", [self.tag() for _ in range(8)])
            c.executemany("INSERT INTO codes VALUES (?, ?)", [(f"c{i}", i % 3) for i in range(15)])

    def log(self) -> tuple:
        r = self.rng
        return (r.randint(1, 30), r.choice(LEVELS), r.choice(MESSAGES), f"c{r.randint(0, 19)}")

    def note(self) -> tuple:
        return (f"c{self.rng.randint(0, 19)}", self.rng.choice(["n1", "n2", None]))

    def tag(self) -> tuple:
        return (self.rng.choice(LEVELS), self.rng.choice(["boot", "t1", "t2", None]))

    def change(self, rewrite_tags: bool) -> None:
        r = self.rng
        with sqlite3.connect(self.a) as c:
            rows = c.execute("SELECT rowid, * FROM logs").fetchall()
            for rowid, *_ in r.sample(rows, 4):
                c.execute("DELETE FROM logs WHERE rowid = ?", (rowid,))
            for rowid, *_ in r.sample(rows, 4):
                column, value = r.choice([("level", r.choice(LEVELS)), ("msg", r.choice(MESSAGES)), ("code", "c1")])
                c.execute(f"UPDATE logs SET {column} = ? WHERE rowid = ?", (value, rowid))
            copies = [tuple(row[1:]) for row in r.sample(rows, 3)] + [self.log() for _ in range(3)]
            c.executemany("INSERT INTO logs VALUES (?, ?, ?, ?)", copies)
            c.execute("DELETE FROM notes WHERE rowid = ?", r.choice(c.execute("SELECT rowid FROM notes").fetchall()))
            c.execute("INSERT INTO notes VALUES (?, ?)", self.note())
        with sqlite3.connect(self.b) as c:
            if rewrite_tags:  # most of the site's rows: the join is recomputed
                c.execute("DELETE FROM tags")
                c.executemany("INSERT INTO tags VALUES (?, ?)", [self.tag() for _ in range(9)])
            else:
                # the seed's choice, not SQLite's random(): which content goes decides the assembly method
                c.execute("DELETE FROM tags WHERE rowid = ?", r.choice(c.execute("SELECT rowid FROM tags").fetchall()))
                c.executemany("INSERT INTO tags VALUES (?, ?)", [self.tag() for _ in range(2)])
            c.execute("UPDATE codes SET rank = ? WHERE code = ?", (r.randint(0, 2), f"c{r.randint(0, 14)}"))

    def truth(self, sql: str) -> Counter:
        """The view's SQL evaluated by SQLite over both sources."""
        c = sqlite3.connect(":memory:")
        try:
            c.execute("ATTACH DATABASE ? AS kja", (str(self.a),))
            c.execute("ATTACH DATABASE ? AS kjb", (str(self.b),))
            return Counter(c.execute(sql).fetchall())
        finally:
            c.close()


def test_multiset_views_across_sources_and_left_joins_stay_exact(api, tmp_path, logs_dir):
    sources = Sources(tmp_path / "a.db", tmp_path / "b.db", seed=18)
    agents = [start_agent(f"sqlite:///{tmp_path / f'{n}.db'}", logs_dir) for n in "ab"]
    try:
        api.add_source("kja", agents[0].url)
        api.add_source("kjb", agents[1].url)
        before = {}
        for name, (sql, columns, strategy, _) in VIEWS.items():
            view = api.add_view(name, sql, strategy=strategy, sample_size=SAMPLE)
            assert view["key"] == [] and view["columns"] == columns, view
            before[name] = Counter()
        methods, counted = Counter(), 0
        for rnd in range(4):
            if rnd:
                sources.change(rewrite_tags=rnd == 3)
            for name, (sql, columns, _, joined_on) in VIEWS.items():
                truth = sources.truth(sql)
                assert max(truth.values()) > 1, f"{name}: the rounds must hold duplicate rows"
                sync = api.sync(name)
                counted += check_sync(api, name, columns, before[name], truth, sync)
                check_sample(api, name, columns, truth, SAMPLE)
                before[name] = truth
                assembly = sync["metrics"]["assembly"]
                if rnd == 3 and "kjb.tags" in sql:  # most of tags rewritten
                    assert assembly["method"] == "recompute" and "site 1 changed" in assembly["reason"], assembly
                if assembly["method"] == "delta_rules":
                    assert assembly["joined_on"] == joined_on, (name, assembly)
                methods[name, assembly["method"]] += 1
        for name in VIEWS:  # a load, then mostly the rules
            assert methods[name, "delta_rules"] >= 2, methods
        # an audit after a change: the join recomputed from full reads, counted by content
        sources.change(rewrite_tags=False)
        sql, columns, *_ = VIEWS["kj_left"]
        truth = sources.truth(sql)
        sync = api.http.post("/v1/views/kj_left/syncs", params={"wait": "true", "mode": "verify"}).json()
        check_sync(api, "kj_left", columns, before["kj_left"], truth, sync)
        assert "verify" in sync["metrics"]["assembly"]["reason"] and sync["metrics"]["verify"]["divergent_rows"] == 0
        assert counted, "some delta line must have carried a count above one"
    finally:
        for agent in agents:
            agent.stop()
