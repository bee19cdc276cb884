"""Folding (key fingerprint, row hash) pairs into an IBLT's cells, in numba: one pass, no grouping (`fold`).

For each pair and each of the table's sub-tables, the pair's cell is its pair hash modulo
the width, in that sub-table; the cell's count moves by the pair's sign and its three sums
are XORed with the key, the row hash and the pair's checksum (the pair hash under the last
salt). That is the definition `Iblt.reference_add` writes in NumPy, by grouping the cells
(scatter.py) and reducing each group; here every pair goes straight into its cells, so a
fold needs no memory beside the table and no sort. The counts wrap in their own dtype and
XOR does not care about order, so the tables are bit for bit those of the reference
(tests/unit/protocol/test_iblt_fold.py holds the two together). deltasieve_protocol/iblt_fold.py
checks the arguments.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from deltasieve_protocol.kernels.byte_intrinsics import prefetch_for_write

_U = np.uint64
#: The splitmix64 finalizer's constants (iblt.mix64, the NumPy version of `_mix`).
_M1 = _U(0xBF58476D1CE4E5B9)
_M2 = _U(0x94D049BB133111EB)
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
def fold(count, key_sum, hash_sum, check_sum, salts, width, keys, hashes, signs, modulus):
    """Fold every pair into its cell of each sub-table (see deltasieve_protocol/iblt_fold.py); the pair i's sign is
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
