"""PostgreSQL values without a logical counterpart, read exactly through the agent's site query path.

Each edge is read by a site query (validate_site_query, chunks, RowConverter) on a real
server as the SELECT-only role, through psycopg and through ADBC (`arrow_reads`), and
compared with the exact value of the form docs/sources/postgresql.md promises.
"""

from __future__ import annotations

import psycopg
import pyarrow as pa
import pytest
from sqlglot import exp

from remote_agent import chunks
from remote_agent.adapters.postgres import PostgresAdapter
from remote_agent.adapters.rows import RowConverter
from remote_agent.sitequery import validate_site_query
from remote_agent.timings import Timings
from workloads import postgres as pg_server
from workloads.postgres import PostgresDatabase

SCHEMA = """
CREATE EXTENSION hstore;
CREATE DOMAIN money_text AS numeric;
CREATE TYPE pair AS (a integer, b text);
CREATE TABLE edges (
    id integer PRIMARY KEY,
    n numeric, n_domain money_text, n_fixed numeric(10,2),
    tags text[], grid integer[], addr inet, net cidr, mac macaddr, p pair, h hstore
);
INSERT INTO edges VALUES
    (1, 12345678901234567890.123456789012345, 1.50, 1.50, '{a1,NULL,"c,d"}', '{{1,2},{3,NULL}}',
     '10.0.1.1', '10.0.0.0/8', '08:00:2b:01:02:03', ROW(1, 'b1'), 'a=>1, b=>NULL'),
    (2, 'NaN', 'Infinity', NULL, '{}', '{}', '10.0.0.0/8', '10.1.2.3/32', NULL, ROW(NULL, NULL), ''),
    (3, 'Infinity', '-Infinity', NULL, NULL, NULL, '2001:db8::1', '2001:db8::/32', NULL, NULL, NULL),
    (4, '-Infinity', NULL, NULL, '{"x\\"y"}', '{{{1}}}', '::ffff:10.0.0.1/64', NULL, NULL, ROW(-1, 'x"y'), 'k=>"v,w"'),
    (5, 1.50, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
CREATE TABLE keyed_by_array (tags text[] PRIMARY KEY, v integer);
INSERT INTO keyed_by_array VALUES ('{b}', 1), ('{a,NULL}', 2), ('{}', 3), ('{"c,d"}', 4), ('{a}', 5);
CREATE TABLE bag (n numeric, p pair);  -- no key: a multiset of values the server holds equal (1.5, 1.50)
INSERT INTO bag VALUES (1.5, ROW(1, 'a')), (1.50, ROW(1, 'a')), (1.50, ROW(1, 'a')), (1.5, ROW(2, 'b')),
    ('NaN', ROW(1, 'a')), (2, ROW(NULL, NULL));
"""

#: What each row reads as: the exact value, column by column.
EXPECTED = {
    "n": ["12345678901234567890.123456789012345", "NaN", "Infinity", "-Infinity", "1.50"],
    "n_domain": ["1.50", "Infinity", "-Infinity", None, "0"],
    "tags": ['["a1",null,"c,d"]', "[]", None, '["x\\"y"]', None],
    "grid": ["[[1,2],[3,null]]", "[]", None, "[[[1]]]", None],
    "addr": ["10.0.1.1", "10.0.0.0/8", "2001:db8::1", "::ffff:10.0.0.1/64", None],
    "net": ["10.0.0.0/8", "10.1.2.3/32", "2001:db8::/32", None, None],
    "mac": ["08:00:2b:01:02:03", None, None, None, None],
    "p": ['{"a":1,"b":"b1"}', '{"a":null,"b":null}', None, '{"a":-1,"b":"x\\"y"}', None],
    "h": ['{"a": "1", "b": null}', "{}", None, '{"k": "v,w"}', None],
}


@pytest.fixture(scope="module")
def server(postgres) -> PostgresDatabase:
    with psycopg.connect(postgres.owner_url, autocommit=True) as conn:
        conn.execute(SCHEMA)
    return postgres


def _scan(adapter: PostgresAdapter, sql: str, key: list[str], *, arrow: bool) -> pa.Table:
    query = validate_site_query(sql, key, {t.name: t for t in adapter.describe()}, "postgres", adapter.key_order)
    converter = RowConverter(adapter, query.columns)
    with adapter.session() as session:
        if not arrow:
            session._open_arrow = None  # psycopg's rows and RowConverter
        scanned = chunks.batches(adapter, session, query, converter, chunk_rows=1, batch_rows=100, timings=Timings())
        return pa.Table.from_batches(list(scanned), converter.schema)


def test_the_forms_described(server):
    adapter = PostgresAdapter(server.reader_url, statement_timeout_s=5)
    edges = {t.name: t for t in adapter.describe()}["edges"]
    got = {c.name: (str(c.type), c.declared, c.read_as) for c in edges.columns}
    assert got["n"] == ("text", "numeric", "CAST({col} AS TEXT)")
    assert got["n_domain"] == ("text", "money_text", "CAST({col} AS TEXT)")  # by the domain's base type
    assert got["n_fixed"] == ("decimal(10,2)", "numeric(10,2)", None)
    assert got["tags"] == ("text", "text[]", "CAST(ARRAY_TO_JSON({col}) AS TEXT)")
    assert got["addr"] == ("text", "inet", "TEXTIN(INET_OUT({col}))")
    assert got["net"] == ("text", "cidr", "TEXTIN(CIDR_OUT({col}))")
    assert got["p"] == ("text", "pair", "CAST(TO_JSON({col}) AS TEXT)")  # a composite, told by pg_type.typtype
    assert got["h"] == ("text", "hstore", "CAST(TO_JSON({col}) AS TEXT)")


@pytest.mark.parametrize("arrow", [False, True], ids=["psycopg", "adbc"])
def test_each_edge_reads_as_its_exact_form(server, arrow):
    adapter = PostgresAdapter(server.reader_url, statement_timeout_s=5, arrow_reads=arrow)
    columns = ", ".join(f"e.{c}" for c in EXPECTED)
    table = _scan(adapter, f"SELECT e.id, {columns}, e.n_fixed FROM edges e", ["id"], arrow=arrow)
    assert table.column("id").to_pylist() == [1, 2, 3, 4, 5]
    for name, values in EXPECTED.items():
        assert table.column(name).to_pylist() == values, name
    assert [str(v) for v in table.column("n_fixed").to_pylist()] == ["1.50", "None", "None", "None", "None"]


def test_a_key_read_through_read_as_is_looked_up_and_scanned_by_its_text(server):
    adapter = PostgresAdapter(server.reader_url, statement_timeout_s=5)
    edges = {t.name: t for t in adapter.describe()}["edges"]
    addr = edges.known_column("addr")
    assert adapter.range_key(addr, exp.column("addr", "e"), "edges.addr") is None  # stored order is not the text's
    assert adapter.can_lookup([addr.type])
    query = validate_site_query(
        "SELECT e.addr, e.id FROM edges e WHERE e.addr IS NOT NULL", ["addr"], {"edges": edges}, "postgres"
    )
    with adapter.read() as reader:
        rows = reader.rows(query.lookup_sql(2), ["10.0.1.1", "10.0.0.0/8"], limit=2)
    assert sorted(rows) == [("10.0.0.0/8", 2), ("10.0.1.1", 1)]


@pytest.mark.parametrize("arrow", [False, True], ids=["psycopg", "adbc"])
def test_a_key_read_as_json_is_walked_chunk_by_chunk_by_what_was_read(server, arrow):
    # the cursor binds back the JSON text, which the stored text[] could not be compared with
    adapter = PostgresAdapter(server.reader_url, statement_timeout_s=5, arrow_reads=arrow)
    table = _scan(adapter, "SELECT k.tags, k.v FROM keyed_by_array k", ["tags"], arrow=arrow)
    assert sorted(zip(table.column("tags").to_pylist(), table.column("v").to_pylist())) == [
        ('["a",null]', 2),
        ('["a"]', 5),
        ('["b"]', 1),
        ('["c,d"]', 4),
        ("[]", 3),
    ]


@pytest.mark.parametrize("arrow", [False, True], ids=["psycopg", "adbc"])
def test_a_multiset_tells_apart_the_texts_the_server_holds_equal(server, arrow):
    adapter = PostgresAdapter(server.reader_url, statement_timeout_s=5, arrow_reads=arrow)
    grouped = 'SELECT b.n AS n, b.p AS p, COUNT(*) AS "__ds_count" FROM bag b GROUP BY b.n, b.p'
    table = _scan(adapter, grouped, ["n", "p"], arrow=arrow)
    rows = zip(table.column("n").to_pylist(), table.column("p").to_pylist(), table.column("__ds_count").to_pylist())
    assert sorted(rows) == [
        ("1.5", '{"a":1,"b":"a"}', 1),
        ("1.5", '{"a":2,"b":"b"}', 1),
        ("1.50", '{"a":1,"b":"a"}', 2),
        ("2", '{"a":null,"b":null}', 1),
        ("NaN", '{"a":1,"b":"a"}', 1),
    ]


# -- PostGIS ------------------------------------------------------------------------------

#: PostGIS's extended WKB of SRID=4326;POINT(3 4): little-endian, type 1 with the SRID flag, SRID 4326, x, y.
POINT_4326 = bytes.fromhex("0101000020e6100000" + "0000000000000840" + "0000000000001040")
#: Plain WKB of POINT(1 2), SRID 0: no flag, no SRID.
POINT_0 = bytes.fromhex("0101000000" + "000000000000f03f" + "0000000000000040")


@pytest.fixture(scope="module")
def postgis(server) -> PostgresDatabase:
    """The module's database with PostGIS (Debian's postgresql-<major>-postgis-3, installed when missing)."""
    pg_server.ensure_postgis()
    with psycopg.connect(server.owner_url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION postgis")
        conn.execute(
            "CREATE TABLE places (id integer PRIMARY KEY, g geometry, p geometry(Point, 4326), gg geography);"
            "INSERT INTO places VALUES"
            " (1, 'POINT(1 2)', 'SRID=4326;POINT(3 4)', 'SRID=4326;POINT(3 4)'),"
            " (2, 'SRID=4326;POINT(3 4)', NULL, NULL)"
        )
    return server


@pytest.mark.parametrize("arrow", [False, True], ids=["psycopg", "adbc"])
def test_postgis_values_read_as_extended_wkb(postgis, arrow):
    adapter = PostgresAdapter(postgis.reader_url, statement_timeout_s=5, arrow_reads=arrow)
    places = {t.name: t for t in adapter.describe()}["places"]
    assert {c.name: (str(c.type), c.read_as) for c in places.columns} == {
        "id": ("int", None),
        "g": ("bytes", "ST_AsEWKB({col})"),
        "p": ("bytes", "ST_AsEWKB({col})"),
        "gg": ("bytes", "ST_AsEWKB(CAST({col} AS geometry))"),
    }
    table = _scan(adapter, "SELECT x.id, x.g, x.p, x.gg FROM places x", ["id"], arrow=arrow)
    assert table.column("g").to_pylist() == [POINT_0, POINT_4326]
    assert table.column("p").to_pylist() == [POINT_4326, None]
    assert table.column("gg").to_pylist() == [POINT_4326, None]
