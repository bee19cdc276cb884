"""MariaDB spatial values read as extended WKB, byte for byte, through the agent's site query path."""

from __future__ import annotations

import pyarrow as pa
import pytest

from remote_agent import chunks
from remote_agent.adapters.mysql import GEOMETRY_AS_EWKB, MysqlAdapter
from remote_agent.adapters.rows import RowConverter
from remote_agent.sitequery import validate_site_query
from remote_agent.timings import Timings
from tests.support.mariadb_legacy import Owner
from workloads.mariadb import MariadbDatabase

SCHEMA = [
    "CREATE TABLE places (id INT PRIMARY KEY, p POINT, pg POLYGON, g GEOMETRY, p4 POINT REF_SYSTEM_ID=4326)",
    "INSERT INTO places VALUES "
    "(1, ST_GeomFromText('POINT(1 2)'), ST_GeomFromText('POLYGON((0 0,1 0,1 1,0 0))'),"
    " ST_GeomFromText('LINESTRING(0 0,1 1)', 4326), ST_GeomFromText('POINT(3 4)', 4326)),"
    "(2, NULL, ST_GeomFromText('POLYGON((0 0,2 0,0 2,0 0))', 4326), ST_GeomFromText('POINT(-1.5 0)'), NULL)",
    # no key: a multiset, its rows ordered, cut and grouped by what is read
    "CREATE TABLE bag (g GEOMETRY NOT NULL, n INT NOT NULL)",
    "INSERT INTO bag VALUES (ST_GeomFromText('POINT(1 2)'), 1), (ST_GeomFromText('POINT(3 4)', 4326), 1),"
    " (ST_GeomFromText('POINT(1 2)'), 1), (ST_GeomFromText('POINT(1 2)', 4326), 1), (ST_GeomFromText('POINT(1 2)'), 2)",
]

#: Doubles as WKB writes them (little-endian).
D = {0: "0000000000000000", 1: "000000000000f03f", 2: "0000000000000040", 3: "0000000000000840"}
D |= {4: "0000000000001040", -1.5: "000000000000f8bf"}
#: POINT(1 2), SRID 0: plain WKB (byte order 01, type 1).
POINT_0 = bytes.fromhex("0101000000" + D[1] + D[2])
#: POINT(3 4), SRID 4326: type 0x20000001 (the SRID flag), then the SRID, then x and y (PostGIS's ST_AsEWKB).
POINT_4326 = bytes.fromhex("0101000020" + "e6100000" + D[3] + D[4])
#: POLYGON((0 0,1 0,1 1,0 0)), SRID 0: type 3, one ring of four points.
POLYGON_0 = bytes.fromhex(
    "0103000000" + "01000000" + "04000000" + D[0] + D[0] + D[1] + D[0] + D[1] + D[1] + D[0] + D[0]
)
#: POLYGON((0 0,2 0,0 2,0 0)), SRID 4326.
POLYGON_4326 = bytes.fromhex(
    "0103000020" + "e6100000" + "01000000" + "04000000" + D[0] + D[0] + D[2] + D[0] + D[0] + D[2] + D[0] + D[0]
)
#: LINESTRING(0 0,1 1), SRID 4326.
LINE_4326 = bytes.fromhex("0102000020" + "e6100000" + "02000000" + D[0] + D[0] + D[1] + D[1])
#: POINT(1 2), SRID 4326: the same point as POINT_0 in another system, another value.
POINT_1_2_4326 = bytes.fromhex("0101000020" + "e6100000" + D[1] + D[2])
#: POINT(-1.5 0), SRID 0.
POINT_NEG = bytes.fromhex("0101000000" + D[-1.5] + D[0])


def _scan(adapter: MysqlAdapter, sql: str, key: list[str]) -> pa.Table:
    """The site query's rows as the agent reads them, a row a chunk."""
    query = validate_site_query(sql, key, {t.name: t for t in adapter.describe()}, "mysql", adapter.key_order)
    converter = RowConverter(adapter, query.columns, query.where())
    with adapter.session() as session:
        scanned = chunks.batches(adapter, session, query, converter, chunk_rows=1, batch_rows=100, timings=Timings())
        return pa.Table.from_batches(list(scanned), converter.schema)


@pytest.fixture(scope="module")
def server(mariadb: MariadbDatabase) -> MariadbDatabase:
    with Owner(mariadb.owner_url) as c:
        for statement in SCHEMA:
            c.execute(statement)
    return mariadb


def test_spatial_columns_are_described_as_bytes_read_as_ewkb(server):
    adapter = MysqlAdapter(server.reader_url, statement_timeout_s=5)
    places = {t.name: t for t in adapter.describe()}["places"]
    assert {c.name: (str(c.type), c.read_as == GEOMETRY_AS_EWKB) for c in places.columns} == {
        "id": ("int", False),
        "p": ("bytes", True),
        "pg": ("bytes", True),
        "g": ("bytes", True),
        "p4": ("bytes", True),
    }


@pytest.mark.parametrize("arrow", [False, True], ids=["rows", "arrow"])
def test_spatial_values_read_as_the_ewkb_postgis_writes(server, arrow):
    adapter = MysqlAdapter(server.reader_url, statement_timeout_s=5, arrow_reads=arrow)
    table = _scan(adapter, "SELECT x.id, x.p, x.pg, x.g, x.p4 FROM places x", ["id"])
    assert table.column("id").to_pylist() == [1, 2]
    assert table.column("p").to_pylist() == [POINT_0, None]  # a NULL geometry stays NULL
    assert table.column("pg").to_pylist() == [POLYGON_0, POLYGON_4326]
    assert table.column("g").to_pylist() == [LINE_4326, POINT_NEG]
    assert table.column("p4").to_pylist() == [POINT_4326, None]


@pytest.mark.parametrize("arrow", [False, True], ids=["rows", "arrow"])
def test_a_multiset_over_a_spatial_column_is_walked_by_its_ewkb(server, arrow):
    adapter = MysqlAdapter(server.reader_url, statement_timeout_s=5, arrow_reads=arrow)
    grouped = 'SELECT b.g AS g, b.n AS n, COUNT(*) AS "__ds_count" FROM bag b GROUP BY b.g, b.n'
    table = _scan(adapter, grouped, ["g", "n"])
    assert sorted(zip(*(table.column(c).to_pylist() for c in ("g", "n", "__ds_count")))) == sorted(
        [(POINT_0, 1, 2), (POINT_4326, 1, 1), (POINT_1_2_4326, 1, 1), (POINT_0, 2, 1)]
    )
