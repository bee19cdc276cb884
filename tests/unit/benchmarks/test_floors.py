"""The floors: each engine's bulk reads of a site query, timed, and the round's fastest."""

from __future__ import annotations

import doctest
import sqlite3

from tests.benchmarks import floors


def test_the_floors_docstring_examples_hold():
    assert doctest.testmod(floors).failed == 0


def test_every_sqlite_method_reads_the_query_or_says_why_not(tmp_path):
    db = tmp_path / "t.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT)")
        conn.executemany("INSERT INTO t VALUES (?, ?)", [(i, f"n{i}") for i in range(5_000)])
    failed: dict[str, str] = {}
    seconds = floors.measure("sqlite", db, "SELECT id, name FROM t", failed)
    assert set(seconds) | set(failed) == set(floors.METHODS["sqlite"])
    assert seconds, failed  # the sqlite3 shell or the bench extra's ADBC driver
    assert all(s > 0 for s in seconds.values())
    assert floors.fastest(seconds)[1] == min(seconds.values())


def test_a_method_that_fails_is_left_out_with_the_engines_reason(tmp_path):
    db = tmp_path / "t.db"
    sqlite3.connect(db).close()
    failed: dict[str, str] = {}
    assert floors.measure("sqlite", db, "SELECT nothing FROM missing", failed) == {}
    assert set(failed) == set(floors.METHODS["sqlite"])
    assert all(
        "missing" in reason or "not installed" in reason or "No module" in reason for reason in failed.values()
    ), failed
