"""Seconds to read the students site query from PostgreSQL into canonical Arrow batches, per driver path.

Every path reads as the agent does: keyset chunks of 50,000 rows ordered by the key, each
its own read-only transaction, into batches of `arrow_schema`; each result is checked equal
to (a)'s. 1M students rows (950,012 in the site query), PostgreSQL 15 on loopback, 2 shared
cores, interleaved, median of 3 (run 3 of the commit; runs 1-2, under other load, ranked
the same: (a) 8.3/16.5 s, (d) 4.1/8.9 s, bare 4.7/11.4 s):

    python scripts/pg_read_drivers.py --sqlite students-1m.db --repeat 3

| path                                                        | median s | runs (s)           |
|-------------------------------------------------------------|---------:|--------------------|
| (a) psycopg text, server-side cursor + RowConverter (today)  |     8.76 | 11.30, 8.76, 6.33  |
| (b) psycopg binary server-side cursor + RowConverter         |     8.83 | 10.32, 8.83, 5.64  |
| (c) psycopg COPY (...) TO STDOUT (FORMAT BINARY) rows + RC   |    12.96 | 12.96, 13.02, 8.77 |
| (c') psycopg COPY ... (FORMAT CSV) + pyarrow.csv             |     7.20 | 9.63, 7.20, 5.73   |
| (d) ADBC PostgreSQL (its COPY mode), cast to canonical       |     5.60 | 5.93, 5.60, 4.86   |
| (e) the agent with arrow_reads: chunks.batches, ADBC SELECT  |     5.71 | 7.15, 5.48, 5.71   |
| bare psycopg fetchall of the whole query (reference)         |     5.49 | 5.49, 4.90, 6.77   |

Guarantees: every path keeps statement_timeout, idle_in_transaction_session_timeout and
the read-only default (server-side settings in the conninfo's options). (b) and (c) give
psycopg's values, so RowConverter keeps decimals, timestamps, floats and NULLs as today;
psycopg's COPY loads row by row in Python and is the slowest. (c') would need its own
parsing of bytea, booleans, 'infinity' and BC dates. (d)/(e) hand over float4 as its
binary value (0.100000001; made the shortest double again), numeric as text (cast
exactly, or the chunk falls back to psycopg), 'infinity' dates as out-of-range days
(refused, then psycopg's error), -0.0/NaN and NULLs as they are. (e) was measured while
the agent sent the driver a plain SELECT (the security audit of the server's log refused
every COPY then); it now sends the driver's COPY, (d)'s path, with BEGIN ... READ ONLY of
its own (postgres_arrow.py), and the audit takes COPY (SELECT ...) TO STDOUT as its SELECT.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.csv as pacsv

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from remote_agent import chunks  # noqa: E402
from remote_agent.adapters import postgres as pg  # noqa: E402
from remote_agent.adapters.rows import RowConverter  # noqa: E402
from remote_agent.sitequery import ValidatedQuery, validate_site_query  # noqa: E402
from remote_agent.timings import Timings  # noqa: E402
from tests.benchmarks.pgsource import create_table  # noqa: E402
from workloads.generators import WORKLOADS  # noqa: E402
from workloads.postgres import start_postgres  # noqa: E402

SITE_QUERY = (
    "SELECT s.student_id, s.first_name, s.middle_name, s.last_name, s.title, s.birth_date, s.country, "
    "s.phone, s.address, s.mailing_address, s.enrolled, s.gpa FROM students s WHERE s.active = 1"
)
CHUNK_ROWS = 50_000
BATCH_ROWS = 16_384


# -- tuple readers: psycopg variants driven by the agent's own chunks.batches ---------------------
class _BinaryCursorReader(pg._PostgresReader):
    """A server-side cursor asking for binary results."""

    def stream(self, sql, params=(), fetch_rows=5_000):
        query, args = (pg.psycopg_placeholders(sql), tuple(params)) if params else (sql, None)
        cursor = self.conn.cursor(name=f"deltasieve_{next(self._cursors)}", binary=True)
        try:
            cursor.execute(query, args)
            while rows := cursor.fetchmany(fetch_rows):
                yield rows
                if len(rows) < fetch_rows:
                    return
        finally:
            cursor.close()


class _CopyRowsReader(pg._PostgresReader):
    """COPY (SELECT ...) TO STDOUT (FORMAT BINARY), rows made by psycopg's C loaders."""

    types: list[str] = []

    def stream(self, sql, params=(), fetch_rows=5_000):
        query, args = (pg.psycopg_placeholders(sql), tuple(params)) if params else (sql, None)
        with self.conn.cursor() as cur, cur.copy(f"COPY ({query}) TO STDOUT (FORMAT BINARY)", args) as copy:
            copy.set_types(self.types)
            yield list(copy.rows())


def _adapter_with(reader_cls: type[pg._PostgresReader], url: str) -> pg.PostgresAdapter:
    adapter = pg.PostgresAdapter(url, statement_timeout_s=60)

    class Session(pg._PostgresSession):
        @contextlib.contextmanager
        def read(self):
            try:
                yield reader_cls(self.conn, self.timeout_s)
            finally:
                self.conn.rollback()

    @contextlib.contextmanager
    def session():
        conn = adapter._connect()
        try:
            yield Session(conn, 60)
        finally:
            conn.close()

    adapter.session = session  # type: ignore[method-assign]
    return adapter


def via_chunks(adapter: pg.PostgresAdapter, query: ValidatedQuery, arrow: bool = False) -> list[pa.RecordBatch]:
    converter = RowConverter(adapter, query.columns)
    with adapter.session() as session:
        if not arrow:
            session._open_arrow = None  # psycopg rows and RowConverter, the path before the Arrow reads
        return list(
            chunks.batches(
                adapter, session, query, converter, chunk_rows=CHUNK_ROWS, batch_rows=BATCH_ROWS, timings=Timings()
            )
        )


# -- Arrow-native readers: keyset pagination on the last row's key ---------------------------------
def keyset(query: ValidatedQuery, read_chunk: Callable[[str, list], pa.Table]) -> Iterator[pa.Table]:
    """Chunks of CHUNK_ROWS rows by the (unique, one-column) key, as chunks.scan cuts them."""
    cursor = None
    while True:
        table = read_chunk(
            query.chunk_sql(CHUNK_ROWS, from_cursor=cursor is not None), [] if cursor is None else [cursor]
        )
        if cursor is not None and table.num_rows:  # the cursor's own row was the last chunk's
            table = table.slice(1)
        yield table
        if table.num_rows < CHUNK_ROWS - (cursor is not None):
            return
        cursor = table.column(query.key_positions[0])[-1].as_py()


def _canonical(table: pa.Table, schema: pa.Schema) -> pa.Table:
    return table.rename_columns(schema.names).cast(schema)


def via_adbc(url: str, query: ValidatedQuery, schema: pa.Schema) -> list[pa.RecordBatch]:
    import adbc_driver_postgresql.dbapi as adbc

    out = []
    with adbc.connect(url) as conn:  # autocommit off: the driver sends BEGIN before a statement

        def read(sql: str, params: list) -> pa.Table:
            sql = sql.replace("%s", "$1")
            with conn.cursor() as cur:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                cur.execute(sql, params or None)
                table = cur.fetch_arrow_table()
            conn.rollback()
            return table

        for table in keyset(query, read):
            out.extend(_canonical(table, schema).to_batches(BATCH_ROWS))
    return out


def via_copy_csv(adapter: pg.PostgresAdapter, query: ValidatedQuery, schema: pa.Schema) -> list[pa.RecordBatch]:
    out = []
    conn = adapter._connect()
    convert = pacsv.ConvertOptions(
        column_types=schema, strings_can_be_null=True, quoted_strings_can_be_null=False, null_values=[""]
    )
    parse = pacsv.ParseOptions(newlines_in_values=True)
    read_opts = pacsv.ReadOptions(column_names=schema.names, block_size=1 << 24)
    try:

        def read(sql: str, params: list) -> pa.Table:
            query_sql, args = (pg.psycopg_placeholders(sql), tuple(params)) if params else (sql, None)
            with conn.cursor() as cur, cur.copy(f"COPY ({query_sql}) TO STDOUT (FORMAT CSV)", args) as copy:
                data = b"".join(copy)
            conn.rollback()
            return pacsv.read_csv(
                pa.py_buffer(data), read_options=read_opts, parse_options=parse, convert_options=convert
            )

        for table in keyset(query, read):
            out.extend(table.to_batches(BATCH_ROWS))
    finally:
        conn.close()
    return out


def bare_fetchall(url: str) -> int:
    with psycopg.connect(url) as conn:
        return len(conn.execute(SITE_QUERY).fetchall())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sqlite", type=Path, help="an existing students SQLite file of the simulator")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="pgread-") as work:
        db = args.sqlite
        if db is None:
            db = Path(work) / "students.db"
            WORKLOADS["students"].simulator(db).create(args.rows)
        server = start_postgres(Path(work), dbname="legacy")
        try:
            shape = WORKLOADS["students"].shape
            started = time.perf_counter()
            create_table(server.owner_url, shape, db)
            with psycopg.connect(server.owner_url, autocommit=True) as conn:
                conn.execute("ANALYZE students")
            print(f"loaded in {time.perf_counter() - started:.1f} s", flush=True)
            url = server.reader_url
            adapter = pg.PostgresAdapter(url, statement_timeout_s=60)
            arrow_adapter = pg.PostgresAdapter(url, statement_timeout_s=60, arrow_reads=True)
            tables = {t.name: t for t in adapter.describe()}
            query = validate_site_query(SITE_QUERY, ["student_id"], tables, "postgres")
            schema = RowConverter(adapter, query.columns).schema
            _CopyRowsReader.types = [c.declared.split("(")[0] for c in query.columns]
            candidates: dict[str, Callable[[], list[pa.RecordBatch]]] = {
                "(a) psycopg text cursor + RowConverter (today)": lambda: via_chunks(adapter, query),
                "(b) psycopg binary cursor + RowConverter": lambda: via_chunks(
                    _adapter_with(_BinaryCursorReader, url), query
                ),
                "(c) psycopg COPY BINARY rows + RowConverter": lambda: via_chunks(
                    _adapter_with(_CopyRowsReader, url), query
                ),
                "(c') psycopg COPY CSV + pyarrow.csv": lambda: via_copy_csv(adapter, query, schema),
                "(d) ADBC PostgreSQL, cast to canonical": lambda: via_adbc(url, query, schema),
                "(e) the agent now: chunks.batches, ADBC via Reader.arrow": lambda: via_chunks(
                    arrow_adapter, query, True
                ),
                "bare psycopg fetchall (reference)": lambda: bare_fetchall(url),
            }
            reference = pa.Table.from_batches(candidates["(a) psycopg text cursor + RowConverter (today)"](), schema)
            print(f"{reference.num_rows} rows of the site query", flush=True)
            seconds: dict[str, list[float]] = {name: [] for name in candidates}
            for _ in range(args.repeat):
                for name, run in candidates.items():  # interleaved: the machine's noise hits all alike
                    started = time.perf_counter()
                    result = run()
                    seconds[name].append(time.perf_counter() - started)
                    if isinstance(result, list):
                        same = pa.Table.from_batches(result, schema).equals(reference)
                        assert same, f"{name}: not the reference's batches"
            print("| path | median s | runs (s) |\n|---|---:|---|")
            for name, runs in seconds.items():
                print(f"| {name} | {statistics.median(runs):.2f} | {', '.join(f'{s:.2f}' for s in runs)} |")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
