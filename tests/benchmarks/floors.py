"""The floor a sync is measured against: the engine's fastest bulk read of the same site query.

A user on a fast link could skip deltasieve and export the table with the database's own
bulk path each time; a sync is worth its name only near that. So each round, beside the
syncs, the benchmark reads every row of the view's site query (`res["site_sql"]`, what the
agent reads) by each method below and keeps their seconds; the round's floor is the
fastest of them, and a sync is reported as sync ÷ floor.

- SQLite: ADBC's SQLite driver (C, into Arrow batches) and the `sqlite3` shell to /dev/null.
- PostgreSQL: ADBC's PostgreSQL driver (`COPY (query) TO STDOUT` binary, into Arrow batches),
  psycopg's `COPY … TO STDOUT (FORMAT binary)` (the blocks, unparsed) and psql's text `COPY …
  TO STDOUT` to /dev/null.
- MariaDB: the `mariadb` client (`--quick --batch`, C, to /dev/null) and the C client library
  through MySQLdb's `_mysql` (`mysql_use_result`, no decoders: rows of bytes).

Every method streams (bounded memory whatever the table's size) and is timed once per round
on a warm cache, like the syncs it is set against. The drivers are the `bench` extra's; a
method whose driver or tool is missing is left out of the round, with the reason recorded.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote, urlsplit

#: Rows per batch the C-level readers hand over: the ADBC drivers' own default is about this.
BATCH_ROWS = 10_000


def _adbc_sqlite(db: str, sql: str) -> None:
    import adbc_driver_sqlite.dbapi

    with adbc_driver_sqlite.dbapi.connect(f"file:{db}?mode=ro") as conn, conn.cursor() as cur:
        cur.execute(sql)
        for _ in cur.fetch_record_batch():
            pass


def _sqlite_shell(db: str, sql: str) -> None:
    _run(["sqlite3", "-readonly", "-batch", db, sql])


def _adbc_postgres(url: str, sql: str) -> None:
    import adbc_driver_postgresql.dbapi

    with adbc_driver_postgresql.dbapi.connect(url) as conn, conn.cursor() as cur:
        cur.execute(sql)
        for _ in cur.fetch_record_batch():
            pass


def _psycopg_copy_binary(url: str, sql: str) -> None:
    import psycopg

    with psycopg.connect(url) as conn, conn.cursor().copy(f"COPY ({sql}) TO STDOUT (FORMAT binary)") as copy:
        for _ in copy:
            pass


def _psql_copy(url: str, sql: str) -> None:
    _run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", f"COPY ({sql}) TO STDOUT"])


def mariadb_args(url: str) -> dict:
    """Connection arguments from a mysql:// URL.

    >>> mariadb_args("mysql://reader:p%40ss@127.0.0.1:3307/legacy")
    {'host': '127.0.0.1', 'port': 3307, 'user': 'reader', 'password': 'p@ss', 'database': 'legacy'}
    """
    u = urlsplit(url)
    return {
        "host": u.hostname or "localhost",
        "port": u.port or 3306,
        "user": unquote(u.username or ""),
        "password": unquote(u.password or ""),
        "database": u.path.lstrip("/"),
    }


def _mariadb_client(url: str, sql: str) -> None:
    a = mariadb_args(url)
    command = ["mariadb", "--no-defaults", "--quick", "--batch", "--skip-column-names"]
    command += ["-h", a["host"], "-P", str(a["port"]), "-u", a["user"], a["database"], "-e", sql]
    _run(command, env={**os.environ, "MYSQL_PWD": a["password"]})


def _mysqlclient_use_result(url: str, sql: str) -> None:
    from MySQLdb import _mysql  # the `mysql` extra

    a = mariadb_args(url)
    conn = _mysql.connect(
        host=a["host"], port=a["port"], user=a["user"], password=a["password"], database=a["database"]
    )
    try:
        conn.query(sql)
        result = conn.use_result()  # streamed: rows arrive as they are fetched
        while result.fetch_row(maxrows=BATCH_ROWS):
            pass
    finally:
        conn.close()


def _run(command: list[str], env: dict | None = None) -> None:
    if shutil.which(command[0]) is None:
        raise FileNotFoundError(f"`{command[0]}` is not installed")
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=True, env=env)


#: Per engine, the methods tried, by the name the results and pages show.
METHODS: dict[str, dict[str, Callable[[str, str], None]]] = {
    "sqlite": {
        "adbc-sqlite into Arrow": _adbc_sqlite,
        "sqlite3 shell to /dev/null": _sqlite_shell,
    },
    "postgres": {
        "adbc-postgresql COPY binary into Arrow": _adbc_postgres,
        "psycopg COPY binary": _psycopg_copy_binary,
        "psql COPY text to /dev/null": _psql_copy,
    },
    "mariadb": {
        "mariadb --quick --batch to /dev/null": _mariadb_client,
        "mysqlclient use_result, no decoders": _mysqlclient_use_result,
    },
}


def measure(engine: str, source: str | Path, sql: str, failed: dict[str, str]) -> dict[str, float]:
    """Seconds of each of `engine`'s methods reading every row of `sql` at `source` (a SQLite
    file's path or a server's URL); a method that fails is left out and its reason put in `failed`."""
    seconds = {}
    for name, read in METHODS[engine].items():
        started = time.perf_counter()
        try:
            read(str(source), sql)
        # a missing driver or tool, a type a driver refuses: recorded, never the end of a long run
        except Exception as exc:  # noqa: BLE001
            detail = (
                exc.stderr.decode(errors="replace").strip() if isinstance(exc, subprocess.CalledProcessError) else ""
            )
            failed[name] = f"{type(exc).__name__}: {detail or exc}"[:300]
            continue
        seconds[name] = round(time.perf_counter() - started, 4)
    return seconds


def fastest(methods: dict[str, float] | None) -> tuple[str, float] | None:
    """The fastest method of one round and its seconds; None if none was measured.

    >>> fastest({"psql COPY text": 0.61, "adbc COPY binary": 0.42}), fastest({}), fastest(None)
    (('adbc COPY binary', 0.42), None, None)
    """
    if not methods:
        return None
    name = min(methods, key=methods.__getitem__)
    return name, methods[name]


def steady_floor(floors: list[dict | None], rounds: list[int]) -> dict | None:
    """The floor over `rounds`: the median of each round's fastest read, the method fastest most
    often, and each method's median; None where no round measured one (results from before).

    >>> steady_floor([{"a": 9.0}, {"a": 1.0, "b": 2.0}, {"a": 3.0, "b": 1.0}, {"a": 1.5, "b": 2.5}], [1, 2, 3])
    {'seconds': 1.0, 'method': 'a', 'methods': {'a': 1.5, 'b': 2.0}}
    >>> steady_floor([{}, {"a": 0.61, "b": 0.62}, {"a": 0.40, "b": 0.32}], [1, 2])["method"]
    'b'
    >>> steady_floor([], [1, 2]) is None
    True
    """
    picked = [floors[i] for i in rounds if i < len(floors) and floors[i]]
    best = [f for f in map(fastest, picked) if f]
    if not best:
        return None
    names = [name for name, _ in best]
    medians = {m: statistics.median(f[m] for f in picked if m in f) for m in sorted({m for f in picked for m in f})}
    return {
        "seconds": statistics.median(s for _, s in best),
        # a tie (one round each) goes to the method quicker over the rounds
        "method": max(set(names), key=lambda m: (names.count(m), -medians[m])),
        "methods": medians,
    }
