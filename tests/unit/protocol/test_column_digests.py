"""Updated rows rebuilt from their old rows and the cells whose digests differ (column_digests.py)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import numpy as np
import pyarrow as pa

from deltasieve_protocol import column_digests as cd
from deltasieve_protocol.fingerprints import row_fingerprints
from deltasieve_protocol.types import Column, LogicalType

COLUMNS = [
    Column("id", LogicalType.parse("int")),
    Column("name", LogicalType.parse("text")),
    Column("price", LogicalType.parse("decimal(10,2)")),
    Column("born", LogicalType.parse("date")),
    Column("ok", LogicalType.parse("bool")),
]
SCHEMA = pa.schema([pa.field(c.name, c.type.arrow()) for c in COLUMNS])
SEED = 1234

OLD = pa.Table.from_pylist(
    [
        {"id": 1, "name": None, "price": Decimal("1.50"), "born": dt.date(2000, 1, 1), "ok": True},  # NULL -> value
        {"id": 2, "name": "b", "price": Decimal("2.00"), "born": dt.date(2001, 1, 1), "ok": False},  # value -> NULL
        {"id": 3, "name": "c", "price": Decimal("3.00"), "born": dt.date(2002, 1, 1), "ok": None},  # all change
    ],
    schema=SCHEMA,
)
NEW = pa.Table.from_pylist(
    [
        {"id": 1, "name": "a", "price": Decimal("1.50"), "born": dt.date(2000, 1, 1), "ok": True},
        {"id": 2, "name": "b", "price": None, "born": dt.date(2001, 1, 1), "ok": False},
        {"id": 3, "name": "z", "price": Decimal("9.99"), "born": dt.date(1999, 1, 1), "ok": True},
    ],
    schema=SCHEMA,
)


def _exchange(bits: int) -> tuple[pa.Table, np.ndarray]:
    """Both sides of the exchange through its wire forms: the rebuilt rows and the bitmap."""
    sent = cd.digests_array(cd.column_digests(NEW, COLUMNS, SEED, bits))  # agent
    changed = cd.digests_matrix(sent, len(COLUMNS)) != cd.column_digests(OLD, COLUMNS, SEED, bits)  # warehouse
    asked = cd.bitmap_matrix(cd.bitmap_array(changed), len(COLUMNS))  # agent
    return cd.rebuild(OLD, cd.only_changed(NEW, asked), changed), changed


def test_changed_cells_rebuild_the_new_rows_nulls_included():
    rebuilt, changed = _exchange(cd.DIGEST_BITS)
    # at 8 bits a seed could collide on one of these seven cells; this one does not
    assert changed.tolist() == [
        [False, True, False, False, False],
        [False, False, True, False, False],
        [False, True, True, True, True],
    ]
    assert rebuilt.to_pylist() == NEW.to_pylist()
    assert (row_fingerprints(rebuilt, COLUMNS, SEED) == row_fingerprints(NEW, COLUMNS, SEED)).all()


def test_colliding_digests_leave_rows_whose_hash_tells():
    rebuilt, changed = _exchange(0)  # every digest 0: every changed cell collides
    assert not changed.any() and rebuilt.to_pylist() == OLD.to_pylist()
    assert not (row_fingerprints(rebuilt, COLUMNS, SEED) == row_fingerprints(NEW, COLUMNS, SEED)).any()


def test_bitmaps_of_many_columns_round_trip():
    rng = np.random.default_rng(5)
    bits = rng.random((100, 19)) < 0.2
    assert (cd.bitmap_matrix(cd.bitmap_array(bits), 19) == bits).all()
