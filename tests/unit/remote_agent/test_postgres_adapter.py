"""The PostgreSQL adapter against a real server, read through a SELECT-only role."""

from __future__ import annotations

import datetime as dt
import threading
from decimal import Decimal
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from sqlglot import exp

from deltasieve_protocol.types import LogicalType
from remote_agent.adapters import open_adapter
from remote_agent.adapters.base import TableInfo
from remote_agent.adapters.postgres import PostgresAdapter, logical_type
from remote_agent.adapters.postgres_types import ARRAY_AS_JSON, CAST_TO_TEXT
from remote_agent.errors import BadRequest, Forbidden, SourceUnavailable
from workloads.postgres import PostgresDatabase

UTC = dt.UTC

SCHEMA = """
CREATE DOMAIN cents AS numeric(12,2);
CREATE DOMAIN positive_cents AS cents CHECK (VALUE > 0);
CREATE TABLE everything (
    id bigint PRIMARY KEY,
    small smallint,
    i integer,
    price numeric(10,2),
    amount numeric,
    huge numeric(50,4),
    r real,
    d double precision,
    name text,
    code varchar(10) UNIQUE,
    flag char(3),
    data bytea,
    ok boolean,
    day date,
    at timestamp,
    at_tz timestamptz,
    uid uuid,
    doc jsonb,
    tags integer[],
    fee positive_cents,
    UNIQUE (small, i)
);
CREATE UNIQUE INDEX everything_lower_name ON everything (lower(name));       -- expression: not a key
CREATE UNIQUE INDEX everything_partial ON everything (d) WHERE d > 0;        -- partial: not a key
CREATE UNIQUE INDEX everything_included ON everything (uid) INCLUDE (name);  -- key is (uid)
INSERT INTO everything VALUES
    (1, -32768, 2147483647, 12345678.91, 12345.678901234567, 1234567890123456789012345678901234567890.1234,
     0.1, '-0', 'naïve ☃ 𝄞', 'a%b', 'x', '\\x00ff10', true, '2024-02-29', '2024-03-01 12:30:45.123456',
     '2024-03-01 12:00:00+02', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"k": [1, 2]}', '{1,2,3}', 9.5),
    (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
     NULL, NULL, NULL, NULL);
"""

PAIRS = """
CREATE TABLE pairs (a integer NOT NULL, b text NOT NULL, v text, PRIMARY KEY (b, a));
INSERT INTO pairs VALUES (1, 'x', 'one-x'), (2, 'x', 'two-x'), (1, 'y', 'one-y');
CREATE TABLE big (id integer PRIMARY KEY, payload text NOT NULL);
INSERT INTO big SELECT g, md5(g::text) FROM generate_series(1, 20000) g;
CREATE TABLE measures (id integer NOT NULL, taken date NOT NULL, value double precision) PARTITION BY RANGE (taken);
CREATE TABLE measures_2024 PARTITION OF measures FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
CREATE VIEW everything_view AS SELECT id FROM everything;
CREATE TABLE secret (id integer PRIMARY KEY, pin text);
REVOKE SELECT ON secret FROM reader;
CREATE TABLE dropped_col (id integer PRIMARY KEY, gone text, kept text);
ALTER TABLE dropped_col DROP COLUMN gone;
"""


@pytest.fixture(scope="module")
def server(postgres) -> PostgresDatabase:
    with psycopg.connect(postgres.owner_url, autocommit=True) as conn:
        conn.execute(SCHEMA)
        conn.execute(PAIRS)
    return postgres


@pytest.fixture(scope="module")
def adapter(server) -> PostgresAdapter:
    return PostgresAdapter(server.reader_url, statement_timeout_s=5)


@pytest.fixture(scope="module")
def tables(adapter) -> dict[str, TableInfo]:
    return {t.name: t for t in adapter.describe()}


def _select(table: TableInfo) -> str:
    """SELECT of every column, through its `read_as` where it has one, ordered by key."""
    cols = [c.read_as.format(col=_q(c.name)) if c.read_as else _q(c.name) for c in table.columns]
    return f"SELECT {', '.join(cols)} FROM {_q(table.name)} ORDER BY {', '.join(map(_q, table.primary_key))}"


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _read_all(adapter: PostgresAdapter, table: TableInfo) -> list[tuple]:
    converters = [adapter.converter(c) for c in table.columns]
    with adapter.read() as reader:
        return [tuple(f(v) for f, v in zip(converters, row)) for rows in reader.stream(_select(table)) for row in rows]


def _with_password(url: str, password: str) -> str:
    parts = urlsplit(url)
    netloc = f"{parts.username}:{password}@{parts.hostname}:{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))


# -- type mapping -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "declared, kind, read_as",
    [
        ("smallint", "int", None),
        ("integer", "int", None),
        ("double precision", "float", None),
        ("real", "float", None),
        ("numeric(2,5)", "decimal(5,5)", None),
        ("numeric(38,38)", "decimal(38,38)", None),
        ("numeric(39,0)", "text", CAST_TO_TEXT),
        ("character(3)", "text", None),
        ("character varying", "text", None),
        ("name", "text", None),
        ("public.citext", "text", None),
        ("bytea", "bytes", None),
        ("boolean", "bool", None),
        ("date", "date", None),
        ("timestamp without time zone", "timestamp", None),
        ("timestamp(0) without time zone", "timestamp", None),
        ("timestamp with time zone", "timestamptz", None),
        ("time without time zone", "text", CAST_TO_TEXT),
        ("interval", "text", CAST_TO_TEXT),
        ("jsonb", "text", CAST_TO_TEXT),
        ("text[]", "text", ARRAY_AS_JSON),
        ("numeric", "text", CAST_TO_TEXT),
        ("mood", "text", CAST_TO_TEXT),
    ],
)
def test_logical_type(declared, kind, read_as):
    assert logical_type(declared) == (LogicalType.parse(kind), read_as)


# -- describe -----------------------------------------------------------------------------


def test_describe_lists_readable_tables_only(tables):
    # Tables, partitioned tables, their partitions and views are in; `secret` is not granted.
    assert sorted(tables) == [
        "big",
        "dropped_col",
        "everything",
        "everything_view",
        "measures",
        "measures_2024",
        "pairs",
    ]
    kinds = {name: (t.kind, t.parent) for name, t in tables.items() if t.kind != "table"}
    assert kinds == {"everything_view": ("view", None), "measures_2024": ("partition", "measures")}
    assert tables["measures"].parent is None


def test_describe_columns_and_types(tables):
    everything = tables["everything"]
    got = {c.name: (str(c.type), c.declared, c.nullable, c.read_as) for c in everything.columns}
    assert got == {
        "id": ("int", "bigint", False, None),
        "small": ("int", "smallint", True, None),
        "i": ("int", "integer", True, None),
        "price": ("decimal(10,2)", "numeric(10,2)", True, None),
        "amount": ("text", "numeric", True, CAST_TO_TEXT),  # exact, as PostgreSQL prints it
        "huge": ("text", "numeric(50,4)", True, CAST_TO_TEXT),
        "r": ("float", "real", True, None),
        "d": ("float", "double precision", True, None),
        "name": ("text", "text", True, None),
        "code": ("text", "character varying(10)", True, None),
        "flag": ("text", "character(3)", True, None),
        "data": ("bytes", "bytea", True, None),
        "ok": ("bool", "boolean", True, None),
        "day": ("date", "date", True, None),
        "at": ("timestamp", "timestamp without time zone", True, None),
        "at_tz": ("timestamptz", "timestamp with time zone", True, None),
        "uid": ("text", "uuid", True, CAST_TO_TEXT),
        "doc": ("text", "jsonb", True, CAST_TO_TEXT),
        "tags": ("text", "integer[]", True, ARRAY_AS_JSON),
        "fee": ("decimal(12,2)", "positive_cents", True, None),  # by the domain's base type
    }
    assert [c.name for c in everything.columns][:3] == ["id", "small", "i"]  # attnum order
    assert [c.name for c in tables["dropped_col"].columns] == ["id", "kept"]


def test_describe_keys(tables):
    everything = tables["everything"]
    assert everything.primary_key == ("id",)
    # Expression and partial unique indexes are no keys; INCLUDE columns are not part of one.
    assert sorted(everything.unique_keys) == [("code",), ("small", "i"), ("uid",)]
    assert tables["pairs"].primary_key == ("b", "a")  # index column order, not table order
    assert tables["pairs"].unique_keys == ()
    assert tables["measures"].primary_key == ()


# -- reading ------------------------------------------------------------------------------


def test_read_converts_to_canonical_values(adapter, tables):
    rows = _read_all(adapter, tables["everything"])
    assert rows[0] == (
        1,
        -32768,
        2147483647,
        Decimal("12345678.91"),
        "12345.678901234567",  # every digit: numeric without a precision has no scale to round to
        "1234567890123456789012345678901234567890.1234",
        0.1,
        -0.0,
        "naïve ☃ 𝄞",
        "a%b",
        "x  ",
        b"\x00\xff\x10",
        True,
        dt.date(2024, 2, 29),
        dt.datetime(2024, 3, 1, 12, 30, 45, 123456),
        dt.datetime(2024, 3, 1, 10, 0, tzinfo=UTC),
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        '{"k": [1, 2]}',
        "[1,2,3]",
        Decimal("9.50"),
    )
    assert rows[1] == (2,) + (None,) * 19
    assert type(rows[0][11]) is bytes
    assert str(rows[0][7]) == "-0.0"
    assert rows[0][15].utcoffset() == dt.timedelta(0)


def test_read_composite_key_table(adapter, tables):
    assert _read_all(adapter, tables["pairs"]) == [(1, "x", "one-x"), (2, "x", "two-x"), (1, "y", "one-y")]


def test_stream_binds_params_and_keeps_literal_percents(adapter):
    sql = "SELECT id, code FROM everything WHERE code LIKE 'a%' AND id % 2 = 1 AND id = %s"
    with adapter.read() as reader:
        assert [r for rows in reader.stream(sql, [1]) for r in rows] == [(1, "a%b")]
        # Without parameters the text goes to the server as it is.
        assert [r for rows in reader.stream("SELECT '100%'") for r in rows] == [("100%",)]


def test_stream_fetches_in_batches_through_a_server_side_cursor(adapter, server):
    with adapter.read() as reader:
        [[(pid,)]] = reader.stream("SELECT pg_backend_pid()")
        batches = list(reader.stream("SELECT id, payload FROM big ORDER BY id", fetch_rows=1000))
    assert len(batches) == 20
    assert all(len(b) == 1000 for b in batches)
    assert [b[0][0] for b in batches[:3]] == [1, 1001, 2001]
    log = server.logfile.read_text(encoding="utf-8", errors="replace")
    ours = [line for line in log.splitlines() if f"[{pid}] reader@{server.name} " in line]
    ours = ours[max(i for i, line in enumerate(ours) if "pg_backend_pid" in line) :]  # in case the pid was reused
    assert any("CURSOR FOR SELECT id, payload FROM big" in line for line in ours)
    # One FETCH per list, and one more that finds the end.
    assert sum("FETCH FORWARD 1000" in line for line in ours) == 21


def test_one_read_sees_one_snapshot(adapter, server):
    with adapter.read() as reader:
        before = list(reader.stream("SELECT count(*) FROM pairs"))
        with psycopg.connect(server.owner_url, autocommit=True) as owner:
            owner.execute("INSERT INTO pairs VALUES (9, 'z', 'late')")
        try:
            assert list(reader.stream("SELECT count(*) FROM pairs")) == before
        finally:
            with psycopg.connect(server.owner_url, autocommit=True) as owner:
                owner.execute("DELETE FROM pairs WHERE a = 9")
    with adapter.read() as reader:
        assert list(reader.stream("SELECT count(*) FROM pairs")) == [[(3,)]]


def test_source_snapshot_on_a_primary_and_without_the_functions(adapter, server):
    """On a primary: the identity and the WAL insert position, no replayed one (a standby's:
    tests/integration/test_row_version_replica.py). A server that revoked a WAL function from
    the reader gives neither identity nor positions, and still the snapshot."""
    with adapter.session() as session:
        snap = adapter.source_snapshot(session)
    assert snap["system_identifier"] and snap["wal_lsn"] > 0 and snap["replayed_lsn"] is None, snap
    with psycopg.connect(server.owner_url, autocommit=True) as owner:
        owner.execute("REVOKE EXECUTE ON FUNCTION pg_current_wal_insert_lsn() FROM PUBLIC")
        try:
            with adapter.session() as session:
                bare = adapter.source_snapshot(session)
        finally:
            owner.execute("GRANT EXECUTE ON FUNCTION pg_current_wal_insert_lsn() TO PUBLIC")
    assert (bare["system_identifier"], bare["wal_lsn"], bare["replayed_lsn"]) == (None, None, None), bare
    assert bare["xmax"] >= snap["xmax"], bare


def test_session_is_read_only_repeatable_read(adapter):
    with adapter.read() as reader:
        settings = list(
            reader.stream(
                "SELECT current_setting('transaction_read_only'), current_setting('transaction_isolation'), current_setting('TimeZone')"
            )
        )
    assert settings == [[("on", "repeatable read", "UTC")]]


@pytest.mark.parametrize(
    "statement", ["INSERT INTO pairs VALUES (7, 'w', 'no')", "CREATE TEMP TABLE scratch (x integer)"]
)
@pytest.mark.parametrize("role", ["reader", "owner"])
def test_writes_fail_inside_read(server, statement, role):
    # Even the owner, who may write, cannot through the adapter: the transaction is read-only.
    adapter = PostgresAdapter(server.reader_url if role == "reader" else server.owner_url, statement_timeout_s=5)
    with adapter.read() as reader:
        list(reader.stream("SELECT 1"))
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            reader.conn.execute(statement)
    with psycopg.connect(server.owner_url) as owner:
        assert owner.execute("SELECT count(*) FROM pairs WHERE a = 7").fetchone() == (0,)


def test_describe_other_schemas_by_schema_and_table(adapter, server):
    with psycopg.connect(server.owner_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA erp")
        conn.execute("GRANT USAGE ON SCHEMA erp TO reader")
        conn.execute('CREATE TABLE erp.pairs (no integer PRIMARY KEY, label text COLLATE "C")')
        conn.execute("CREATE TABLE erp.hidden (id integer PRIMARY KEY)")
        conn.execute("GRANT SELECT ON erp.pairs TO reader")
    assert [t.name for t in adapter.describe()] == [t.name for t in adapter.describe(["nope"])]
    described = {t.name: t for t in adapter.describe(["erp", "public"])}
    erp = described["erp.pairs"]
    assert (erp.schema, erp.path, erp.primary_key, [c.name for c in erp.columns]) == (
        "erp",
        ("erp", "pairs"),
        ("no",),
        ["no", "label"],
    )
    assert "erp.hidden" not in described  # no SELECT: left out, as in the default schema
    # a table of the search path asked for by its schema comes twice, once by each name
    assert described["pairs"].schema is None and described["public.pairs"].columns == described["pairs"].columns
    label = erp.known_column("label")
    assert adapter.range_key(label, exp.column("label"), "erp.pairs.label") == exp.column("label")  # byte-wise already


def test_table_without_select_privilege_is_hidden_and_refused(adapter, tables):
    assert "secret" not in tables
    with adapter.read() as reader, pytest.raises(Forbidden, match="permission denied"):
        list(reader.stream("SELECT * FROM secret"))


def test_statement_timeout(server):
    adapter = PostgresAdapter(server.reader_url, statement_timeout_s=0.2)
    with adapter.read() as reader, pytest.raises(SourceUnavailable, match=r"exceeded the 0\.2 s statement timeout"):
        list(reader.stream("SELECT pg_sleep(3)"))


# -- connecting ---------------------------------------------------------------------------


def test_wrong_password_is_unavailable_and_not_echoed(server):
    wrong = "Wr0ngSecretPassw0rd"
    adapter = open_adapter(_with_password(server.reader_url, wrong), statement_timeout_s=5)
    with pytest.raises(SourceUnavailable) as info:
        adapter.check()
    assert "password authentication failed" in info.value.message
    assert wrong not in str(info.value) and wrong not in repr(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_unreachable_port_is_unavailable(server):
    real_password = urlsplit(server.reader_url).password
    url = server.reader_url.replace(f":{server.port}/", ":1/")
    adapter = PostgresAdapter(url.replace("postgresql://", "postgres://"), statement_timeout_s=5)
    with pytest.raises(
        SourceUnavailable, match=f"cannot connect to PostgreSQL at 127.0.0.1:1/{server.name} as reader"
    ) as info:
        adapter.describe()
    assert real_password not in str(info.value)


def test_malformed_url_is_a_bad_request():
    with pytest.raises(BadRequest):
        PostgresAdapter("postgresql://u:p@host:notaport:5/db?bogus", statement_timeout_s=1)


def test_registry_opens_postgres_urls(server):
    assert isinstance(open_adapter(server.reader_url, statement_timeout_s=1), PostgresAdapter)
    assert open_adapter(server.reader_url, statement_timeout_s=1).dialect == "postgres"


def test_reads_run_concurrently(adapter):
    # The agent serves requests from threads: each read() has its own connection.
    results: list[int] = []

    def count() -> None:
        with adapter.read() as reader:
            results.append(sum(len(b) for b in reader.stream("SELECT id FROM big", fetch_rows=5000)))

    threads = [threading.Thread(target=count) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [20000] * 4
