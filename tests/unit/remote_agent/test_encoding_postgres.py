"""Values stored in PostgreSQL, read by the agent through a SELECT-only role, encode as the vectors say."""

from __future__ import annotations

import psycopg
import pytest

from deltasieve_protocol.encoding import encode_rows
from deltasieve_protocol.types import Column
from remote_agent.adapters.postgres import PostgresAdapter
from remote_agent.adapters.rows import RowConverter
from tests.support.vectors import VECTORS, value

DECLARED = {
    "int": "bigint",
    "float": "double precision",
    "text": "text",
    "bytes": "bytea",
    "bool": "boolean",
    "date": "date",
    "timestamp": "timestamp",
    "timestamptz": "timestamptz",
}
CASES = VECTORS["values"]


@pytest.fixture(scope="module")
def server(postgres):
    with psycopg.connect(postgres.owner_url, autocommit=True) as conn:
        for i, case in enumerate(CASES):
            kind = case["type"].split("(")[0]
            declared = case["type"].replace("decimal", "numeric") if kind == "decimal" else DECLARED[kind]
            conn.execute(f"CREATE TABLE t{i} (id integer PRIMARY KEY, v {declared})")
            conn.execute(f"INSERT INTO t{i} VALUES (1, %s)", (value(case["type"], case["value"]),))
    return postgres


def test_postgres_values_encode_like_the_vectors(server):
    adapter = PostgresAdapter(server.reader_url, statement_timeout_s=10)
    tables = {t.name: t for t in adapter.describe()}
    with adapter.read() as reader:
        for i, case in enumerate(CASES):
            column = tables[f"t{i}"].column("v")
            assert str(column.type) == case["type"], case
            rows = [r for chunk in reader.stream(f'SELECT "v" FROM "t{i}"') for r in chunk]
            batch = RowConverter(adapter, [column]).batch(rows, [])
            assert encode_rows(batch, [Column("v", column.type)])[0].hex() == case["encoding"], case
