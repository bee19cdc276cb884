"""The PostgreSQL adapter's Arrow reads (ADBC) against a real server: same batches as psycopg's rows, same guarantees."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

import psycopg
import pyarrow as pa
import pytest

from deltasieve_protocol.types import LogicalType
from remote_agent import chunks
from remote_agent.adapters import postgres as pg
from remote_agent.adapters.postgres import PostgresAdapter
from remote_agent.adapters.rows import RowConverter
from remote_agent.errors import Forbidden, SourceDataError, SourceUnavailable
from remote_agent.sitequery import validate_site_query
from remote_agent.strategies.fetch import lookup_rows
from remote_agent.timings import Timings
from workloads.postgres import PostgresDatabase

SCHEMA = """
CREATE TABLE vals (
    id bigint PRIMARY KEY, i2 smallint, r real, d double precision, n numeric(6,2), wide numeric,
    t text, c char(3), b bytea, ok boolean, day date, at timestamp, at_tz timestamptz, u uuid
);
INSERT INTO vals VALUES
    (1, -3, 0.1, '-0', 1.25, 1.5, '', 'ab', '\\x00ff', true, '0001-01-01', '2024-03-01 12:30:45.123456',
     '2024-03-01 12:00:00+02', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'),
    (2, NULL, 'NaN', 'NaN', -0.10, NULL, E'a\\nb"c,d', NULL, '', false, '9999-12-31', '0001-01-01', NULL, NULL),
    (3, 7, '-Infinity', 1e308, NULL, 0.00000000005, 'naïve ☃', 'x', NULL, NULL, NULL, NULL,
     '1900-01-01 00:00:00-12', NULL),
    (4, NULL, 16777217, 'Infinity', 9999.99, 'NaN', NULL, NULL, NULL, NULL, 'infinity', NULL, NULL, NULL);
CREATE TABLE floats (k real PRIMARY KEY, v text);
INSERT INTO floats SELECT g / 10.0, g::text FROM generate_series(1, 25) g;
"""


@pytest.fixture(scope="module")
def server(postgres) -> PostgresDatabase:
    with psycopg.connect(postgres.owner_url, autocommit=True) as conn:
        conn.execute(SCHEMA)
    return postgres


@pytest.fixture(scope="module")
def adapter(server) -> PostgresAdapter:
    return PostgresAdapter(server.reader_url, statement_timeout_s=5, arrow_reads=True)


def _scan(adapter: PostgresAdapter, sql: str, key: list[str], *, arrow: bool, chunk_rows: int = 2) -> pa.Table:
    tables = {t.name: t for t in adapter.describe()}
    query = validate_site_query(sql, key, tables, "postgres")
    converter = RowConverter(adapter, query.columns)
    with adapter.session() as session:
        if not arrow:
            session._open_arrow = None  # psycopg's rows and RowConverter, as before the Arrow reads
        scanned = chunks.batches(
            adapter, session, query, converter, chunk_rows=chunk_rows, batch_rows=100, timings=Timings()
        )
        return pa.Table.from_batches(list(scanned), converter.schema)


@pytest.mark.parametrize(
    ("sql", "key"),
    [
        ("SELECT v.id, v.i2, v.r, v.d, v.n, v.t, v.c, v.b, v.ok, v.at, v.at_tz, v.u FROM vals v", ["id"]),
        ("SELECT v.id, v.day FROM vals v WHERE v.id < 4", ["id"]),
        ("SELECT f.k, f.v FROM floats f", ["k"]),  # real keys: the cursor is the shortest text
        ("SELECT v.n, v.id FROM vals v WHERE v.n IS NOT NULL", ["n"]),
        ("SELECT v.at_tz, v.t FROM vals v WHERE v.at_tz IS NOT NULL", ["at_tz"]),
    ],
)
def test_arrow_reads_the_batches_psycopg_rows_make(adapter, sql, key):
    arrow, rows = _scan(adapter, sql, key, arrow=True), _scan(adapter, sql, key, arrow=False)
    assert arrow.schema == rows.schema
    # repr: NaN equals itself, and -0.0 differs from 0.0
    assert repr(arrow.to_pylist()) == repr(rows.to_pylist())


def test_values_the_converter_must_judge_fall_back_to_psycopg(adapter, monkeypatch):
    used = []
    canonical = pg.postgres_arrow.canonical

    def spy(*args):
        result = canonical(*args)
        used.append(result is not None)
        return result

    monkeypatch.setattr(pg.postgres_arrow, "canonical", spy)
    # an unconstrained numeric is the text PostgreSQL prints (no scale to round to, NaN kept), on either path
    for arrow in (True, False):
        table = _scan(adapter, "SELECT v.id, v.wide FROM vals v", ["id"], arrow=arrow, chunk_rows=10)
        assert table.column("wide").to_pylist() == ["1.5", None, "0.00000000005", "NaN"]
    assert used == [True]
    with pytest.raises(SourceDataError, match="infinity"):  # the driver reads it as a day out of range
        _scan(adapter, "SELECT v.id, v.day FROM vals v", ["id"], arrow=True, chunk_rows=10)


def _arrow_settings(adapter: PostgresAdapter) -> dict:
    settings = ["transaction_read_only", "transaction_isolation", "statement_timeout", "TimeZone"]
    sql = "SELECT " + ", ".join(f"current_setting('{s}') AS \"{s}\"" for s in settings)
    with adapter.session() as session, session.read() as reader:
        table = reader.arrow(
            sql, types=[LogicalType("text")] * 4, schema=pa.schema([(s, pa.string()) for s in settings])
        )
    return table.to_pylist()[0]


def test_arrow_reads_are_read_only_repeatable_read_and_bounded(adapter, server):
    assert _arrow_settings(adapter) == {
        "transaction_read_only": "on",
        "transaction_isolation": "repeatable read",
        "statement_timeout": "5s",
        "TimeZone": "UTC",
    }
    text = pa.schema([("x", pa.string())])
    with adapter.session() as session, session.read() as reader:
        with pytest.raises(Exception, match="cannot execute CREATE TABLE in a read-only transaction"):
            reader.arrow("CREATE TABLE evil (x text)", types=[LogicalType("text")], schema=text)
    slow = PostgresAdapter(server.reader_url, statement_timeout_s=0.2, arrow_reads=True)
    with slow.session() as session, session.read() as reader:
        with pytest.raises(SourceUnavailable, match=r"exceeded the 0\.2 s statement timeout"):
            reader.arrow("SELECT pg_sleep(3)::text AS x", types=[LogicalType("text")], schema=text)
        with pytest.raises(Forbidden):
            reader.arrow("SELECT rolname AS x FROM pg_authid", types=[LogicalType("text")], schema=text)


def _lookup(adapter: PostgresAdapter, sql: str, key: list[str], keys: list, *, arrow: bool) -> pa.Table:
    query = validate_site_query(sql, key, {t.name: t for t in adapter.describe()}, "postgres")
    converter = RowConverter(adapter, query.columns)
    with adapter.session() as session:
        if not arrow:
            session._open_arrow = None
        found = list(lookup_rows(adapter, session, query, converter, keys, batch_rows=100, chunk_rows=2))
    return pa.Table.from_batches(found, converter.schema).sort_by([(k, "ascending") for k in key])


@pytest.mark.parametrize(
    ("sql", "key", "keys"),
    [
        ("SELECT v.id, v.i2, v.r, v.d, v.n, v.t, v.b, v.ok, v.at, v.at_tz, v.u FROM vals v", ["id"], [1, 2, 3, 4, 5]),
        ("SELECT v.n, v.id FROM vals v WHERE v.n IS NOT NULL", ["n"], [Decimal("1.25"), Decimal("-0.10")]),
        (
            "SELECT v.at_tz, v.t FROM vals v WHERE v.at_tz IS NOT NULL",
            ["at_tz"],
            [dt.datetime(2024, 3, 1, 10, tzinfo=dt.UTC), dt.datetime(2000, 1, 1, tzinfo=dt.UTC)],
        ),
        ("SELECT v.t, v.id FROM vals v WHERE v.t IS NOT NULL", ["t"], ["", 'a\nb"c,d', "naïve ☃", "absent"]),
        ("SELECT v.b, v.id FROM vals v WHERE v.b IS NOT NULL", ["b"], [b"\x00\xff", b""]),
        ("SELECT v.id, v.day FROM vals v", ["id", "day"], [(1, dt.date(1, 1, 1)), (2, dt.date(9999, 12, 31))]),
    ],
)
def test_lookups_read_the_batches_psycopg_rows_make(adapter, monkeypatch, sql, key, keys):
    read = []
    read_table = pg.postgres_arrow.read_table
    monkeypatch.setattr(pg.postgres_arrow, "read_table", lambda *args: read.append(1) or read_table(*args))
    arrow, rows = _lookup(adapter, sql, key, keys, arrow=True), _lookup(adapter, sql, key, keys, arrow=False)
    assert read, "the lookups never read through ADBC"
    assert arrow.num_rows and repr(arrow.to_pylist()) == repr(rows.to_pylist())


def test_a_chunk_reaches_the_server_as_a_binary_copy_of_its_select(adapter, server):
    marker = "copy-marker-5d1e"
    _scan(adapter, f"SELECT v.id, v.t FROM vals v WHERE v.id <> 0 OR v.t = '{marker}'", ["id"], arrow=True)
    logged = [line for line in server.logfile.read_text(errors="replace").splitlines() if marker in line]
    assert logged and all("reader@" in line for line in logged)
    assert any(re.search(r"execute [^:]+: COPY \(SELECT .+\) TO STDOUT \(FORMAT binary\)$", line) for line in logged)
