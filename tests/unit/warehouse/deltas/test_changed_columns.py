"""The columns each update changed (deltas/changed_columns.py) against a plain Python
comparison: randomized rows with NULLs, NaN and every column changing or none."""

from __future__ import annotations

import math
import random

import pyarrow as pa
import pytest

from warehouse.deltas.changed_columns import CHANGED_TYPE, arrow_changed, changed_lists, column_counts

NAMES = ["a", "b", "c"]


def _differ(x, y) -> bool:
    if x is None or y is None:
        return (x is None) != (y is None)
    if isinstance(x, float) and math.isnan(x) and math.isnan(y):
        return False
    return x != y


@pytest.mark.parametrize("seed", range(5))
def test_changed_lists_name_exactly_the_columns_that_differ(seed):
    rng = random.Random(seed)
    n = 200
    pools = {"a": [1, 2, None], "b": ["x", "y", None], "c": [0.5, float("nan"), None, -0.0, 0.0]}
    old = {c: [rng.choice(p) for _ in range(n)] for c, p in pools.items()}
    new = {c: [rng.choice(p) for _ in range(n)] for c, p in pools.items()}
    updates = [rng.random() < 0.8 for _ in range(n)]
    got = arrow_changed(
        {c: pa.chunked_array([v[:50], v[50:]]) for c, v in old.items()},
        {c: pa.array(v) for c, v in new.items()},
        pa.array(updates),
    ).to_pylist()
    want = [[c for c in NAMES if _differ(old[c][i], new[c][i])] if updates[i] else None for i in range(n)]
    assert got == want
    assert column_counts(pa.array(got, CHANGED_TYPE), NAMES) == {c: sum(c in w for w in want if w) for c in NAMES}


def test_a_null_turning_into_a_value_and_back_counts_each_time():
    old = {"v": pa.array([None, 1, None], pa.int64())}
    new = {"v": pa.array([1, None, None], pa.int64())}
    assert arrow_changed(old, new, pa.array([True, True, True])).to_pylist() == [["v"], ["v"], []]


def test_no_rows_and_no_columns():
    assert changed_lists({"a": pa.array([], pa.bool_())}, pa.array([], pa.bool_())).to_pylist() == []
    assert changed_lists({}, pa.array([True, False])).to_pylist() == [[], None]
