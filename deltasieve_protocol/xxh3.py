"""Seeded XXH3-64 of every row of a batch in one call: the compiled kernel (kernels/xxh3.py), its arguments checked.

The results are those of the xxhash package's `xxh3_64_intdigest(row, seed)` (XXH3 0.8),
which tests/unit/protocol/test_xxh3.py checks for every length class, ahead-of-time compiled
and just in time alike.
"""

from __future__ import annotations

import numpy as np

from deltasieve_protocol import compiled


def xxh3_64_slices(offsets: np.ndarray, data: np.ndarray, seed: int) -> np.ndarray:
    """Seeded XXH3-64 of each slice `data[offsets[i]:offsets[i + 1]]`, as uint64.

    Args:
        offsets: int64, one more than there are slices, non-decreasing.
        data: uint8, the bytes the offsets point into.
        seed: 0 <= seed < 2**64.

    >>> xxh3_64_slices(np.array([0, 0, 3]), np.frombuffer(b"abc", np.uint8), 7).tolist()
    [10464923555624353464, 5260018501835528466]
    """
    return compiled.kernel("hash_slices")(_int64s(offsets), _bytes(data), np.uint64(seed))


def xxh3_64(data: bytes, seed: int = 0) -> int:
    """Seeded XXH3-64 of one byte string (tests; a batch goes through `xxh3_64_slices`)."""
    return int(xxh3_64_slices(np.array([0, len(data)]), np.frombuffer(data, np.uint8), seed)[0])


def _int64s(values: np.ndarray) -> np.ndarray:
    """`values` as a writable C-contiguous int64 array: the compiled kernel takes that one
    array type (numba compiles a version of its own for a read-only array, a view of Arrow's
    buffers, and the ahead-of-time build has one)."""
    values = np.ascontiguousarray(values, np.int64)
    return values if values.flags.writeable else values.copy()


def _bytes(values: np.ndarray) -> np.ndarray:
    values = np.ascontiguousarray(values, np.uint8)
    return values if values.flags.writeable else values.copy()
