"""null_keys.join: the one-column membership test keeps the rows the hash join keeps."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from warehouse import null_keys


def _hash_joined(left: pa.Table, right: pa.Table, key: list[str], join_type: str) -> list:
    """The rows the flagged hash join keeps (the path of keys of several columns)."""
    flagged, keys = null_keys._flagged(left, key)
    other, _ = null_keys._flagged(right.select(key), key)
    return flagged.join(other.drop_columns(key), keys, join_type=join_type).select(left.schema.names).to_pylist()


@pytest.mark.parametrize("join_type", ["left semi", "left anti"])
@pytest.mark.parametrize("kind", [pa.int64(), pa.string()])
def test_one_key_column_keeps_what_the_hash_join_keeps(join_type: str, kind: pa.DataType) -> None:
    rng = random.Random(7)
    for _ in range(50):
        values = [None if rng.random() < 0.1 else rng.randrange(30) for _ in range(rng.randrange(0, 60))]
        wanted = [None if rng.random() < 0.1 else rng.randrange(30) for _ in range(rng.randrange(0, 20))]
        cast = (lambda v: v) if kind == pa.int64() else (lambda v: None if v is None else f"k{v}")
        left = pa.table({"k": pa.array([cast(v) for v in values], kind), "v": list(range(len(values)))})
        right = pa.table({"k": pa.array([cast(v) for v in wanted], kind)})
        got = null_keys.join(left, right, ["k"], join_type).to_pylist()
        assert sorted(got, key=str) == sorted(_hash_joined(left, right, ["k"], join_type), key=str)
        assert got == sorted(got, key=lambda r: r["v"])  # the left side's order
