"""Scatter gives per cell what NumPy's unbuffered np.add.at and np.bitwise_xor.at add there."""

from __future__ import annotations

import numpy as np
import pytest

from deltasieve_protocol.scatter import Scatter


@pytest.mark.parametrize(
    ("shape", "bound"),
    [((3, 5_000), 700), ((5_000,), 50), ((2, 4_000), 2**61), ((1,), 1), ((3, 0), 10)],
    ids=["rows", "one-row", "argsort", "single", "empty"],
)
def test_reductions_equal_ufunc_at(shape, bound):
    """Many items share a cell (bound far below the items), in one row or several; a bound
    too wide to pack beside the positions takes the argsort path."""
    rng = np.random.default_rng(3)
    targets = rng.integers(0, bound, size=shape)
    values = rng.integers(0, 2**64, size=shape[-1], dtype=np.uint64)
    limbs = rng.integers(0, 2**32, size=(shape[-1], 4), dtype=np.uint64)
    grouped = Scatter(targets, bound)
    rows = np.atleast_2d(targets)

    dense = grouped.cells if bound > 10**6 else np.arange(bound)
    position = np.searchsorted(dense, grouped.cells)
    xor, total, count = np.zeros(dense.size, np.uint64), np.zeros((dense.size, 4), np.uint64), np.zeros(dense.size, int)
    for row in rows:
        at = np.searchsorted(dense, row)
        np.bitwise_xor.at(xor, at, values)
        np.add.at(total, at, limbs)
        np.add.at(count, at, 1)
    assert np.array_equal(grouped.cells, np.unique(targets))
    assert np.array_equal(grouped.xor(values), xor[position])
    assert np.array_equal(grouped.sum(limbs), total[position])
    assert np.array_equal(grouped.counts(), count[position])


def test_cells_out_of_range_are_refused():
    with pytest.raises(ValueError, match="out of"):
        Scatter(np.array([0, 5]), 5)
