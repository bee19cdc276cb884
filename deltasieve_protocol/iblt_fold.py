"""Folding (key fingerprint, row hash) pairs into an IBLT's cells, compiled with numba: one pass, no grouping.

For each pair and each of the table's sub-tables, the pair's cell is its pair hash modulo
the width, in that sub-table; the cell's count moves by the pair's sign and its three sums
are XORed with the key, the row hash and the pair's checksum (the pair hash under the last
salt). That is the definition `Iblt.reference_add` writes in NumPy, by grouping the cells
(scatter.py) and reducing each group; here every pair goes straight into its cells, so a
fold needs no memory beside the table and no sort. The counts wrap in their own dtype and
XOR does not care about order, so the tables are bit for bit those of the reference
(tests/unit/protocol/test_iblt_fold.py holds the two together).

The agent (the sketch scan), the warehouse's Spark executors (a fragment's table) and a peel
all fold through `fold`. Compiled versions: a compact table (uint8 counts, uint32 checksums)
and a full one (int64 counts, uint64 checksums), each for a single sign or one sign per pair;
`fingerprints.compile_kernels` puts them in numba's cache at install.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from deltasieve_protocol.byte_intrinsics import prefetch_for_write

_U = np.uint64
#: The splitmix64 finalizer's constants (iblt.mix64, the NumPy version of `_mix`).
_M1 = _U(0xBF58476D1CE4E5B9)
_M2 = _U(0x94D049BB133111EB)
#: (count dtype, checksum dtype) of the two layouts a table comes in: full and compact.
LAYOUTS = ((np.dtype(np.int64), np.dtype(np.uint64)), (np.dtype(np.uint8), np.dtype(np.uint32)))
#: Pairs whose cells are computed, and asked of the memory, before any is folded: a wide
#: table's cells are all over memory, and 16 to 64 pairs' lines on their way at once folded
#: 1M pairs into the hash benchmark's 1.29M cells (tests/benchmarks/hash_phase.py) in about
#: 0.6 of the time of one pair after the other; 128 and more did worse, the first lines
#: leaving the cache before their turn.
PREFETCH_PAIRS = 32


@njit(cache=True, nogil=True)
def _mix(x):
    """splitmix64's finalizer of one uint64 (as iblt.mix64 computes it over an array)."""
    x ^= x >> _U(30)
    x *= _M1
    x ^= x >> _U(27)
    x *= _M2
    return x ^ (x >> _U(31))


@njit(cache=True, nogil=True)
def _fold(count, key_sum, hash_sum, check_sum, salts, width, keys, hashes, signs, modulus):
    """Fold every pair into its cell of each sub-table (see `fold`); the pair i's sign is
    signs[i], or signs[0] for all when there is one."""
    subtables = salts.shape[0] - 1
    check_salt = salts[subtables]
    step = 0 if signs.shape[0] == 1 else 1
    pairs = keys.shape[0]
    cells = np.empty(PREFETCH_PAIRS * subtables, np.int64)
    checks = np.empty(PREFETCH_PAIRS, np.uint64)
    for start in range(0, pairs, PREFETCH_PAIRS):
        stop = min(start + PREFETCH_PAIRS, pairs)
        # first the cells of a block of pairs, each asked for at once...
        for i in range(start, stop):
            key = keys[i]
            row_hash = hashes[i]
            checks[i - start] = _mix(_mix(key ^ check_salt) ^ row_hash)
            for j in range(subtables):
                cell = j * width + np.int64(_mix(_mix(key ^ salts[j]) ^ row_hash) % _U(width))
                cells[(i - start) * subtables + j] = cell
                prefetch_for_write(count, cell)
                prefetch_for_write(key_sum, cell)
                prefetch_for_write(hash_sum, cell)
                prefetch_for_write(check_sum, cell)
        # ...then the pairs folded into them, which are in the cache by now
        for i in range(start, stop):
            key = keys[i]
            row_hash = hashes[i]
            sign = signs[i * step]
            check = checks[i - start]
            for j in range(subtables):
                cell = cells[(i - start) * subtables + j]
                moved = np.int64(count[cell]) + sign  # wraps to the count's dtype when stored
                if modulus:
                    moved %= modulus
                count[cell] = moved
                key_sum[cell] ^= key
                hash_sum[cell] ^= row_hash
                check_sum[cell] ^= check  # a uint32 checksum keeps the low 32 bits


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
        _fold(
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
    another type by their bit pattern): numba compiles a version of its own for each array
    type, and a read-only array (a view of Arrow's buffers) is a type of its own."""
    values = np.asarray(values)
    if values.ndim != 1:
        raise ValueError(f"expected a one-dimensional array, got shape {values.shape}")
    if values.dtype != dtype and values.dtype.itemsize == np.dtype(dtype).itemsize and values.dtype.kind in "iu":
        values = values.view(dtype)
    values = np.ascontiguousarray(values, dtype)
    return values if values.flags.writeable else values.copy()
