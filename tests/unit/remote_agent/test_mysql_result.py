"""MariaDB chunks read by the compiled reader (mysql_result.py, cast by mysql_arrow.py) against mysqlclient's converters.

Every MariaDB type of the type matrix (workloads/type_matrix.py) with its edge values, in a
real server read by the SELECT-only role: the compiled reader must give exactly the batch
the converters give, or refuse the chunk (a zero date), which is then read through them.
"""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pytest

from deltasieve_protocol import compiled
from remote_agent import chunks
from remote_agent.adapters import mysql_result
from remote_agent.adapters.mysql import MysqlAdapter
from remote_agent.adapters.rows import RowConverter
from remote_agent.errors import SourceUnavailable
from remote_agent.sitequery import ValidatedQuery, validate_site_query
from remote_agent.timings import Timings
from tests.conftest import ROOT
from tests.support.mariadb_legacy import Owner
from workloads.mariadb import MariadbDatabase
from workloads.type_matrix import MARIADB, MARIADB_SESSION

#: Rows of each table: every edge of every column at least once, a column's edge k in row k modulo its count.
ROWS = 6
#: The matrix's rows of columns, without the zero dates the converters read as NULL and Arrow refuses.
EXACT = [(row, [e for e in row.edges if e.what != "zero date"]) for row in MARIADB]


def _table(name: str, columns: list) -> list[str]:
    create = f"CREATE TABLE {name} (k INT PRIMARY KEY, " + ", ".join(f"{r.column} {r.declared}" for r, _ in columns)
    values = [f"({k}, " + ", ".join(edges[k % len(edges)].sql for _, edges in columns) + ")" for k in range(ROWS)]
    return [create + ")", f"INSERT INTO {name} VALUES " + ", ".join(values)]


@pytest.fixture(scope="module")
def server(mariadb: MariadbDatabase) -> MariadbDatabase:
    owner = Owner(mariadb.owner_url)
    try:
        for statement in MARIADB_SESSION:
            owner.execute(statement)
        for statement in _table("exact", EXACT) + _table("edges", [(r, list(r.edges)) for r in MARIADB]):
            owner.execute(statement)
    finally:
        owner.close()
    return mariadb


def _query(adapter: MysqlAdapter, table: str) -> ValidatedQuery:
    columns = ", ".join(["x.k", *(f"x.{row.column}" for row in MARIADB)])
    return validate_site_query(
        f"SELECT {columns} FROM {table} x", ["k"], {t.name: t for t in adapter.describe()}, "mysql"
    )


def _chunk(adapter: MysqlAdapter, query: ValidatedQuery) -> tuple[pa.Table | None, pa.Table]:
    """One chunk of every row: the compiled reader's table (None: refused) and the converters'."""
    converter = RowConverter(adapter, query.columns, query.where())
    sql = query.chunk_sql(ROWS + 1, from_cursor=False, below=False, strictly=False)
    with adapter.read() as reader:
        fast = reader.arrow(
            sql, types=[c.type for c in query.columns], schema=converter.schema, key=query.key_positions
        )
        slow = converter.batch(reader.rows(sql, limit=ROWS + 1), query.key)
    return fast, pa.Table.from_batches([slow])


def _scan(adapter: MysqlAdapter, query: ValidatedQuery, chunk_rows: int) -> pa.Table:
    converter = RowConverter(adapter, query.columns, query.where())
    with adapter.session() as session:
        scanned = chunks.batches(
            adapter, session, query, converter, chunk_rows=chunk_rows, batch_rows=100, timings=Timings()
        )
        return pa.Table.from_batches(list(scanned), converter.schema)


@pytest.mark.parametrize("kernels", ["aot", "jit"])
def test_every_edge_value_reads_as_the_converters_read_it(server, kernels, monkeypatch):
    """`aot`: the loops of the extension built ahead of time, which the agent loads; `jit`:
    numba's compilation of the same source, `auto`'s fall-back from a missing or stale build."""
    monkeypatch.setenv(compiled.CHOICE_VARIABLE, kernels)
    is_numba = hasattr(compiled.kernel("mysql_copy_rows"), "py_func")
    assert is_numba == (kernels == "jit")
    adapter = MysqlAdapter(server.reader_url, statement_timeout_s=5, arrow_reads=True)
    fast, slow = _chunk(adapter, _query(adapter, "exact"))
    assert fast is not None, "the compiled reader refused a chunk without a zero date"
    assert slow.num_rows == ROWS
    for name in slow.column_names:  # column by column, so that a failure names the type
        assert fast.column(name).equals(slow.column(name)), name


def test_a_zero_date_is_refused_and_read_by_the_converters(server):
    adapter = MysqlAdapter(server.reader_url, statement_timeout_s=5, arrow_reads=True)
    query = _query(adapter, "edges")
    fast, slow = _chunk(adapter, query)
    assert fast is None  # Arrow would not parse '0000-00-00'; the converters read NULL
    assert slow.column("v_date").null_count == 2  # the zero date and the NULL
    # a scan a row a chunk: the rows without a zero date compiled, the others converted, one result
    rows = _scan(MysqlAdapter(server.reader_url, statement_timeout_s=5, arrow_reads=False), query, chunk_rows=1)
    assert _scan(adapter, query, chunk_rows=1).equals(rows)
    assert _scan(adapter, query, chunk_rows=4).equals(rows)


def test_without_arrow_reads_no_chunk_is_compiled(server):
    adapter = MysqlAdapter(server.reader_url, statement_timeout_s=5, arrow_reads=False)
    fast, slow = _chunk(adapter, _query(adapter, "exact"))
    assert fast is None and slow.num_rows == ROWS


def test_an_empty_result_has_columns_of_no_rows(server):
    adapter = MysqlAdapter(server.reader_url, statement_timeout_s=5, arrow_reads=True)
    with adapter.session() as session, session.read() as reader:
        reader.conn.query("SELECT k, v_text FROM exact WHERE k < 0")
        columns = mysql_result.stored_columns(mysql_result.native_connection(reader.conn))
    assert [c.to_pylist() for c in columns] == [[], []]


def test_the_statement_timeout_stops_rows_mid_result(server):
    # rows leave the server as they are made: the timeout's error arrives after some of them
    adapter = MysqlAdapter(server.reader_url, statement_timeout_s=0.3, arrow_reads=True)
    schema = pa.schema([("seq", pa.int64()), ("s", pa.int64())])
    types = [c.type for c in _query(adapter, "exact").columns[:2]]
    with adapter.read() as reader, pytest.raises(SourceUnavailable, match="0.3 s statement timeout"):
        reader.arrow("SELECT seq, SLEEP(0.01) AS s FROM seq_1_to_1000", types=types, schema=schema)


def test_the_readers_fork_server_of_a_mysql_agent_loads_the_compiled_reader_without_numba():
    assert MysqlAdapter.reader_preload == ("remote_agent.adapters.mysql_preload",)
    # a fresh process, as the fork server is: after the import, a forked reader's first call
    # finds the loops loaded from the extension built ahead of time, and neither numba nor
    # its LLVM library is loaded
    loaded = (
        "import sys, remote_agent.adapters.mysql_preload; from deltasieve_protocol import compiled; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numba', 'llvmlite'))); "
        "print(compiled.kernels.cache_info().currsize, type(compiled.kernel('mysql_copy_rows')).__name__)"
    )
    env = {"PYTHONPATH": str(ROOT), compiled.CHOICE_VARIABLE: "aot", "PATH": "/usr/bin:/bin"}
    found = subprocess.run([sys.executable, "-c", loaded], env=env, capture_output=True, text=True, check=True)
    assert found.stdout.splitlines() == ["[]", "1 builtin_function_or_method"]
