"""Folding (key fingerprint, row hash) pairs into an IBLT's cells, compiled: one pass, no grouping.

The kernel (kernels/iblt_fold.py) puts every pair straight into its cell of each sub-table:
bit for bit the tables of the definition, `Iblt.reference_add`, which groups the cells in
NumPy (tests/unit/protocol/test_iblt_fold.py holds the two together). The agent (the sketch
scan), the warehouse's Spark executors (a fragment's table) and a peel all fold through
`fold`, which checks the arguments and calls the kernel compiled for the table's layout: a
compact table (uint8 counts, uint32 checksums) or a full one (int64 counts, uint64
checksums), each for a single sign or one sign per pair.
"""

from __future__ import annotations

import numpy as np

from deltasieve_protocol import compiled

#: (count dtype, checksum dtype) of the two layouts a table comes in: full and compact.
LAYOUTS = ((np.dtype(np.int64), np.dtype(np.uint64)), (np.dtype(np.uint8), np.dtype(np.uint32)))
#: The kernel compiled for each layout (compiled.EXPORTS).
_KERNELS = {LAYOUTS[0]: "fold_full", LAYOUTS[1]: "fold_compact"}


def fold(
    count: np.ndarray,
    key_sum: np.ndarray,
    hash_sum: np.ndarray,
    check_sum: np.ndarray,
    salts: np.ndarray,
    keys: np.ndarray,
    hashes: np.ndarray,
    signs: np.ndarray,
    modulus: int = 0,
) -> None:
    """Fold the pairs (keys[i], hashes[i]) into a table's arrays, in place.

    Args:
        count, key_sum, hash_sum, check_sum: the table's cells, `len(salts) - 1` sub-tables
            of equal width one after another; int64 counts and uint64 checksums (a full
            table) or uint8 counts and uint32 checksums (a compact one).
        salts: uint64, one per sub-table, then the checksum's.
        keys, hashes: uint64, one per pair.
        signs: int64, one per pair, or one for all.
        modulus: if not 0, the counts of the cells folded into are left modulo it (a compact
            table's normalization; it must divide 256).

    >>> count, check = np.zeros(6, np.int64), np.zeros(6, np.uint64)
    >>> sums = np.zeros(6, np.uint64), np.zeros(6, np.uint64)
    >>> salts = np.array([1, 2, 3, 4], np.uint64)
    >>> keys, hashes = np.array([5, 7], np.uint64), np.array([50, 70], np.uint64)
    >>> fold(count, *sums, check, salts, keys, hashes, np.array([1, -1]))
    >>> count.tolist(), int(np.bitwise_xor.reduce(sums[0]))  # the pairs share their cell of sub-tables 2 and 3
    ([-1, 1, 0, 0, 0, 0], 2)
    >>> fold(count, *sums, check, salts, keys, hashes, np.array([-1, 1]))
    >>> bool(count.any() or sums[0].any() or sums[1].any() or check.any())
    False
    """
    cells, subtables = count.shape[0], salts.shape[0] - 1
    if subtables < 1 or cells % subtables:
        raise ValueError(f"{cells} cells do not make {subtables} equal sub-tables")
    if (count.dtype, check_sum.dtype) not in LAYOUTS:
        raise TypeError(f"no table has counts of {count.dtype} and checksums of {check_sum.dtype}")
    for name, array in (("count", count), ("key_sum", key_sum), ("hash_sum", hash_sum), ("check_sum", check_sum)):
        if array.shape != (cells,) or not (array.flags.c_contiguous and array.flags.writeable):
            raise ValueError(f"{name} must be a writable contiguous array of {cells} cells")
    if key_sum.dtype != np.uint64 or hash_sum.dtype != np.uint64:
        raise TypeError(f"the sums must be uint64, not {key_sum.dtype} and {hash_sum.dtype}")
    keys, hashes = _operand(keys, np.uint64), _operand(hashes, np.uint64)
    signs = _operand(signs, np.int64)
    if keys.shape != hashes.shape or signs.shape[0] not in (1, keys.shape[0]):
        raise ValueError(f"{keys.shape[0]} keys, {hashes.shape[0]} row hashes and {signs.shape[0]} signs")
    if modulus and 256 % modulus:
        raise ValueError(f"a count modulus must divide 256, got {modulus}")
    if keys.shape[0]:
        compiled.kernel(_KERNELS[count.dtype, check_sum.dtype])(
            count,
            key_sum,
            hash_sum,
            check_sum,
            _operand(salts, np.uint64),
            cells // subtables,
            keys,
            hashes,
            signs,
            modulus,
        )


def _operand(values: np.ndarray, dtype: type) -> np.ndarray:
    """`values` as a writable one-dimensional C-contiguous array of `dtype` (integers of
    another type by their bit pattern): the one array type the compiled kernel takes (numba
    compiles a version of its own for a read-only array, a view of Arrow's buffers)."""
    values = np.asarray(values)
    if values.ndim != 1:
        raise ValueError(f"expected a one-dimensional array, got shape {values.shape}")
    if values.dtype != dtype and values.dtype.itemsize == np.dtype(dtype).itemsize and values.dtype.kind in "iu":
        values = values.view(dtype)
    values = np.ascontiguousarray(values, dtype)
    return values if values.flags.writeable else values.copy()
