"""Directories of dump files as a read-only database, through DuckDB.

`file:///ABSOLUTE/DIR` names a directory of dumps (its layout: dumps.py). The agent's
strategies all speak SQL — a site query with its WHERE and joins, keyset chunks, key
lookups, ranged re-reads — so the files are read by an embedded SQL engine rather than by
a CSV parser and code of ours: DuckDB reads CSV (gzipped or not), Parquet and, with
`substr`, fixed-width records, in C++ and several threads (1M CSV rows in 0.2 s here),
and hands Arrow batches over without a Python object per value.

Each table's current dump is converted once into a Parquet file in the agent's cache
directory (never in the dump directory), sorted by the table's key: keyset chunks then
read only the row groups they need (a whole 1M-row walk in 50,000-row chunks takes 0.8 s,
where each chunk of a CSV file would parse the whole file again). A new dump is converted
at the first read that finds it; older conversions of a table are removed then.

Every connection is an in-memory DuckDB whose views name the dumps one request reads,
pinned when the request begins (`pinned`): the reader process and every chunk of one
answer see the same files, whatever arrives meanwhile, and the answer reports them
(`dumps_read`). The agent never writes to the dump directory: it runs only the SELECTs it
generates itself (sitequery.py) and its own conversions into the cache. DuckDB's
allow-list of directories cannot tell reading from writing, so each connection is locked
to the one directory it needs — the cache for every read through the conversions, the dump
directory only for the differential's reads in file order — with its configuration
locked; as with a database login, run the agent as a user who may only read the dumps.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import os
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import duckdb
import pyarrow as pa
from sqlglot import exp

from deltasieve_protocol.types import LogicalType
from remote_agent.adapters.base import DEFAULT_FETCH_ROWS, Adapter, ColumnInfo, Reader, Session, TableInfo
from remote_agent.adapters.convert import converter_for
from remote_agent.adapters.dumps import DumpDir, Layout, dump_stamp, literal, quoted
from remote_agent.adapters.tokens import SourceToken
from remote_agent.errors import BadRequest, Gone, SourceDataError, SourceUnavailable

#: Rows per row group of a cached conversion: what a keyset chunk skips or reads at a time.
CACHE_ROW_GROUP = 16_384


def _error(exc: duckdb.Error, timeout_s: float) -> Exception:
    """The agent's error for a DuckDB error."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = " ".join(lines)[:400]
    if isinstance(exc, duckdb.InterruptException):
        return SourceUnavailable(f"a read of the dump files exceeded the {timeout_s:g} s statement timeout")
    if isinstance(exc, (duckdb.ConversionException, duckdb.InvalidInputException)):
        return SourceDataError(f"a dump file cannot be read as its description says: {text}")
    if isinstance(exc, duckdb.IOException):
        return SourceUnavailable(f"a dump file cannot be read: {text}")
    return exc


class _FileReader(Reader):
    def __init__(self, conn: duckdb.DuckDBPyConnection, timeout_s: float):
        self.conn = conn
        self.timeout_s = timeout_s

    @contextlib.contextmanager
    def _bounded(self) -> Iterator[None]:
        """A statement running past the timeout is interrupted (DuckDB has no statement timeout)."""
        timer = threading.Timer(self.timeout_s, self.conn.interrupt)
        timer.start()
        try:
            yield
        except duckdb.Error as exc:
            raise _error(exc, self.timeout_s) from None
        finally:
            timer.cancel()

    def stream(
        self, sql: str, params: Sequence[Any] = (), fetch_rows: int = DEFAULT_FETCH_ROWS
    ) -> Iterator[list[tuple]]:
        with self._bounded():
            cursor = self.conn.execute(sql, list(params))
        while True:
            with self._bounded():  # the bound is per fetch, as for the other databases
                rows = cursor.fetchmany(fetch_rows)
            if not rows:
                return
            yield rows

    def arrow(
        self,
        sql: str,
        params: Sequence[Any] = (),
        *,
        types: Sequence[LogicalType],
        schema: pa.Schema,
        key: Sequence[int] = (),
    ) -> pa.Table | None:
        with self._bounded():
            table = self.conn.sql(sql, params=list(params) or None).to_arrow_table()
        try:
            return table.rename_columns(schema.names).cast(schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None  # read value by value, whose converters say what is wrong

    def batches(self, sql: str, schema: pa.Schema, batch_rows: int) -> Iterator[pa.RecordBatch]:
        """Every row of one SELECT in the order the engine yields it, as batches of `schema`."""
        with self._bounded():
            reader = self.conn.sql(sql).to_arrow_reader(batch_rows)
        while True:
            with self._bounded():
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    return
            yield pa.RecordBatch.from_arrays(batch.columns, names=schema.names).cast(schema)


class _FileSession(Session):
    def __init__(self, conn: duckdb.DuckDBPyConnection, timeout_s: float):
        self.conn = conn
        self.timeout_s = timeout_s

    @contextlib.contextmanager
    def read(self) -> Iterator[_FileReader]:
        # Dumps never change once written: every statement of the connection sees the same
        # files, so a read needs no transaction of its own.
        yield _FileReader(self.conn, self.timeout_s)


class FileAdapter(Adapter):
    dialect = "duckdb"
    #: The agent's host clock (UTC) stands for the source's: the dumps are written there.
    clock_sql = "SELECT strftime(now() AT TIME ZONE 'UTC', '%Y-%m-%d %H:%M:%S.%f')"
    explain_prefix = "EXPLAIN"
    #: What GET /v1/schema and the warehouse call such a source.
    kind = "files"
    #: Scans and dumps are cast by Arrow, which would read text as a timestamp leniently.
    strict_reads = False

    def change_token(self) -> SourceToken:
        return SourceToken(
            None, "dump files give no change token: a file's size and time prove nothing, a digest costs the read"
        )

    def __init__(
        self, url: str, *, statement_timeout_s: float, arrow_reads: bool = False, cache_dir: str | None = None
    ):
        super().__init__(url, statement_timeout_s=statement_timeout_s, arrow_reads=True)
        parts = urlsplit(url)
        path = "/" + unquote(parts.path).lstrip("/")
        if parts.netloc not in ("", "localhost") or len(path) < 2:
            raise BadRequest("a dump directory URL is file:///ABSOLUTE/DIR")
        self.dir = DumpDir(Path(path))
        digest = hashlib.sha256(path.encode()).hexdigest()[:16]
        base = Path(cache_dir) if cache_dir else Path(tempfile.gettempdir()) / f"deltasieve-agent-{os.getuid()}"
        self.cache = base / digest
        #: table -> dump file name, fixed by `pinned`; None: the newest at each connection
        self.pins: dict[str, str] | None = None

    def describe(self, schemas: Sequence[str] | None = ()) -> list[TableInfo]:
        return [layout.info() for layout in self.dir.layouts().values()]

    def pinned(self, dumps: dict[str, str] | None) -> FileAdapter:
        """This directory with each table's dump fixed: those named in `dumps`, the newest
        for the others (410 if a named dump is gone, 422 if it is not a dump of its table)."""
        out = copy.copy(self)
        out.pins = self._chosen(dumps)
        return out

    def _chosen(self, dumps: dict[str, str] | None) -> dict[str, str]:
        """The dump of each table: those named in `dumps`, the newest for the others."""
        layouts = self.dir.layouts()
        chosen: dict[str, str] = {}
        for name, layout in layouts.items():
            with contextlib.suppress(SourceUnavailable):  # a table with no dump yet fails when read
                chosen[name] = self.dir.newest(layout)
        for name, file_name in (dumps or {}).items():
            found = layouts.get(name)
            if found is None or dump_stamp(name, file_name, found.format) is None:
                raise BadRequest(f"{file_name!r} is not the name of a dump of a table {name!r} of {self.dir.path}")
            if not (self.dir.path / file_name).is_file():
                raise Gone(f"dump {file_name!r} of table {name!r} is no longer in {self.dir.path}")
            chosen[name] = file_name
        return chosen

    def _pins(self) -> dict[str, str]:
        """The dump read for each table: the pinned ones, else the newest of each now."""
        return self.pins if self.pins is not None else self._chosen(None)

    def dumps_read(self, tables: Sequence[str]) -> dict[str, str] | None:
        pins = self._pins()
        return {t: pins[t] for t in tables if t in pins}

    def _cached(self, layout: Layout, file_name: str) -> Path:
        """The dump's conversion to Parquet, sorted by the table's key, made now if missing."""
        source = self.dir.path / file_name
        try:
            stat = source.stat()
        except FileNotFoundError:
            raise Gone(f"dump {file_name!r} of table {layout.name!r} is no longer in {self.dir.path}") from None
        target = self.cache / layout.name / f"{file_name}.{stat.st_size}.{stat.st_mtime_ns}.parquet"
        if target.exists():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        order = f" ORDER BY {', '.join(quoted(k) for k in layout.key)}" if layout.key else ""
        partial = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}")
        conn = duckdb.connect(":memory:")
        try:
            conn.execute(
                f"COPY ({layout.reader_sql(source)}{order}) TO {literal(str(partial))} "
                f"(FORMAT parquet, ROW_GROUP_SIZE {CACHE_ROW_GROUP}, COMPRESSION zstd)"
            )
            _check_key(conn, layout, file_name, f"SELECT * FROM read_parquet({literal(str(partial))})")
        except duckdb.Error as exc:
            partial.unlink(missing_ok=True)
            raise _error(exc, self.statement_timeout_s) from None
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        finally:
            conn.close()
        os.replace(partial, target)
        # the conversions of the two newest dumps stay (a request may still read the older)
        keep = set(self.dir.dumps(layout)[-2:]) | {file_name}
        for old in target.parent.glob("*.parquet"):
            if not any(old.name.startswith(name + ".") for name in keep):
                with contextlib.suppress(OSError):
                    old.unlink()
        return target

    def connect(self, *, in_file_order: bool = False) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB with a view per table over its pinned dump: over the dump's
        cached conversion (sorted by key), or `in_file_order` over the dump file itself."""
        pins = self._pins()
        layouts = self.dir.layouts()
        views = {}
        for name, file_name in pins.items():
            if in_file_order:
                views[name] = layouts[name].reader_sql(self.dir.path / file_name)
            else:
                views[name] = f"SELECT * FROM read_parquet({literal(str(self._cached(layouts[name], file_name)))})"
        conn = duckdb.connect(":memory:")
        try:
            for name, sql in views.items():
                conn.execute(f"CREATE VIEW {quoted(name)} AS {sql}")
            # DuckDB's allow-list does not tell reading from writing: a connection over the
            # cached conversions may reach the cache only; one over the dumps themselves runs
            # the one SELECT of the differential (see the module docstring)
            allowed = literal(str(self.dir.path if in_file_order else self.cache) + "/")
            conn.execute(f"SET allowed_directories = [{allowed}]")
            conn.execute("SET enable_external_access = false")
            conn.execute("SET lock_configuration = true")
        except duckdb.Error as exc:
            conn.close()
            raise _error(exc, self.statement_timeout_s) from None
        return conn

    def check_keys(self, tables: Sequence[str]) -> None:
        """Fail (409) if a pinned dump of `tables` has a NULL key or a key twice (a pass of
        DuckDB over the file; its conversion checks the same when it is made)."""
        pins = self._pins()
        layouts = self.dir.layouts()
        conn = duckdb.connect(":memory:")
        try:
            for table in tables:
                name = pins[table]
                _check_key(conn, layouts[table], name, layouts[table].reader_sql(self.dir.path / name))
        except duckdb.Error as exc:
            raise _error(exc, self.statement_timeout_s) from None
        finally:
            conn.close()

    def in_file_order(self, sql: str, schema: pa.Schema, batch_rows: int) -> Iterator[pa.RecordBatch]:
        """The rows of a site query over the pinned dumps as their files hold them, in
        batches of `schema` (the snapshot differential reads each dump once, in its order)."""
        conn = self.connect(in_file_order=True)
        try:
            yield from _FileReader(conn, self.statement_timeout_s).batches(sql, schema, batch_rows)
        finally:
            conn.close()

    def rows_of_keys(self, sql: str, keys: pa.Table, schema: pa.Schema, batch_rows: int) -> Iterator[pa.RecordBatch]:
        """The rows of a site query over the pinned dumps whose key is one of `keys` (a
        table of the key columns, as the query names them): one pass of DuckDB over the
        dumps, the keys matched by its semi-join."""
        conn = self.connect(in_file_order=True)
        try:
            conn.register("__ds_keys", keys)
            using = ", ".join(quoted(name) for name in keys.schema.names)
            picked = f"SELECT * FROM ({sql}) AS {quoted('__site')} SEMI JOIN {quoted('__ds_keys')} USING ({using})"
            yield from _FileReader(conn, self.statement_timeout_s).batches(picked, schema, batch_rows)
        finally:
            conn.close()

    @contextlib.contextmanager
    def session(self) -> Iterator[Session]:
        conn = self.connect()
        try:
            yield _FileSession(conn, self.statement_timeout_s)
        finally:
            conn.close()

    def converter(self, column: ColumnInfo) -> Callable[[Any], Any]:
        return converter_for(column.type)

    def range_key(self, column: ColumnInfo, ref: exp.Expression, origin: str) -> exp.Expression | None:
        # Typed columns: DuckDB orders integers, decimals, dates and timestamps by value,
        # text and blobs by their bytes (UTF-8 byte order is code point order), as Python does.
        return ref if column.type.kind in ("int", "decimal", "text", "bytes", "date", "timestamp") else None


def _check_key(conn: duckdb.DuckDBPyConnection, layout: Layout, file_name: str, rows_sql: str) -> None:
    """Fail (409) if the dump (its rows: `rows_sql`) holds a NULL in a key column or a key
    twice: every strategy, and the snapshot differential of this dump with the next, relies
    on the key."""
    if not layout.key:
        return
    key = ", ".join(quoted(k) for k in layout.key)
    source = f"({rows_sql})"
    nulls = " OR ".join(f"{quoted(k)} IS NULL" for k in layout.key)
    found = conn.execute(f"SELECT {key} FROM {source} WHERE {nulls} LIMIT 1").fetchall()
    if found:
        raise SourceDataError(
            f"dump {file_name!r} of table {layout.name!r} has a NULL in its key {list(layout.key)}: {found[0]}; "
            "every row of a keyed table needs its key"
        )
    twice = conn.execute(f"SELECT {key} FROM {source} GROUP BY ALL HAVING count(*) > 1 LIMIT 1").fetchall()
    if twice:
        shown = twice[0][0] if len(layout.key) == 1 else twice[0]
        raise SourceDataError(
            f"dump {file_name!r} of table {layout.name!r} holds the key {shown!r} more than once: its declared "
            f"key {list(layout.key)} is not unique; fix the dump or the key in {layout.name}.table.json"
        )
