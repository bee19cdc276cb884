"""Folding many values into the cells they name, several at a cell: grouped by sorting.

NumPy's `ufunc.at` (np.add.at, np.bitwise_xor.at) does this one element at a time and is
several times slower than plain fancy indexing, which cannot take a cell twice. Sorting
the cells once makes each repeated cell one run; every array of values is then reduced
run by run (`reduceat`) and applied to the distinct cells with plain fancy indexing. The
sort is of one 64-bit word per element, the cell and the element's position packed
together, which NumPy sorts much faster than an argsort of the cells.
"""

from __future__ import annotations

import numpy as np


class Scatter:
    """The cells in [0, `bound`) of n items, one cell per item in each row of `targets`
    (shape (rows, n), or (n,) for one), grouped by cell.

    >>> s = Scatter(np.array([[4, 1, 4], [0, 2, 1]]), bound=5)
    >>> s.cells.tolist(), s.counts().tolist()
    ([0, 1, 2, 4], [1, 2, 1, 2])
    >>> s.xor(np.array([1, 2, 8], np.uint64)).tolist(), s.sum(np.array([1, 2, 8])).tolist()
    ([1, 10, 2, 9], [1, 10, 2, 9])

    `xor` and `sum` give one value per cell of `cells` (the distinct cells, ascending):
    what `np.bitwise_xor.at` and `np.add.at` would add at that cell.
    """

    def __init__(self, targets: np.ndarray, bound: int):
        targets = np.asarray(targets, np.int64)
        self.items = targets.shape[-1]
        flat = targets.reshape(-1)
        position_bits = max(flat.size - 1, 1).bit_length()
        if flat.size and (int(flat.min()) < 0 or int(flat.max()) >= bound):
            raise ValueError(f"cells out of [0, {bound})")
        if max(bound - 1, 1).bit_length() + position_bits <= 63:
            packed = np.sort((flat << position_bits) | np.arange(flat.size, dtype=np.int64))
            ordered = packed >> position_bits
            position = packed & ((1 << position_bits) - 1)
        else:  # too wide to pack: the slower argsort
            position = np.argsort(flat, kind="stable")
            ordered = flat[position]
        self._item = position % self.items if self.items else position
        first = np.ones(ordered.size, bool)
        np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
        self._starts = np.flatnonzero(first)
        self.cells = ordered[self._starts]
        self._size = ordered.size

    def counts(self) -> np.ndarray:
        """Items per cell."""
        return np.diff(self._starts, append=self._size)

    def xor(self, values: np.ndarray) -> np.ndarray:
        """XOR per cell of the items' values (one per item; 2-D: one row per item)."""
        return self._reduce(np.bitwise_xor, values)

    def sum(self, values: np.ndarray) -> np.ndarray:
        """Sum per cell of the items' values, in their own dtype (wrapping as it does)."""
        return self._reduce(np.add, values)

    def _reduce(self, ufunc: np.ufunc, values: np.ndarray) -> np.ndarray:
        values = np.asarray(values)
        if self._size == 0:
            return np.zeros((0, *values.shape[1:]), values.dtype)
        return ufunc.reduceat(values[self._item], self._starts, axis=0)
