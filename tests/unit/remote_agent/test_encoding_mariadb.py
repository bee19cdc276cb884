"""Values stored in MariaDB, read by the agent through a SELECT-only role, encode as the vectors say.

MariaDB cannot hold some of the vectors' values: a DOUBLE holds no NaN or infinity, a
TIMESTAMP no instant before 1970. The test shows the server refuses each of those, so
the list of values left out stays honest.
"""

from __future__ import annotations

import MySQLdb
import pytest

from deltasieve_protocol.encoding import encode_rows
from deltasieve_protocol.types import Column
from remote_agent.adapters.mysql import MysqlAdapter
from remote_agent.adapters.rows import RowConverter
from tests.support.mariadb_legacy import Owner
from tests.support.vectors import VECTORS, value

DECLARED = {
    "int": "BIGINT",
    "float": "DOUBLE",
    "text": "TEXT",
    "bytes": "BLOB",
    "bool": "BIT(1)",
    "date": "DATE",
    "timestamp": "DATETIME(6)",
    "timestamptz": "TIMESTAMP(6) NULL",
}
CASES = VECTORS["values"]


def _unstorable(case: dict) -> bool:
    kind, v = case["type"].split("(")[0], case["value"]
    if kind == "float" and v in ("NaN", "inf", "-inf"):
        return True
    return kind == "timestamptz" and v is not None and value(case["type"], v).year < 1970


@pytest.fixture(scope="module")
def stored(mariadb):
    """Each storable case in a table of its own; the others, refused by the server."""
    refused = []
    with Owner(mariadb.owner_url) as c:
        c.execute("SET SESSION sql_mode = 'STRICT_ALL_TABLES', time_zone = '+00:00'")
        for i, case in enumerate(CASES):
            kind = case["type"].split("(")[0]
            declared = case["type"].upper() if kind == "decimal" else DECLARED[kind]
            c.execute(f"CREATE TABLE t{i} (id INT PRIMARY KEY, v {declared})")
            v = value(case["type"], case["value"])
            if kind == "bool" and v is not None:
                v = bytes([v])
            try:
                c.execute(f"INSERT INTO t{i} VALUES (1, %s)", (v,))
            except MySQLdb.Error:
                refused.append(i)
    return mariadb, refused


def test_mariadb_values_encode_like_the_vectors(stored):
    mariadb, refused = stored
    assert refused == [i for i, case in enumerate(CASES) if _unstorable(case)]
    adapter = MysqlAdapter(mariadb.reader_url, statement_timeout_s=10)
    tables = {t.name: t for t in adapter.describe()}
    checked = 0
    with adapter.read() as reader:
        for i, case in enumerate(CASES):
            if i in refused:
                continue
            column = tables[f"t{i}"].column("v")
            assert str(column.type) == case["type"], case
            select = (column.read_as or "{col}").format(col="`v`")
            rows = [r for chunk in reader.stream(f"SELECT {select} FROM `t{i}`") for r in chunk]
            batch = RowConverter(adapter, [column]).batch(rows, [])
            assert encode_rows(batch, [Column("v", column.type)])[0].hex() == case["encoding"], case
            checked += 1
    assert checked > 40
