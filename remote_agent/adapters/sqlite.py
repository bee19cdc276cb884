"""SQLite adapter: the file is opened read-only (`mode=ro`) and with `PRAGMA query_only`."""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import pyarrow as pa
from sqlglot import exp

from deltasieve_protocol.types import DEFAULT_DECIMAL_SCALE, MAX_DECIMAL_PRECISION, LogicalType
from remote_agent.adapters import sqlite_arrow
from remote_agent.adapters.base import DEFAULT_FETCH_ROWS, Adapter, ColumnInfo, Reader, Session, TableInfo
from remote_agent.adapters.convert import converter_for
from remote_agent.adapters.tokens import KeptConnection, SourceToken
from remote_agent.errors import AgentError, BadRequest, SourceRefused, SourceUnavailable

_DECIMAL_ARGS = re.compile(r"\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)")


def logical_type(declared: str) -> LogicalType:
    """Map a declared SQLite column type to a logical type (SQLite's affinity rules, refined).

    >>> [str(logical_type(t)) for t in ("INTEGER", "varchar(20)", "DECIMAL(10,2)", "BOOLEAN", "DATETIME", "")]
    ['int', 'text', 'decimal(10,2)', 'bool', 'timestamp', 'text']
    """
    t = declared.upper()
    if "BOOL" in t:
        return LogicalType("bool")
    if "TIMESTAMPTZ" in t or "WITH TIME ZONE" in t:
        return LogicalType("timestamptz")
    if "DATETIME" in t or "TIMESTAMP" in t:
        return LogicalType("timestamp")
    if "DATE" in t:
        return LogicalType("date")
    if "INT" in t:
        return LogicalType("int")
    if any(s in t for s in ("CHAR", "CLOB", "TEXT", "STRING")):
        return LogicalType("text")
    if "BLOB" in t or "BINARY" in t or "BYTEA" in t:
        return LogicalType("bytes")
    if any(s in t for s in ("REAL", "FLOA", "DOUB")):
        return LogicalType("float")
    if "DEC" in t or "NUMERIC" in t or "MONEY" in t:
        match = _DECIMAL_ARGS.search(t)
        if match:
            precision = min(int(match.group(1)), MAX_DECIMAL_PRECISION)
            scale = min(int(match.group(2) or 0), precision)
            return LogicalType("decimal", precision, scale)
        return LogicalType("decimal", MAX_DECIMAL_PRECISION, DEFAULT_DECIMAL_SCALE)
    return LogicalType("text")


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


#: The share of the statement timeout a sqlite3 fetch may take for later chunks of the
#: session to be read through ADBC, which no timeout bounds (`_SqliteSession.arrow_conn`).
ARROW_TRIAL_SHARE = 0.25


#: Primary result codes a later read may pass: the file busy or locked by a writer, an I/O
#: error, no memory, a file that cannot be opened (moved or replaced under the agent).
TRANSIENT_CODES = frozenset(
    {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_NOMEM, sqlite3.SQLITE_CANTOPEN}
)


def read_error(exc: sqlite3.Error, deadline_s: float) -> AgentError:
    """The agent's error for a failed statement of a read, told by SQLite's result code.

    >>> c = sqlite3.connect(":memory:")
    >>> try:
    ...     c.execute("SELECT nope FROM sqlite_master")
    ... except sqlite3.Error as exc:
    ...     print(read_error(exc, 1).message)
    SQLite refused the read: no such column: nope
    """
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if code is not None else None  # an extended code's low byte is its primary code
    if primary == sqlite3.SQLITE_INTERRUPT:  # the progress handler stopped it (`stream`)
        return SourceUnavailable(f"SQLite statement exceeded the {deadline_s:g} s timeout")
    if primary in TRANSIENT_CODES:
        return SourceUnavailable(f"SQLite could not finish the read: {exc}")
    return SourceRefused(str(exc), engine="SQLite")


class _SqliteReader(Reader):
    def __init__(self, conn: sqlite3.Connection, deadline_s: float, session: _SqliteSession | None = None):
        self.conn = conn
        self.deadline_s = deadline_s
        self._session = session

    def arrow(
        self,
        sql: str,
        params: Sequence[Any] = (),
        *,
        types: Sequence[LogicalType],
        schema: pa.Schema,
        key: Sequence[int] = (),
    ) -> pa.Table | None:
        # A statement of the ADBC connection: one read transaction of its own (sqlite_arrow.py).
        session = self._session
        arrow_conn = session.arrow_conn() if session is not None else None
        if session is None or arrow_conn is None:
            return None
        started = time.monotonic()
        table = sqlite_arrow.read_table(arrow_conn, sql, params)
        session.fetched(time.monotonic() - started)  # a slow one sends the next chunks back to sqlite3
        return None if table is None else sqlite_arrow.canonical(table, types, schema, key)

    def stream(
        self, sql: str, params: Sequence[Any] = (), fetch_rows: int = DEFAULT_FETCH_ROWS
    ) -> Iterator[list[tuple]]:
        started = time.monotonic()
        # SQLite has no statement timeout; a progress handler aborts a statement that runs too long.
        self.conn.set_progress_handler(lambda: int(time.monotonic() - started > self.deadline_s), 10_000)
        cursor = None
        try:
            cursor = self.conn.execute(sql, tuple(params))
            while True:
                rows = cursor.fetchmany(fetch_rows)
                if not rows:
                    return
                if self._session is not None:
                    self._session.fetched(time.monotonic() - started)
                yield rows
                started = time.monotonic()  # the bound is per fetch, not for the whole stream
        except sqlite3.Error as exc:
            raise read_error(exc, self.deadline_s) from None
        finally:
            if cursor is not None:
                cursor.close()  # a statement left open would keep the read transaction alive
            self.conn.set_progress_handler(None, 0)


class _SqliteSession(Session):
    def __init__(self, conn: sqlite3.Connection, deadline_s: float, open_arrow: Callable[[], Any] | None = None):
        self.conn = conn
        self.deadline_s = deadline_s
        self._open_arrow = open_arrow
        self._arrow: Any = None
        #: the longest sqlite3 fetch of the session so far (None: none yet)
        self._slowest_s: float | None = None

    def fetched(self, seconds: float) -> None:
        """Count a fetch (sqlite3's or ADBC's) that took `seconds` (the Arrow reads' trial, `arrow_conn`)."""
        self._slowest_s = seconds if self._slowest_s is None else max(self._slowest_s, seconds)

    def arrow_conn(self) -> Any:
        """The session's ADBC connection, once a sqlite3 fetch showed the reads quick; None: read through sqlite3.

        The driver cannot interrupt a statement: the first chunk of a scan is read through
        sqlite3, under the statement timeout, and the later ones, which walk the same plan
        over as many rows, go to ADBC only while no fetch of the session took more than
        `ARROW_TRIAL_SHARE` of it.
        """
        if self._open_arrow is None or self._slowest_s is None:
            return None
        if self._slowest_s > ARROW_TRIAL_SHARE * self.deadline_s:
            return None
        if self._arrow is None:
            self._arrow = self._open_arrow()
        return self._arrow

    def close(self) -> None:
        sqlite_arrow.close(self._arrow)
        self._arrow = None

    @contextlib.contextmanager
    def read(self) -> Iterator[Reader]:
        # One read transaction: its statements see one state, and it holds SQLite's shared
        # lock (writers wait to commit) until it ends.
        self.conn.execute("BEGIN")
        try:
            yield _SqliteReader(self.conn, self.deadline_s, self)
        finally:
            with contextlib.suppress(sqlite3.Error):
                self.conn.execute("ROLLBACK")


def _close_kept(kept: tuple[sqlite3.Connection, tuple[int, int]]) -> None:
    kept[0].close()


class SqliteAdapter(Adapter):
    dialect = "sqlite"
    #: UTC, in the text form of SQLite's own date functions ('YYYY-MM-DD HH:MM:SS.SSS'):
    #: timestamps stored as such text compare with it as text.
    clock_sql = "SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')"
    #: Rows (id, parent, notused, detail): the detail names the index and the range it serves.
    explain_prefix = "EXPLAIN QUERY PLAN"

    def __init__(self, url: str, *, statement_timeout_s: float, arrow_reads: bool = False):
        """`arrow_reads`: read scan chunks through adbc-driver-sqlite straight into Arrow
        (sqlite_arrow.py); the agent's `--sqlite-arrow-reads` setting, on by default."""
        super().__init__(url, statement_timeout_s=statement_timeout_s, arrow_reads=arrow_reads)
        parts = urlsplit(url)
        # sqlite:///tmp/x.db and sqlite:////tmp/x.db both name /tmp/x.db: the path is absolute.
        path = "/" + unquote(parts.path).lstrip("/")
        if parts.netloc not in ("", "localhost") or not path.startswith("/"):
            raise BadRequest("SQLite URL must be sqlite:///ABSOLUTE/PATH.db")
        self.path = Path(path)
        #: The connection change tokens are read on (`change_token`): PRAGMA data_version
        #: counts the commits of other connections since this one opened, so it stays open,
        #: with the file's device and inode when it opened.
        self._tokens: KeptConnection[tuple[sqlite3.Connection, tuple[int, int]]] = KeptConnection(
            self._token_connection, _close_kept
        )

    def _token_connection(self) -> tuple[sqlite3.Connection, tuple[int, int]]:
        stat = os.stat(self.path)
        return self._connect(), (stat.st_dev, stat.st_ino)

    def change_token(self) -> SourceToken:
        def read(kept: tuple[sqlite3.Connection, tuple[int, int]], serial: int) -> str | None:
            conn, opened = kept
            before = os.stat(self.path)
            if (before.st_dev, before.st_ino) != opened:
                return None  # another file under the name: reopen
            version = conn.execute("PRAGMA data_version").fetchone()[0]
            file = f"{before.st_dev}/{before.st_ino}/{before.st_size}/{before.st_mtime_ns}"
            return f"sqlite/{serial}/{version}/{file}"

        try:
            token = self._tokens.use(read)
            if token is None:
                self._tokens.reopen()
                token = self._tokens.use(read)
        except (OSError, sqlite3.Error, AgentError) as exc:
            return SourceToken(None, f"SQLite gave no data version: {exc}")
        return SourceToken(token) if token is not None else SourceToken(None, "the file was replaced twice meanwhile")

    def _connect(self) -> sqlite3.Connection:
        if not self.path.is_file():
            raise SourceUnavailable(f"SQLite database {self.path} does not exist")
        try:
            conn = sqlite3.connect(
                f"file:{quote(str(self.path))}?mode=ro",
                uri=True,
                timeout=self.statement_timeout_s,
                check_same_thread=False,
            )
            conn.execute("PRAGMA query_only = ON")
        except sqlite3.Error as exc:
            raise SourceUnavailable(f"cannot open SQLite database {self.path}: {exc}") from None
        return conn

    def describe(self, schemas: Sequence[str] | None = ()) -> list[TableInfo]:
        return self._describe(None)

    def describe_tables(self, names: Sequence[str], schemas: Sequence[str] | None = ()) -> list[TableInfo]:
        return self._describe(sorted(set(names)))

    def _describe(self, names: Sequence[str] | None) -> list[TableInfo]:
        """The tables and views of the file (only those named `names`, unless None)."""
        conn = self._connect()
        try:
            sql = "SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%'"
            if names is not None:
                sql += f" AND name IN ({', '.join('?' * len(names))})"
            kinds = dict(conn.execute(sql + " ORDER BY name", tuple(names or ())).fetchall())
            tables = []
            for name, kind in kinds.items():
                info = conn.execute(f"PRAGMA table_info({_quote_ident(name)})").fetchall()
                columns = tuple(
                    ColumnInfo(r[1], logical_type(r[2] or ""), nullable=not r[3] and not r[5], declared=r[2] or "")
                    for r in info
                )
                pk = tuple(r[1] for r in sorted((r for r in info if r[5]), key=lambda r: r[5]))
                uniques = []
                for idx in conn.execute(f"PRAGMA index_list({_quote_ident(name)})").fetchall():
                    if idx[2] and idx[3] != "pk":  # unique, and not the primary key itself
                        cols = tuple(r[2] for r in conn.execute(f"PRAGMA index_info({_quote_ident(idx[1])})"))
                        if cols and all(c is not None for c in cols):
                            uniques.append(cols)
                tables.append(TableInfo(name, columns, pk, tuple(uniques), kind=kind))
            return tables
        finally:
            conn.close()

    @contextlib.contextmanager
    def session(self) -> Iterator[Session]:
        conn = self._connect()
        session = _SqliteSession(conn, self.statement_timeout_s, self._connect_arrow if self.arrow_reads else None)
        try:
            yield session
        finally:
            session.close()
            conn.close()

    def _connect_arrow(self) -> Any:
        return sqlite_arrow.connect(str(self.path))

    def can_lookup(self, key_types) -> bool:
        # Integers, text and blobs are stored as themselves; dates, decimals and the like
        # may be stored in several textual or numeric forms that `=` would not match.
        return all(t.kind in ("int", "text", "bytes") for t in key_types)

    def range_key(self, column: ColumnInfo, ref: exp.Expression, origin: str) -> exp.Expression | None:
        # Integers only. A column of INTEGER affinity holds numbers, compared by value,
        # or text the converter refuses. Any other column may mix storage classes, which
        # SQLite sorts by class first (numbers < text < blobs) where the converters make
        # one kind of value of them all: a text column may hold blobs (read as their
        # UTF-8 text), a column of no affinity numbers; dates, timestamps and decimals
        # have several stored forms whose order is not that of their values.
        return ref if column.type.kind == "int" and not column.read_as else None

    def converter(self, column: ColumnInfo) -> Callable[[Any], Any]:
        return converter_for(column.type)

    def wire_type(self, column: ColumnInfo) -> pa.DataType | None:
        # sqlite3 hands over int, float, str, bytes or None, whatever the declared type.
        return _WIRE_TYPES.get(column.type.kind)


#: What Arrow reads sqlite3's values of a column as: exactly what the column's converter
#: makes of them, or an error. Integers go as doubles, which read the integral floats
#: SQLite may hold as the converter does and refuse integers beyond 2**53 (see
#: columns.finish); text accepts UTF-8 blobs and bytes accepts text, as the converters do.
#: Dates, booleans and timestamps have no such type (Arrow would read a blob as a date's
#: text, or a float 1.0 as true): they go value by value.
_WIRE_TYPES = {
    "int": pa.float64(),
    "float": pa.float64(),
    "decimal": pa.float64(),
    "text": pa.string(),
    "bytes": pa.binary(),
}
