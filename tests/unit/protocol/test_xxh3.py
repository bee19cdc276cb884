"""The compiled XXH3-64 (xxh3.py) against the xxhash package, on every length class.

XXH3 hashes inputs of 0, 1-3, 4-8, 9-16, 17-128 and 129-240 bytes each their own way, and
longer ones in 64-byte stripes and 1024-byte blocks with a secret derived from the seed:
each class and its edges, and seeds at the ends of their range.
"""

from __future__ import annotations

import numpy as np
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from deltasieve_protocol.xxh3 import xxh3_64, xxh3_64_slices
from tests.support.vectors import SEED

#: each test twice: the ahead-of-time kernels the agent loads, and numba's JIT of the same source
pytestmark = pytest.mark.usefixtures("kernels")

SEEDS = st.integers(0, 2**64 - 1)

#: Every length up to two of XXH3's 1024-byte blocks and a bit, which covers each length
#: class and its edges (0, 1-3, 4-8, 9-16, 17-128, 129-240, 241 and up, stripes, blocks),
#: and a few inputs of several blocks.
LENGTHS = list(range(0, 2 * 1024 + 80)) + [4096, 4097, 10_000]


@pytest.mark.parametrize("seed", [0, 1, SEED, 2**63, 2**64 - 1])
def test_xxh3_64_of_every_length_class(seed):
    data = np.random.default_rng(seed % 1000).integers(0, 256, sum(LENGTHS), dtype=np.uint8)
    offsets = np.concatenate([[0], np.cumsum(LENGTHS)])
    got = xxh3_64_slices(offsets, data, seed)
    raw = data.tobytes()
    want = [xxhash.xxh3_64_intdigest(raw[a:b], seed) for a, b in zip(offsets[:-1], offsets[1:])]
    assert got.tolist() == want


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=1000), SEEDS)
def test_xxh3_64_of_random_bytes(data, seed):
    assert xxh3_64(data, seed) == xxhash.xxh3_64_intdigest(data, seed)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(max_size=1000), max_size=30), SEEDS)
def test_xxh3_64_slices_of_one_buffer(rows, seed):
    """Rows back to back in one buffer, as the kernel lays them out: each hashed on its own."""
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows], dtype=np.int64)])
    data = np.frombuffer(b"".join(rows), np.uint8)
    assert xxh3_64_slices(offsets, data, seed).tolist() == [xxhash.xxh3_64_intdigest(r, seed) for r in rows]
