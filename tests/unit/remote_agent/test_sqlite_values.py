"""SQLite decimals declared without a scale: read exactly at decimal(38,10), or refused by name, never rounded."""

from __future__ import annotations

import re
import sqlite3
from decimal import Decimal

import pyarrow as pa
import pytest

from remote_agent import chunks
from remote_agent.adapters.rows import RowConverter
from remote_agent.adapters.sqlite import SqliteAdapter
from remote_agent.errors import SourceDataError
from remote_agent.sitequery import validate_site_query
from remote_agent.timings import Timings


def _scan(path, sql: str, *, arrow: bool) -> pa.Table:
    adapter = SqliteAdapter(f"sqlite:///{path}", statement_timeout_s=5, arrow_reads=arrow)
    query = validate_site_query(sql, ["id"], {t.name: t for t in adapter.describe()}, "sqlite", adapter.key_order)
    converter = RowConverter(adapter, query.columns, query.where())
    with adapter.session() as session:
        scanned = chunks.batches(adapter, session, query, converter, chunk_rows=2, batch_rows=100, timings=Timings())
        return pa.Table.from_batches(list(scanned), converter.schema)


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "numbers.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, n NUMERIC, d DECIMAL)")
        # NUMERIC affinity keeps 1.5 as REAL, 10**18 as INTEGER, '2.25' as REAL 2.25
        conn.executemany("INSERT INTO t VALUES (?, ?, ?)", [(1, 1.5, 10**18), (2, None, "2.25"), (3, -0.0000000001, 7)])
    return path


@pytest.mark.parametrize("arrow", [False, True])
def test_values_within_the_scale_are_read_exactly(db, arrow):
    table = _scan(db, "SELECT t.id, t.n, t.d FROM t", arrow=arrow)
    assert table.schema.field("n").type == pa.decimal128(38, 10)
    assert table.column("n").to_pylist() == [Decimal("1.5"), None, Decimal("-1E-10")]
    assert table.column("d").to_pylist() == [Decimal(10**18), Decimal("2.25"), Decimal(7)]


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (0.123456789012345, "more than 10 fractional digits: decimal\\(38,10\\) would round it"),
        # beyond 2**63 SQLite keeps an integer as REAL: its shortest text has 29 integer digits
        (12345678901234567890123456789, "does not fit decimal\\(38,10\\)"),
    ],
)
@pytest.mark.parametrize("arrow", [False, True])
def test_a_value_the_scale_would_change_is_refused_by_name(db, value, why, arrow):
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO t VALUES (4, ?, NULL)", (str(value),))
    with pytest.raises(SourceDataError) as refused:
        _scan(db, "SELECT t.id, t.n FROM t", arrow=arrow)
    message = refused.value.message
    assert "table 't'" in message and "column 'n'" in message and "key {'id': 4}" in message
    assert repr(float(value)) in message
    assert re.search(why, message)
    assert "Fix the value at the source" in message
