"""Scans read ahead in a reader process (remote_agent/readahead.py), on real SQLite and PostgreSQL."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sqlite3

import psycopg
import pyarrow as pa
import pytest

from remote_agent import readahead
from remote_agent.adapters import open_adapter
from remote_agent.adapters.rows import RowConverter
from remote_agent.errors import ReaderLost, SourceDataError, SourceUnavailable
from remote_agent.settings import ScanSettings
from remote_agent.sitequery import validate_site_query
from remote_agent.timings import Timings

ROWS = 2_000


def _query(adapter, sql: str, key: list[str]):
    return validate_site_query(sql, key, {t.name: t for t in adapter.describe()}, adapter.dialect)


def _batches(adapter, query, *, read_ahead: bool, chunk_rows: int = 300, batch_rows: int = 128, timings=None):
    timings = timings or Timings()
    yield from readahead.batches(
        adapter,
        query,
        RowConverter(adapter, query.columns, query.where()),
        ScanSettings(chunk_rows=chunk_rows, read_ahead=read_ahead),
        batch_rows=batch_rows,
        timings=timings,
    )


def _readers() -> list[multiprocessing.Process]:
    return [p for p in multiprocessing.active_children() if p.name == "deltasieve-reader"]


@pytest.fixture(scope="module")
def sqlite_db(tmp_path_factory):
    path = tmp_path_factory.mktemp("readahead") / "legacy.db"
    with sqlite3.connect(path) as c:
        c.execute(
            "CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, born DATE, score REAL, ok BOOLEAN, price DECIMAL(8,2))"
        )
        c.executemany(
            "INSERT INTO t VALUES (?, ?, ?, ?, ?, ?)",
            [
                (i * 7, f"n{i}" if i % 5 else None, f"2001-01-{i % 28 + 1:02d}", i / 3, i % 2, f"{i}.25")
                for i in range(ROWS)
            ],
        )
        c.execute("CREATE TABLE nullkey (k INTEGER, v TEXT)")
        c.executemany("INSERT INTO nullkey VALUES (?, ?)", [(i, "v") for i in range(1, 900)] + [(None, "x")])
    return path


@pytest.fixture
def sqlite(sqlite_db):
    return open_adapter(f"sqlite:///{sqlite_db}", statement_timeout_s=5)


def test_a_scan_read_ahead_gives_the_batches_of_one_read_in_process(sqlite):
    query = _query(sqlite, "SELECT t.id, t.name, t.born, t.score, t.ok, t.price FROM t t WHERE t.id <> 70", ["id"])
    timings = Timings()
    ahead = pa.Table.from_batches(list(_batches(sqlite, query, read_ahead=True, timings=timings)))
    here = pa.Table.from_batches(list(_batches(sqlite, query, read_ahead=False)))
    assert ahead.num_rows == ROWS - 1 and ahead.equals(here)
    seconds = timings.to_json()
    # the reader's read and conversion are reported, and the answer's thread waited for it
    assert seconds["read_s"] > 0 and seconds["convert_s"] > 0 and seconds["wait_s"] > 0
    assert not _readers()


def test_the_readers_error_is_raised_in_the_answer_with_its_message(sqlite):
    query = _query(sqlite, "SELECT n.k, n.v FROM nullkey n", ["k"])
    with pytest.raises(SourceDataError, match=r"NULL in key column\(s\) \['k'\]"):
        list(_batches(sqlite, query, read_ahead=True))
    assert not _readers()


def test_the_statement_timeout_holds_in_the_reader(sqlite_db):
    slow = open_adapter(f"sqlite:///{sqlite_db}", statement_timeout_s=0.05)
    # a cross join of 2,000 rows with itself thrice: far more than 0.05 s of work in one chunk
    query = _query(
        slow,
        "SELECT a.id, b.id AS b_id, c.id AS c_id FROM t a JOIN t b ON 1 = 1 JOIN t c ON 1 = 1 WHERE a.score + b.score + c.score < 0",
        ["id", "b_id", "c_id"],
    )
    with pytest.raises(SourceUnavailable, match="timeout"):
        list(_batches(slow, query, read_ahead=True))


def test_an_answer_that_stops_early_kills_its_reader_and_its_lock(sqlite, sqlite_db):
    query = _query(sqlite, "SELECT t.id, t.name FROM t t", ["id"])
    scan = _batches(sqlite, query, read_ahead=True, chunk_rows=ROWS, batch_rows=10)
    next(scan)  # the reader now holds a chunk, or is blocked handing on the next batch
    assert len(_readers()) == 1
    scan.close()
    assert not _readers()
    # timeout=0: a read transaction left open would make this fail with "database is locked"
    with sqlite3.connect(sqlite_db, timeout=0) as writer:
        writer.execute("UPDATE t SET name = name WHERE id = 7")


def test_a_reader_that_dies_fails_the_answer_as_transient(sqlite):
    query = _query(sqlite, "SELECT t.id, t.name FROM t t", ["id"])
    scan = _batches(sqlite, query, read_ahead=True, chunk_rows=50, batch_rows=10)
    next(scan)
    (reader,) = _readers()
    os.kill(reader.pid, signal.SIGKILL)
    with pytest.raises(ReaderLost, match="exit code -9") as failed:
        for _ in scan:  # what the pipe still held arrives first
            pass
    assert failed.value.transient and failed.value.status == 503


PG_SCHEMA = """
CREATE TABLE t (id integer PRIMARY KEY, name text, at timestamptz, price numeric(9,2), f double precision);
INSERT INTO t SELECT i, CASE WHEN i % 5 = 0 THEN NULL ELSE 'n' || i END, '2024-01-01 00:00:00+00'::timestamptz + i * interval '1 minute', i * 1.25, CASE WHEN i % 7 = 0 THEN 'NaN'::float8 ELSE -i / 3.0 END FROM generate_series(1, 1500) i;
GRANT SELECT ON t TO reader;
"""


def test_postgres_scan_read_ahead_equals_one_read_in_process(postgres):
    with psycopg.connect(postgres.owner_url, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS t")
        c.execute(PG_SCHEMA)
    adapter = open_adapter(postgres.reader_url, statement_timeout_s=5)
    query = _query(adapter, "SELECT t.id, t.name, t.at, t.price, t.f FROM t t", ["id"])
    ahead = pa.Table.from_batches(list(_batches(adapter, query, read_ahead=True)))
    here = pa.Table.from_batches(list(_batches(adapter, query, read_ahead=False)))
    assert ahead.num_rows == 1500 and ahead.schema == here.schema
    assert repr(ahead.to_pylist()) == repr(here.to_pylist())  # NaN equals NaN here
