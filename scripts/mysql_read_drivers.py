"""Rows/s read from MariaDB into one canonical Arrow table, per Python driver, and what each driver makes of the type traps.

Every path reads as the agent would: keyset chunks of 50,000 rows (`WHERE id >= cursor ORDER BY
id LIMIT 50000`), each in its own START TRANSACTION READ ONLY, buffered, into `SCHEMA`; each result
is checked equal to (a)'s. 200,000 rows (int key, varchar, DECIMAL(10,2), DATE, DATETIME(6), DOUBLE,
TINYINT(1), BIGINT UNSIGNED, NULLs in all but the key), MariaDB 10.11 on loopback, 2 cores, idle,
interleaved, median of 3; mysqlclient 2.3.2, mariadb 1.1.14 (Connector/C 3.3 of Debian 12), PyMySQL 1.2.4:

    python scripts/mysql_read_drivers.py --rows 200000 --repeat 3

| path                                                     | rows/s  | median s | runs (s)         |
|----------------------------------------------------------|--------:|---------:|------------------|
| (a) mysqlclient default converters + pa.array            | 217,014 |     0.92 | 1.15, 0.91, 0.92 |
| (b) mysqlclient, no decoders, + Arrow casts              | 392,414 |     0.51 | 0.54, 0.50, 0.51 |
| (c) mariadb text protocol + pa.array                     | 341,258 |     0.59 | 0.64, 0.59, 0.58 |
| (c') mariadb binary protocol (bound ?) + pa.array        | 438,458 |     0.46 | 0.49, 0.44, 0.46 |
| (d) PyMySQL + pa.array                                   | 108,496 |     1.84 | 1.84, 1.88, 1.79 |
| bare mysqlclient fetchall, no decoders, no Arrow         | 712,340 |     0.28 | 0.28, 0.28, 0.27 |
| bare `mariadb -B` client to a pipe                       | 556,299 |     0.36 | 0.35, 0.36, 0.37 |

Types (the trap table, printed first): zero dates ('0000-00-00', '2024-00-10' in DATE, DATETIME(6)
and a zero TIMESTAMP) come back as None, indistinguishable from NULL, from mysqlclient's default
converters and mariadb's text protocol; mariadb's binary protocol raises ValueError for the whole
fetch; PyMySQL returns the str (pa.array then raises ArrowTypeError); (b) gets the server's bytes and
Arrow's cast raises "Failed to parse string", the raw value at hand. Alike in all: TINYINT(1) is an
int (2 stays 2, no bool), BIT(8)/BIT(1) big-endian bytes, BIGINT UNSIGNED max exact, DECIMAL(65,30)
exact (a Decimal; (b) casts to decimal256(65,30)), DATETIME(6)/TIMESTAMP(6) keep microseconds
(naive, session time_zone '+00:00'), ENUM/SET str ('x,z'), BLOB bytes vs TEXT str, CHAR(5) 'ab '
read as 'ab' (the server strips), utf8mb4 emoji intact. (b) casts exactly: ints, uint64, decimals,
dates and DATETIME(6) from their text; DOUBLE's text is the shortest round trip (20,000 random
doubles equal to the binary protocol's), though a FLOAT reads 0.1 as text, 0.10000000149011612 binary.

Recommendation: mysqlclient with no decoders and Arrow's vectorised casts (b): 10 % below the
fastest (c'), nearly twice (a) and 3.6 times PyMySQL, exact, and the only fast path where a zero
date is neither silently NULL nor a failed chunk without its value. mysqlclient (already the
test harness's driver) and mariadb 1.1 both compile against libmariadb-dev (pkg-config/mariadb_config,
a C compiler): PyPI has no Linux wheels of either (mariadb's 2.0 release candidates are a new pure
Python implementation, not measured); PyMySQL is a pure Python wheel, the fallback without a compiler.

`--students N` times instead the agent's own scan of the students view (chunks.batches, the
agent's default chunks of 10,000 rows, each its own read-only transaction) with each reader
in place of the adapter's: the compiled reader (mysql_result.py), the reader before it
(mysqlclient's rows of bytes, then the same Arrow casts), mysqlclient's converters,
connectorx when it is installed (not a dependency), beside the two client floors of the
benchmarks (tests/benchmarks/floors.py); interleaved, every table checked equal. Results in
tests/benchmarks/results/mysql-drivers.md:

    python scripts/mysql_read_drivers.py --students 1000000 --repeat 3
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import MySQLdb
import MySQLdb.converters
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from remote_agent import chunks  # noqa: E402
from remote_agent.adapters import mysql as my  # noqa: E402
from remote_agent.adapters import mysql_arrow  # noqa: E402
from remote_agent.adapters.rows import RowConverter  # noqa: E402
from remote_agent.settings import DEFAULT_CHUNK_ROWS  # noqa: E402
from remote_agent.sitequery import validate_site_query  # noqa: E402
from remote_agent.timings import Timings  # noqa: E402
from tests.benchmarks import floors  # noqa: E402
from tests.benchmarks.mysqlsource import create_table  # noqa: E402
from workloads.generators import STUDENTS  # noqa: E402
from workloads.mariadb import start_mariadb  # noqa: E402
from workloads.students import StudentsSource  # noqa: E402

CHUNK_ROWS = 50_000
COLUMNS = "id, name, amount, day, at, score, flag, big"
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("amount", pa.decimal128(10, 2)),
        ("day", pa.date32()),
        ("at", pa.timestamp("us")),
        ("score", pa.float64()),
        ("flag", pa.int8()),  # TINYINT(1) holds -128..127, not a boolean
        ("big", pa.uint64()),
    ]
)
CREATE = """CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(64), amount DECIMAL(10,2), day DATE,
    at DATETIME(6), score DOUBLE, flag TINYINT(1), big BIGINT UNSIGNED)"""
# Deterministic rows from the sequence engine; every nullable column has NULLs at its own rate.
FILL = """INSERT INTO t SELECT seq, IF(seq % 17 = 0, NULL, CONCAT('name ', seq, ' é')),
    IF(seq % 13 = 0, NULL, (seq * 7919 % 10000000) / 100 - 50000),
    IF(seq % 11 = 0, NULL, DATE '1950-01-01' + INTERVAL seq % 30000 DAY),
    IF(seq % 7 = 0, NULL, TIMESTAMP '2000-01-01 00:00:00' + INTERVAL seq * 997 SECOND + INTERVAL seq MICROSECOND),
    IF(seq % 5 = 0, NULL, seq / 3.0e0 - 1e4), IF(seq % 3 = 0, NULL, seq % 2),
    IF(seq % 19 = 0, NULL, 18446744073709551615 - seq * 1000003) FROM seq_1_to_{rows}"""
SELECT = f"SELECT {COLUMNS} FROM t WHERE id >= {{}} ORDER BY id LIMIT {CHUNK_ROWS}"  # {}: the cursor or `?`


def interleaved(
    candidates: dict[str, Callable[[], object]], repeat: int, first: str, rows: int | None = None
) -> tuple[dict[str, list[float]], pa.Table | None]:
    """Each candidate's seconds over `repeat` interleaved rounds (the machine's noise hits all
    alike), and the first table one returned: every table must equal it (`first` names it in
    the error), and with `rows` given hold that many rows, as must a count a candidate returns."""
    reference = None
    seconds: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(repeat):
        for name, run in candidates.items():
            started = time.perf_counter()
            result = run()
            seconds[name].append(time.perf_counter() - started)
            if isinstance(result, pa.Table):
                reference = result if reference is None else reference
                assert rows is None or result.num_rows == rows, f"{name}: {result.num_rows} rows"
                assert result.equals(reference), f"{name}: not {first} table"
            elif rows is not None:
                assert result == rows, f"{name}: {result} rows"
    return seconds, reference


def connect_args(url: str) -> dict:
    u = urlsplit(url)
    return {"host": u.hostname, "port": u.port, "user": u.username, "password": u.password, "database": u.path[1:]}


def from_rows(rows: list[tuple]) -> pa.Table:
    columns = list(zip(*rows)) if rows else [[] for _ in SCHEMA]
    return pa.Table.from_arrays([pa.array(c, f.type) for c, f in zip(columns, SCHEMA)], schema=SCHEMA)


def from_text(rows: list[tuple]) -> pa.Table:
    """Text values (str; bytes for the non-text types under mysqlclient) cast by Arrow, vectorised."""
    columns = list(zip(*rows)) if rows else [[] for _ in SCHEMA]
    return pa.Table.from_arrays([pa.array(c, pa.string()).cast(f.type) for c, f in zip(columns, SCHEMA)], schema=SCHEMA)


def keyset(read_chunk: Callable[[int], list[tuple]], convert: Callable[[list[tuple]], pa.Table]) -> pa.Table:
    """The agent's read: chunks from the last key on (its own row sliced off), to one Arrow table."""
    tables, cursor = [], None
    while True:
        table = convert(read_chunk(-(2**31) if cursor is None else cursor))
        if cursor is not None:
            table = table.slice(1)
        tables.append(table)
        if table.num_rows < CHUNK_ROWS - (cursor is not None):
            return pa.concat_tables(tables)
        cursor = table.column(0)[-1].as_py()


def dbapi_chunks(conn, params: bool = False, **cursor_kw) -> Callable[[int], list[tuple]]:
    """Each chunk its own read-only transaction; `params`: the cursor as a bound `?` (with the
    mariadb connector's binary=True: Prepare + Execute; without it the connector substitutes the
    value into the text itself, as its general-log lines show), else a literal in the SQL."""

    def read(cursor: int) -> list[tuple]:
        cur = conn.cursor(**cursor_kw)
        cur.execute("START TRANSACTION READ ONLY")
        if params:
            cur.execute(SELECT.format("?"), (cursor,))
        else:
            cur.execute(SELECT.format(int(cursor)))
        rows = cur.fetchall()
        cur.close()
        conn.commit()
        return rows

    return read


#: mysqlclient with its encoders (for parameters) but no decoders: every value stays as the server sent it.
NO_DECODERS = {k: v for k, v in MySQLdb.converters.conversions.items() if not isinstance(k, int)}


def mysqlclient(url: str, **kw):
    return MySQLdb.connect(**connect_args(url), charset="utf8mb4", **kw)


def mariadb_conn(url: str):
    import mariadb  # MariaDB's Connector/Python: compared here, not a dependency

    return mariadb.connect(**connect_args(url))


def pymysql_conn(url: str):
    import pymysql  # compared here, not a dependency

    return pymysql.connect(**connect_args(url), charset="utf8mb4")


def run_path(make_conn, convert, params=False, **cursor_kw) -> Callable[[], pa.Table]:
    def run() -> pa.Table:
        conn = make_conn()
        try:
            return keyset(dbapi_chunks(conn, params, **cursor_kw), convert)
        finally:
            conn.close()

    return run


def bare_fetchall(url: str) -> int:
    conn = mysqlclient(url, conv=NO_DECODERS)
    try:
        cur = conn.cursor()
        cur.execute(f"SELECT {COLUMNS} FROM t ORDER BY id")
        return len(cur.fetchall())
    finally:
        conn.close()


def bare_cli(url: str) -> int:
    a = connect_args(url)
    out = subprocess.run(
        ["mariadb", "--no-defaults", "-B", "-N", "-h", a["host"], "-P", str(a["port"]), "-u", a["user"], a["database"]]
        + ["-e", f"SELECT {COLUMNS} FROM t ORDER BY id"],
        env={**os.environ, "MYSQL_PWD": a["password"]},
        capture_output=True,
        check=True,
    ).stdout
    return out.count(b"\n")


# -- type traps -----------------------------------------------------------------------------------
TRAPS = """CREATE TABLE traps (n INT PRIMARY KEY, d DATE, dt DATETIME(6), ts TIMESTAMP(6) NULL, tiny TINYINT(1),
    b8 BIT(8), b1 BIT(1), ubig BIGINT UNSIGNED, dec65 DECIMAL(65,30), e ENUM('a','b'), s SET('x','y','z'),
    bl BLOB, tx TEXT, c5 CHAR(5), emoji VARCHAR(8))"""
TRAP_ROWS = [
    "(1, '0000-00-00', '0000-00-00 00:00:00', '0000-00-00 00:00:00', 2, b'10100101', b'1', 18446744073709551615,"
    " '12345678901234567890123456789012345.123456789012345678901234567891', 'b', 'x,z', x'00ff', 'text', 'ab ',"
    " '\U0001f600')",
    "(2, '2024-00-10', '2024-00-10 12:34:56.789012', '2024-03-31 01:30:00.000001', 1, b'0', b'0', 0,"
    " '-0.000000000000000000000000000001', 'a', '', '', '', '', 'é')",
    "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
]


TRAP_COLUMNS = "d dt ts tiny b8 b1 ubig dec65 e s bl tx c5 emoji".split()


def traps(url: str) -> dict[str, dict[str, str]]:
    """Per driver and trap column, what rows 1 / 2 / 3 (all NULL) come back as, or the error raised.

    Zero dates are allowed by the owner's sql_mode '' at insert; the reader's session has time_zone '+00:00'."""
    drivers = {
        "mysqlclient": lambda: mysqlclient(url),
        "mysqlclient, no decoders": lambda: mysqlclient(url, conv=NO_DECODERS),
        "mariadb, text": lambda: mariadb_conn(url),
        "mariadb, binary": lambda: mariadb_conn(url),
        "PyMySQL": lambda: pymysql_conn(url),
    }
    out: dict[str, dict[str, str]] = {}
    for name, make in drivers.items():
        out[name] = {}
        for column in TRAP_COLUMNS:
            conn = make()
            try:
                cur = conn.cursor()
                cur.execute("SET time_zone = '+00:00'")
                if name == "mariadb, binary":  # a bound parameter and binary=True: Prepare + Execute
                    cur = conn.cursor(binary=True)
                    cur.execute(f"SELECT {column} FROM traps WHERE n > ? ORDER BY n", (0,))
                else:
                    cur.execute(f"SELECT {column} FROM traps ORDER BY n")
                out[name][column] = " / ".join(repr(row[0]) for row in cur.fetchall())
            except Exception as e:  # an error is a finding too
                cause = e.__cause__ or e.__context__
                out[name][column] = f"{type(e).__name__}" + (f" ({cause!r})" if cause else f": {e}")
            finally:
                conn.close()
    return out


# -- the agent's own scan of the students view, per reader -----------------------------------------
#: The students workload's site query, as the benchmarks' view reads it.
STUDENTS_SQL = (
    "SELECT s.student_id, s.first_name, s.middle_name, s.last_name, s.title, s.birth_date, s.country, "
    "s.phone, s.address, s.mailing_address, s.enrolled, s.gpa FROM students s WHERE s.active = 1"
)


def previous_arrow(reader, sql, params=(), *, types, schema, key=()):
    """The agent's reader before the compiled one: mysqlclient's rows of bytes, no decoders,
    each column a pa.array, then the same Arrow casts (mysql_arrow.canonical)."""
    query = my.format_placeholders(sql).encode() % tuple(map(reader.conn.literal, params)) if params else sql
    saved, reader.conn.converter = reader.conn.converter, {}
    try:
        reader.conn.query(query)
        rows = reader.conn.store_result().fetch_row(0)
    finally:
        reader.conn.converter = saved
    columns = list(zip(*rows)) if rows else [() for _ in schema]
    return mysql_arrow.canonical([pa.array(c, pa.binary()) for c in columns], types, schema)


def connectorx_arrow(url: str, session: list[str]):
    """connectorx (Rust, its own MySQL client) per chunk: a new connection (two: it reconnects
    over the unix socket it finds), the agent's session statements run first, the statement
    with its cursor as literals; a chunk it cannot read (it panics on a zero date, a decimal
    beyond 28 digits, TIME) would go to the converters."""
    import connectorx  # compared here, not a dependency

    def arrow(reader, sql, params=(), *, types, schema, key=()):
        query = my.format_placeholders(sql).encode() % tuple(map(reader.conn.literal, params)) if params else sql
        text = query.decode() if isinstance(query, bytes) else query
        try:
            table = connectorx.read_sql(url, text, return_type="arrow", pre_execution_query=session)
        except BaseException:  # a Rust panic is a BaseException  # noqa: BLE001
            return None
        return pa.Table.from_arrays([c.cast(f.type) for c, f in zip(table.columns, schema)], schema=schema)

    return arrow


def agent_scan(url: str, arrow_reads: bool, chunk_rows: int, reader_arrow=None) -> pa.Table:
    """The students site query through the agent's own scan (chunks.batches), its chunks read
    by `reader_arrow` in place of the adapter's reader where given."""
    adapter = my.MysqlAdapter(url, statement_timeout_s=600, arrow_reads=arrow_reads)
    query = validate_site_query(STUDENTS_SQL, ["student_id"], {t.name: t for t in adapter.describe()}, "mysql")
    converter = RowConverter(adapter, query.columns, query.where())
    saved = my._MysqlReader.arrow
    if reader_arrow is not None:
        my._MysqlReader.arrow = reader_arrow
    try:
        with adapter.session() as session:
            scan = chunks.batches(
                adapter, session, query, converter, chunk_rows=chunk_rows, batch_rows=16_384, timings=Timings()
            )
            return pa.Table.from_batches(list(scan), converter.schema)
    finally:
        my._MysqlReader.arrow = saved


def students(args) -> None:
    """Seconds of each reader over the students view, interleaved, checked equal to the converters'."""
    with tempfile.TemporaryDirectory(prefix="myread-") as work:
        server = None
        url = args.reader_url
        if url is None:
            server, database = start_mariadb(Path(work))
            db = Path(work) / "students.db"
            StudentsSource(db).create(args.students)
            create_table(database.owner_url, STUDENTS, db)
            url = database.reader_url
        try:
            session = [
                "SET SESSION TRANSACTION READ ONLY",
                f"SET SESSION time_zone = '+00:00', SESSION sql_mode = '{my.SQL_MODE}', SESSION max_statement_time = 600",
                "START TRANSACTION READ ONLY, WITH CONSISTENT SNAPSHOT",
            ]
            ordered = f"{STUDENTS_SQL} ORDER BY s.student_id"
            chunk = args.chunk_rows
            candidates: dict[str, Callable[[], object]] = {
                "the agent, compiled reader (--arrow-reads)": lambda: agent_scan(url, True, chunk),
                "the agent, its reader before: rows of bytes + Arrow casts": lambda: agent_scan(
                    url, True, chunk, previous_arrow
                ),
                "the agent, mysqlclient's converters (--no-arrow-reads)": lambda: agent_scan(url, False, chunk),
            }
            with contextlib.suppress(ImportError):
                import connectorx  # noqa: F401

                candidates["the agent, connectorx per chunk"] = lambda: agent_scan(
                    url, True, chunk, connectorx_arrow(url, session)
                )
            candidates["floor: _mysql use_result, rows of bytes"] = lambda: floors._mysqlclient_use_result(url, ordered)
            candidates["floor: mariadb --quick --batch to /dev/null"] = lambda: floors._mariadb_client(url, ordered)
            seconds, reference = interleaved(candidates, args.repeat, "the compiled reader's")
            rows = reference.num_rows if reference is not None else 0
            print(f"\n{rows} rows of the students view, chunks of {chunk} rows")
            print("| path | rows/s (best) | best s | median s | runs (s) |\n|---|---:|---:|---:|---|")
            for name, runs in seconds.items():
                best = min(runs)
                print(
                    f"| {name} | {rows / best:,.0f} | {best:.2f} | {statistics.median(runs):.2f} | "
                    f"{', '.join(f'{s:.2f}' for s in runs)} |"
                )
        finally:
            if server is not None:
                server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--students", type=int, help="instead: the agent's scan of a students table of this many rows")
    parser.add_argument("--chunk-rows", type=int, default=DEFAULT_CHUNK_ROWS, help="rows per chunk of --students")
    parser.add_argument("--reader-url", help="--students: read this server's students table (no server started)")
    args = parser.parse_args()
    if args.students or args.reader_url:
        students(args)
        return

    with tempfile.TemporaryDirectory(prefix="myread-") as work:
        server, database = start_mariadb(Path(work))
        try:
            owner = database.owner()
            cur = owner.cursor()
            cur.execute(CREATE)
            cur.execute(FILL.format(rows=args.rows))
            cur.execute("SET SESSION sql_mode = ''")
            cur.execute(TRAPS)
            cur.execute("INSERT INTO traps VALUES " + ", ".join(TRAP_ROWS))
            cur.execute("ANALYZE TABLE t")
            cur.fetchall()
            owner.close()
            url = database.reader_url

            found = traps(url)
            print("| column | " + " | ".join(found) + " |\n|---|" + "---|" * len(found))
            for column in TRAP_COLUMNS:
                print(f"| {column} | " + " | ".join(found[d][column] for d in found) + " |")

            candidates: dict[str, Callable[[], object]] = {
                "(a) mysqlclient default converters + pa.array": run_path(lambda: mysqlclient(url), from_rows),
                "(b) mysqlclient no decoders + Arrow casts": run_path(
                    lambda: mysqlclient(url, conv=NO_DECODERS), from_text
                ),
                "(c) mariadb text protocol, buffered + pa.array": run_path(
                    lambda: mariadb_conn(url), from_rows, buffered=True
                ),
                "(c') mariadb binary protocol (bound ?), buffered + pa.array": run_path(
                    lambda: mariadb_conn(url), from_rows, params=True, buffered=True, binary=True
                ),
                "(d) PyMySQL + pa.array": run_path(lambda: pymysql_conn(url), from_rows),
                "bare mysqlclient fetchall, no decoders, no Arrow (reference)": lambda: bare_fetchall(url),
                "bare `mariadb -B` client to a pipe (reference)": lambda: bare_cli(url),
            }
            seconds, _ = interleaved(candidates, args.repeat, "(a)'s", rows=args.rows)
            print(f"\n{args.rows} rows\n| path | rows/s (median) | median s | runs (s) |\n|---|---:|---:|---|")
            for name, runs in seconds.items():
                median = statistics.median(runs)
                print(f"| {name} | {args.rows / median:,.0f} | {median:.2f} | {', '.join(f'{s:.2f}' for s in runs)} |")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
