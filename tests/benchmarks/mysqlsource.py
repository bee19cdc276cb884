"""A workload's table on MariaDB, kept in step with the simulator's SQLite file.

The MariaDB counterpart of pgsource.py (`--source mariadb`): the simulator's SQLite file
stays the master copy; a throwaway MariaDB server (workloads/mariadb.py) started for the
leg holds a copy, loaded by multi-row INSERTs of every row at the start, then, after each
round, the round's own work replayed as the application did it — UPDATE of the updated
keys (every column, from the master), DELETE of the deleted ones, INSERT of the new ones —
in one transaction. These writes are the legacy application's, never counted as a sync's
cost. `MariadbTruth` reads the view's site query from it through MySQLdb with a streamed
(unbuffered) cursor, as the agent reads.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

from remote_agent.adapters.mysql import SQL_MODE
from tests.benchmarks.oracle import FETCH_ROWS, SourceTruth
from tests.benchmarks.pgsource import sqlite_rows
from workloads.generators import Change, TableShape
from workloads.mariadb import MariadbDatabase, MariadbServer, connect, start_mariadb

#: Characters of a text key: a TEXT column cannot be a key without a length; 255 characters
#: of utf8mb4 (1,020 bytes) fit InnoDB's 3,072-byte key limit, three of them too.
TEXT_KEY_CHARS = 255
#: The agent's session settings that change what a value reads as.
READER_SESSION = f"SET SESSION time_zone = '+00:00', SESSION sql_mode = '{SQL_MODE}'"


def _key_columns(sqlite_ddl: str) -> list[str]:
    """The primary key's columns: declared inline (`x TYPE PRIMARY KEY`) or as `PRIMARY KEY (a, b)`."""
    inline = re.findall(r"(\w+)\s+\w+(?:\([\d,\s]*\))?[^,(]*?\bPRIMARY\s+KEY\b(?!\s*\()", sqlite_ddl, re.IGNORECASE)
    listed = re.search(r"\bPRIMARY\s+KEY\s*\(([^)]*)\)", sqlite_ddl, re.IGNORECASE)
    return inline + ([c.strip() for c in listed.group(1).split(",")] if listed else [])


def mariadb_ddl(sqlite_ddl: str) -> str:
    """The table's SQLite DDL for MariaDB: SQLite's INTEGER is 64-bit, its BOOLEAN is 0/1, its
    DATETIME text in UTC with microseconds; a TEXT key needs a length, and compares as SQLite
    does (bytes: the `utf8mb4_bin` collation, not the database's case-blind default).

    >>> mariadb_ddl("CREATE TABLE t (id INTEGER PRIMARY KEY, on BOOLEAN NOT NULL, at DATETIME, note TEXT)")
    'CREATE TABLE t (id BIGINT PRIMARY KEY, on TINYINT NOT NULL, at DATETIME(6), note TEXT)'
    >>> mariadb_ddl("CREATE TABLE w (word TEXT PRIMARY KEY, n INTEGER)")
    'CREATE TABLE w (word VARCHAR(255) COLLATE utf8mb4_bin PRIMARY KEY, n BIGINT)'
    >>> mariadb_ddl("CREATE TABLE e (sid INTEGER NOT NULL, course TEXT NOT NULL, grade TEXT, PRIMARY KEY (sid, course))")
    'CREATE TABLE e (sid BIGINT NOT NULL, course VARCHAR(255) COLLATE utf8mb4_bin NOT NULL, grade TEXT, PRIMARY KEY (sid, course))'
    """
    ddl = sqlite_ddl.strip()
    for column in _key_columns(ddl):
        ddl = re.sub(
            rf"\b({re.escape(column)}\s+)TEXT\b",
            rf"\g<1>VARCHAR({TEXT_KEY_CHARS}) COLLATE utf8mb4_bin",
            ddl,
            count=1,
            flags=re.IGNORECASE,
        )
    types = {"INTEGER": "BIGINT", "BOOLEAN": "TINYINT", "DATETIME": "DATETIME(6)"}
    return re.sub(r"\b(INTEGER|BOOLEAN|DATETIME)\b", lambda m: types[m.group(1).upper()], ddl, flags=re.IGNORECASE)


def insert_sql(shape: TableShape) -> str:
    """The INSERT that MySQLdb's executemany sends as multi-row INSERTs (as many rows per statement as fit).

    >>> from workloads.generators import NARROW
    >>> insert_sql(NARROW)
    'INSERT INTO readings (reading_id, value) VALUES (%s, %s)'
    """
    return f"INSERT INTO {shape.table} ({', '.join(shape.columns)}) VALUES ({', '.join(['%s'] * len(shape.columns))})"


def _insert(conn, shape: TableShape, rows: Iterator[list[tuple]]) -> None:
    with conn.cursor() as cur:
        for chunk in rows:
            if chunk:
                cur.executemany(insert_sql(shape), chunk)


def _delete(conn, shape: TableShape, keys: list) -> None:
    with conn.cursor() as cur:
        for start in range(0, len(keys), FETCH_ROWS):
            chunk = keys[start : start + FETCH_ROWS]
            cur.execute(f"DELETE FROM {shape.table} WHERE {shape.key} IN ({', '.join(['%s'] * len(chunk))})", chunk)


def create_table(url: str, shape: TableShape, db: Path) -> None:
    """Create the table at `url` and insert every row of the master into it, in one transaction."""
    conn = connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(mariadb_ddl(shape.ddl))
            for statement in shape.indexes:
                cur.execute(statement)
        conn.autocommit(False)
        _insert(conn, shape, sqlite_rows(db, shape, None))
        conn.commit()
    finally:
        conn.close()


def replay_change(url: str, shape: TableShape, db: Path, change: Change) -> None:
    """Apply one round of the application's work, read back from the master, in one transaction
    (a row flagged deleted is an update of every column too)."""
    others = [c for c in shape.columns if c != shape.key]
    assign = ", ".join(f"{c} = %s" for c in others)
    key_at = shape.columns.index(shape.key)
    conn = connect(url)
    try:
        conn.autocommit(False)
        updates = [
            (*(v for i, v in enumerate(row) if i != key_at), row[key_at])
            for chunk in sqlite_rows(db, shape, [*change.updated, *change.flagged])
            for row in chunk
        ]
        if updates:
            with conn.cursor() as cur:  # one statement per row: MySQLdb batches INSERTs only
                cur.executemany(f"UPDATE {shape.table} SET {assign} WHERE {shape.key} = %s", updates)
        flagged = set(change.flagged)
        _delete(conn, shape, [k for k in change.deleted if k not in flagged])
        _insert(conn, shape, sqlite_rows(db, shape, change.inserted))
        conn.commit()
    finally:
        conn.close()


class MariadbSource:
    """A throwaway MariaDB server holding one workload's table: the agent's source."""

    def __init__(self, shape: TableShape, db: Path, work_dir: Path):
        self.shape = shape
        self.db = db
        self.server: MariadbServer
        self.database: MariadbDatabase
        self.server, self.database = start_mariadb(work_dir, dbname="legacy")
        # the general log (on for the tests, which read it) would write every statement and
        # every loaded row to disk: a cost no production server has
        admin = self.server.admin()
        try:
            admin.cursor().execute("SET GLOBAL general_log = 0")
        finally:
            admin.close()

    @property
    def reader_url(self) -> str:
        """The SELECT-only role: what the agent is given."""
        return self.database.reader_url

    def load(self) -> float:
        """Insert the master's rows and ANALYZE; returns the seconds it took."""
        started = time.perf_counter()
        create_table(self.database.owner_url, self.shape, self.db)
        conn = connect(self.database.owner_url)
        try:
            with conn.cursor() as cur:
                cur.execute(f"ANALYZE TABLE {self.shape.table}")
                cur.fetchall()
        finally:
            conn.close()
        return time.perf_counter() - started

    def follow(self, change: Change) -> None:
        replay_change(self.database.owner_url, self.shape, self.db, change)

    def size_bytes(self) -> int:
        """The table's data and indexes, as InnoDB reports them (pages allocated, after ANALYZE)."""
        conn = connect(self.database.owner_url)
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT data_length + index_length FROM information_schema.TABLES "
                    "WHERE table_schema = DATABASE() AND table_name = %s",
                    (self.shape.table,),
                )
                return int(cur.fetchone()[0])
        finally:
            conn.close()

    def stop(self) -> None:
        self.server.stop()


class _Connection:
    """A MySQLdb connection with the `execute` (returning the cursor) that sqlite3's and psycopg's have."""

    def __init__(self, conn):
        self.conn = conn

    def execute(self, sql: str, params=()):
        cur = self.conn.cursor()
        cur.execute(sql, params or None)
        return cur

    def close(self) -> None:
        self.conn.close()


class MariadbTruth(SourceTruth):
    """The truth read from a MariaDB source (`db` is the reader's URL) through MySQLdb, in the
    agent's session settings (UTC, its sql_mode)."""

    PARAM = "%s"
    QUOTE = "`"

    def _connect(self) -> _Connection:
        conn = _Connection(connect(self.db))
        conn.execute(READER_SESSION)
        return conn

    def _scan(self) -> Iterator[list[tuple]]:
        # An unbuffered cursor (mysql_use_result), as the agent reads: a buffered one would
        # hold the whole result in memory before the first row.
        import MySQLdb.cursors  # the `mysql` extra: a run on SQLite or PostgreSQL does without it

        conn = self._connect()
        try:
            cursor = conn.conn.cursor(MySQLdb.cursors.SSCursor)
            cursor.execute(self.site_sql)
            while rows := cursor.fetchmany(FETCH_ROWS):
                yield rows
            cursor.close()
        finally:
            conn.close()
