"""Key fingerprints of decimal and date keys: the agent and the warehouse agree.

The agent fingerprints the rows its adapter converted from what the driver hands over
(SQLite: REAL or INTEGER in a DECIMAL column, ISO text in a DATE one; psycopg: a Decimal at
the column's scale, a date). The warehouse fingerprints the same keys read back from
Parquet, in batches of whatever length and offset Spark hands over. Both must give the
same 64 bits for the same key, whichever encoding path (on whole Arrow arrays, or value by
value for decimals wider than an int64) each side takes. The Spark half is in
tests/unit/warehouse/test_encoding_spark.py.
"""

from __future__ import annotations

import io
import sqlite3
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import xxhash

from deltasieve_protocol.encoding import encode_value
from deltasieve_protocol.fingerprints import key_fingerprints, row_fingerprints
from deltasieve_protocol.types import Column, LogicalType
from remote_agent.adapters.base import ColumnInfo
from remote_agent.adapters.postgres import PostgresAdapter
from remote_agent.adapters.rows import RowConverter
from remote_agent.adapters.sqlite import SqliteAdapter
from tests.support.legacy import KEY_DAYS_SPECIAL

SEED = 0x5EED_F1A9

#: SQLite keeps these in a DECIMAL(10,2) column as INTEGER (0, 100) or REAL.
SQLITE_PRICES = [0, 0.01, -0.01, 100, 1.1, 12.5, -6282.35, 99999999.99, -99999999.99]
DAYS = KEY_DAYS_SPECIAL
#: What psycopg hands over for a numeric(19,4) column: Decimals at the column's scale.
PG_PRICES = [Decimal(v) for v in ("0.0000", "0.0001", "-0.0001", "100.0000", "1.1000", "999999999999999.9999")] + [
    Decimal("-999999999999999.9999"),
    Decimal("12345678901234.5678"),
]


def _key(*pairs: tuple[str, str]) -> list[Column]:
    return [Column(name, LogicalType.parse(type_)) for name, type_ in pairs]


def _through_parquet(table: pa.Table) -> pa.Table:
    """The keys as the warehouse reads them back (the returned rows, the fragment)."""
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return pq.read_table(io.BytesIO(sink.getvalue()))


def _warehouse_side(values: dict[str, list], key: list[Column]) -> list[np.ndarray]:
    """The fingerprints of the same keys, built from their canonical values as the warehouse
    holds them: one table after a Parquet round trip, and one-row slices (offset > 0)."""
    table = _through_parquet(pa.table({c.name: pa.array(values[c.name], c.type.arrow()) for c in key}))
    whole = key_fingerprints(table, key, SEED)
    batch = table.combine_chunks().to_batches()[0]
    sliced = np.concatenate([key_fingerprints(batch.slice(i, 1), key, SEED) for i in range(batch.num_rows)])
    return [whole, sliced]


def _read_sqlite(tmp_path, ddl: str, rows: list[tuple], select: str) -> tuple[pa.RecordBatch, list[Column]]:
    """The rows as the agent sees them: its SQLite adapter's types and converters."""
    path = tmp_path / "keys.db"
    with sqlite3.connect(path) as c:
        c.execute(ddl)
        c.executemany(f"INSERT INTO t VALUES ({', '.join('?' * len(rows[0]))})", rows)
    adapter = SqliteAdapter(f"sqlite:///{path}", statement_timeout_s=5)
    (table,) = adapter.describe()
    converter = RowConverter(adapter, table.columns)
    with adapter.read() as reader:
        raw = reader.rows(select, limit=len(rows))
    key = [Column(c.name, c.type) for c in table.columns if c.name in table.primary_key]
    key.sort(key=lambda c: table.primary_key.index(c.name))
    return converter.batch(raw, table.primary_key), key


def test_sqlite_decimal_key_stored_as_real_or_integer(tmp_path):
    batch, key = _read_sqlite(
        tmp_path,
        "CREATE TABLE t (price DECIMAL(10,2) NOT NULL PRIMARY KEY, note TEXT)",
        [(p, "x") for p in SQLITE_PRICES],
        "SELECT price, note FROM t ORDER BY rowid",
    )
    assert [str(c.type) for c in key] == ["decimal(10,2)"]
    agent = key_fingerprints(batch, key, SEED)
    canonical = [Decimal(repr(float(p))).quantize(Decimal("0.01")) for p in SQLITE_PRICES]
    assert batch.column("price").to_pylist() == canonical
    for warehouse in _warehouse_side({"price": canonical}, key):
        assert agent.tolist() == warehouse.tolist()
    assert len(set(agent.tolist())) == len(SQLITE_PRICES)


def test_sqlite_date_and_integer_key_with_the_date_stored_as_text(tmp_path):
    rows = [(d.isoformat(), b, None) for d in DAYS for b in (1, 2)]
    batch, key = _read_sqlite(
        tmp_path,
        "CREATE TABLE t (day DATE NOT NULL, branch INTEGER NOT NULL, memo TEXT, PRIMARY KEY (day, branch))",
        rows,
        "SELECT day, branch, memo FROM t ORDER BY rowid",
    )
    assert [str(c.type) for c in key] == ["date", "int"]
    agent = key_fingerprints(batch, key, SEED)
    days = [d for d in DAYS for _ in (1, 2)]
    branches = [b for _ in DAYS for b in (1, 2)]
    for warehouse in _warehouse_side({"day": days, "branch": branches}, key):
        assert agent.tolist() == warehouse.tolist()
    assert len(set(agent.tolist())) == len(rows)


@pytest.mark.parametrize("type_", ["decimal(19,4)", "decimal(12,4)", "decimal(38,10)"])
def test_postgres_decimal_key(type_):
    """numeric(19,4) is wider than an int64 (value by value on both sides); numeric(12,4)
    takes the Arrow path; numeric(38,10) is the widest decimal (an unconstrained numeric is text)."""
    key = _key(("price", type_))
    values = PG_PRICES if type_ != "decimal(12,4)" else [v for v in PG_PRICES if abs(v) < 10**8]
    adapter = PostgresAdapter("postgresql://reader@localhost/legacy", statement_timeout_s=5)
    converter = RowConverter(adapter, [ColumnInfo("price", key[0].type, nullable=False, declared="numeric")])
    batch = converter.batch([(v,) for v in values], ["price"])
    agent = key_fingerprints(batch, key, SEED)
    for warehouse in _warehouse_side({"price": [v.normalize() for v in values]}, key):
        assert agent.tolist() == warehouse.tolist()
    assert len(set(agent.tolist())) == len(values)


def test_postgres_date_key():
    key = _key(("day", "date"))
    adapter = PostgresAdapter("postgresql://reader@localhost/legacy", statement_timeout_s=5)
    converter = RowConverter(adapter, [ColumnInfo("day", key[0].type, nullable=False, declared="date")])
    agent = key_fingerprints(converter.batch([(d,) for d in DAYS], ["day"]), key, SEED)
    for warehouse in _warehouse_side({"day": DAYS}, key):
        assert agent.tolist() == warehouse.tolist()
    date64 = pa.table({"day": pa.array(DAYS, pa.date64())})
    assert key_fingerprints(date64, key, SEED).tolist() == agent.tolist()


def test_a_decimal_key_is_fingerprinted_by_its_value_whatever_its_shape_and_path():
    """The encoding path depends on the precision (int64 or not); the fingerprint must not."""
    values = [Decimal("0"), Decimal("-0.01"), Decimal("1.1"), Decimal("100"), Decimal("-6282.35")]
    prints = []
    for type_ in ("decimal(10,2)", "decimal(18,2)", "decimal(19,4)", "decimal(38,10)"):
        key = _key(("price", type_))
        prints.append(key_fingerprints(pa.table({"price": pa.array(values, key[0].type.arrow())}), key, SEED).tolist())
        assert prints[-1] == [_by_definition(key, [v]) for v in values], type_
    assert all(p == prints[0] for p in prints)


def _by_definition(key: list[Column], values: list) -> int:
    """The fingerprint of one key from `encode_value`, the encoding's value-by-value definition."""
    return xxhash.xxh3_64_intdigest(b"".join(encode_value(c.type, v) for c, v in zip(key, values)), SEED)


def test_key_and_row_fingerprints_of_a_date_key_follow_the_definition():
    key = _key(("day", "date"), ("branch", "int"))
    table = pa.table({"day": pa.array(DAYS, pa.date32()), "branch": pa.array(range(len(DAYS)), pa.int64())})
    expected = [_by_definition(key, [d, b]) for d, b in zip(DAYS, range(len(DAYS)))]
    assert key_fingerprints(table, key, SEED).tolist() == expected
    assert row_fingerprints(table, key, SEED).tolist() == expected  # a key that is not an integer is hashed
