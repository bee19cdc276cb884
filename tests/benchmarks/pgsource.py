"""A workload's table on PostgreSQL, kept in step with the simulator's SQLite file.

The simulator (workloads/generators.py) writes SQLite only; it stays the master copy. The
benchmark's PostgreSQL source (`--source postgres`) and reladiff's source database both
hold a copy: COPY of every row at the start, then, after each round, the round's own
work replayed as the application did it — UPDATE of the updated keys (every column, from
the master), DELETE of the deleted ones, INSERT (COPY) of the new ones — so PostgreSQL
sees the same statements' effect, dead tuples included. These writes are the legacy
application's, never counted as a sync's cost.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg

from workloads.generators import Change, TableShape
from workloads.postgres import PostgresServer, start_postgres

#: Rows per fetch while copying from SQLite: bounded memory whatever the table's size.
CHUNK_ROWS = 5_000


def postgres_ddl(sqlite_ddl: str) -> str:
    """The table's SQLite DDL for PostgreSQL: SQLite's INTEGER is 64-bit, its BOOLEAN is 0/1,
    its DATETIME text in UTC (a `timestamp` without zone).

    >>> postgres_ddl("CREATE TABLE t (id INTEGER PRIMARY KEY, on BOOLEAN NOT NULL, at DATETIME)")
    'CREATE TABLE t (id BIGINT PRIMARY KEY, on SMALLINT NOT NULL, at TIMESTAMP)'
    """
    types = {"INTEGER": "BIGINT", "BOOLEAN": "SMALLINT", "DATETIME": "TIMESTAMP"}
    return re.sub(
        r"\b(INTEGER|BOOLEAN|DATETIME)\b", lambda m: types[m.group(1).upper()], sqlite_ddl, flags=re.IGNORECASE
    ).strip()


def sqlite_rows(db: Path, shape: TableShape, keys: list | None) -> Iterator[list[tuple]]:
    """The master's rows, in chunks: all of them (`keys` None) or those of `keys` still there."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        select = f"SELECT {', '.join(shape.columns)} FROM {shape.table}"
        if keys is None:
            cursor = conn.execute(select)
            while rows := cursor.fetchmany(CHUNK_ROWS):
                yield rows
            return
        for start in range(0, len(keys), CHUNK_ROWS):
            chunk = keys[start : start + CHUNK_ROWS]
            yield conn.execute(f"{select} WHERE {shape.key} IN ({','.join('?' * len(chunk))})", chunk).fetchall()
    finally:
        conn.close()


def _copy_in(conn: psycopg.Connection, shape: TableShape, rows: Iterator[list[tuple]]) -> None:
    with conn.cursor().copy(f"COPY {shape.table} ({', '.join(shape.columns)}) FROM STDIN") as copy:
        for chunk in rows:
            for row in chunk:
                copy.write_row(row)


def replace_rows(url: str, shape: TableShape, keys: list | None, rows: Iterator[list[tuple]]) -> None:
    """Delete `keys` (None: nothing) in the table at `url`, then copy `rows` in, in one transaction."""
    with psycopg.connect(url) as conn:
        if keys:
            conn.execute(f"DELETE FROM {shape.table} WHERE {shape.key} = ANY(%s)", (keys,))
        _copy_in(conn, shape, rows)
        conn.commit()


def create_table(url: str, shape: TableShape, db: Path) -> None:
    """Create the table at `url` and copy every row of the master into it."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(postgres_ddl(shape.ddl))
        for statement in shape.indexes:
            conn.execute(statement)
    replace_rows(url, shape, None, sqlite_rows(db, shape, None))


def replay_change(url: str, shape: TableShape, db: Path, change: Change) -> None:
    """Apply one round of the application's work, read back from the master, in one transaction
    (a row flagged deleted is an update of every column too)."""
    others = [c for c in shape.columns if c != shape.key]
    assign = ", ".join(f"{c} = %s" for c in others)
    key_at = shape.columns.index(shape.key)
    with psycopg.connect(url) as conn:
        updates = [
            (*(v for i, v in enumerate(row) if i != key_at), row[key_at])
            for chunk in sqlite_rows(db, shape, [*change.updated, *change.flagged])
            for row in chunk
        ]
        if updates:
            with conn.cursor() as cur:  # one pipelined batch
                cur.executemany(f"UPDATE {shape.table} SET {assign} WHERE {shape.key} = %s", updates)
        flagged = set(change.flagged)
        removed = [k for k in change.deleted if k not in flagged]
        if removed:
            conn.execute(f"DELETE FROM {shape.table} WHERE {shape.key} = ANY(%s)", (removed,))
        _copy_in(conn, shape, sqlite_rows(db, shape, change.inserted))
        conn.commit()


class PostgresSource:
    """A throwaway PostgreSQL 15 server holding one workload's table: the agent's source."""

    def __init__(self, shape: TableShape, db: Path, work_dir: Path):
        self.shape = shape
        self.db = db
        self.server: PostgresServer = start_postgres(work_dir, dbname="legacy")

    @property
    def reader_url(self) -> str:
        """The SELECT-only role: what the agent is given."""
        return self.server.reader_url

    def load(self) -> float:
        """Copy the master's rows in and ANALYZE; returns the seconds it took."""
        started = time.perf_counter()
        create_table(self.server.owner_url, self.shape, self.db)
        with psycopg.connect(self.server.owner_url, autocommit=True) as conn:
            conn.execute(f"ANALYZE {self.shape.table}")
        return time.perf_counter() - started

    def follow(self, change: Change) -> None:
        replay_change(self.server.owner_url, self.shape, self.db, change)

    def size_bytes(self) -> int:
        with psycopg.connect(self.server.owner_url) as conn:
            return conn.execute("SELECT pg_total_relation_size(%s)", (self.shape.table,)).fetchone()[0]

    def stop(self) -> None:
        self.server.stop()
