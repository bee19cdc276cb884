"""Values stored in SQLite as an application would, read by the agent, encode as the vectors say."""

from __future__ import annotations

import datetime as dt
import sqlite3

import pytest

from deltasieve_protocol.encoding import encode_rows
from deltasieve_protocol.types import Column
from remote_agent.adapters.rows import RowConverter
from remote_agent.adapters.sqlite import SqliteAdapter
from tests.support.vectors import VECTORS, value

DECLARED = {
    "int": "INTEGER",
    "float": "REAL",
    "text": "TEXT",
    "bytes": "BLOB",
    "bool": "BOOLEAN",
    "date": "DATE",
    "timestamp": "TIMESTAMP",
    "timestamptz": "TIMESTAMPTZ",
}


def stored(type_: str, v):
    """How an application typically stores the value in SQLite."""
    py = value(type_, v)
    if py is None:
        return None
    if isinstance(py, bool):
        return int(py)
    if isinstance(py, dt.datetime):
        return py.isoformat(sep=" ")
    if isinstance(py, dt.date):
        return py.isoformat()
    if type_.startswith("decimal"):
        return str(py)
    return py


def representable(case) -> bool:
    # SQLite turns NaN into NULL, and keeps decimals as 8-byte floats (about 15 digits).
    if case["type"] == "float" and case["value"] == "NaN":
        return False
    if (
        case["type"].startswith("decimal")
        and case["value"] is not None
        and len(case["value"].replace("-", "").replace(".", "")) > 15
    ):
        return False
    return True


CASES = [c for c in VECTORS["values"] if representable(c)]


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("vectors") / "v.db"
    with sqlite3.connect(path) as conn:
        for i, case in enumerate(CASES):
            kind = case["type"].split("(")[0]
            declared = case["type"].upper() if kind == "decimal" else DECLARED[kind]
            conn.execute(f"CREATE TABLE t{i} (id INTEGER PRIMARY KEY, v {declared})")
            conn.execute(f"INSERT INTO t{i} VALUES (1, ?)", (stored(case["type"], case["value"]),))
    return path


@pytest.mark.parametrize("i", range(len(CASES)), ids=lambda i: f"{CASES[i]['type']}:{CASES[i]['value']!r}")
def test_sqlite_values_encode_like_the_vectors(db, i):
    case = CASES[i]
    adapter = SqliteAdapter(f"sqlite:///{db}", statement_timeout_s=10)
    table = next(t for t in adapter.describe() if t.name == f"t{i}")
    column = table.column("v")
    assert str(column.type) == case["type"]
    with adapter.read() as reader:
        rows = [r for chunk in reader.stream(f'SELECT "v" FROM "t{i}"') for r in chunk]
    batch = RowConverter(adapter, [column]).batch(rows, [])
    assert encode_rows(batch, [Column("v", column.type)])[0].hex() == case["encoding"]
