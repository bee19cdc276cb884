"""The compiled IBLT fold (iblt_fold.py) against its definition, `Iblt.reference_add`.

Both fold the same pairs into copies of the same table, which need not be empty nor
normalized; every array of the two must then be equal bit for bit: full and compact tables,
one sign or one per pair, normalized or not, any number of sub-tables and width (one cell
wide too), keys given as uint64 or int64, no pairs at all.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deltasieve_protocol.iblt import SUMS, Iblt
from deltasieve_protocol.iblt_fold import fold

#: each test twice: the ahead-of-time kernels the agent loads, and numba's JIT of the same source
pytestmark = pytest.mark.usefixtures("kernels")

U64 = st.integers(0, 2**64 - 1)
ARRAYS = ("count", *SUMS)


def assert_same(got: Iblt, expected: Iblt) -> None:
    for name in ARRAYS:
        a, b = getattr(got, name), getattr(expected, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name


@st.composite
def tables(draw: st.DrawFn) -> Iblt:
    """A table of 1 to 5 sub-tables, compact or full, already holding some pairs with
    counts left unnormalized (so that a fold must touch only its own cells' counts)."""
    t = Iblt(draw(st.integers(1, 200)), draw(st.integers(1, 5)), draw(U64), compact=draw(st.booleans()))
    before = draw(st.lists(st.tuples(U64, U64), max_size=60))
    if before:
        keys, hashes = (np.array(x, np.uint64) for x in zip(*before))
        t.reference_add(keys, hashes, draw(st.sampled_from([1, -1])), normalize=False)
    return t


@settings(max_examples=300, deadline=None)
@given(
    tables(),
    st.lists(st.tuples(U64, U64, st.sampled_from([1, -1])), max_size=400),
    st.sampled_from(["+1", "-1", "per pair"]),
    st.booleans(),
    st.booleans(),
)
def test_the_compiled_fold_gives_the_reference_table(table, pairs, signs, normalize, signed_keys):
    keys = np.array([k for k, _, _ in pairs], np.uint64)
    hashes = np.array([h for _, h, _ in pairs], np.uint64)
    sign = {"+1": 1, "-1": -1}.get(signs, np.array([s for _, _, s in pairs], np.int64))
    compiled, reference = table.copy(), table.copy()
    compiled.add(keys.view(np.int64) if signed_keys else keys, hashes, sign, normalize=normalize)
    reference.reference_add(keys, hashes, sign, normalize=normalize)
    assert_same(compiled, reference)


@pytest.mark.parametrize("compact", [False, True])
def test_a_large_fold_into_a_wide_table_is_the_reference_table(compact):
    """Many pairs to a cell and many cells: counts far past a byte, both signs, a fold far
    larger than the reference's own parts (FOLD_PAIRS)."""
    rng = np.random.default_rng(11)
    keys, hashes = rng.integers(0, 2**64, (2, 600_000), dtype=np.uint64)
    signs = rng.choice(np.array([1, -1]), keys.size)
    for cells in (3, 90_001):
        compiled, reference = Iblt(cells, 3, 7, compact=compact), Iblt(cells, 3, 7, compact=compact)
        compiled.add(keys, hashes, signs)
        reference.reference_add(keys, hashes, signs)
        assert_same(compiled, reference)


def test_an_empty_fold_changes_nothing():
    t = Iblt(30, 3, 1, compact=True)
    t.add(np.array([1], np.uint64), np.array([2], np.uint64), sign=-1, normalize=False)
    before = t.copy()
    t.add(np.zeros(0, np.uint64), np.zeros(0, np.uint64))
    assert_same(t, before)
    assert t.count.max() == 255  # left as the unnormalized add left it


def test_the_fold_refuses_arrays_no_table_has():
    t = Iblt(6, 3)
    one = np.ones(1, np.uint64)
    with pytest.raises(TypeError, match="counts of int32"):
        fold(t.count.astype(np.int32), t.key_sum, t.hash_sum, t.check_sum, np.ones(4, np.uint64), one, one, one)
    with pytest.raises(ValueError, match="7 cells do not make 3 equal sub-tables"):
        fold(np.zeros(7, np.int64), *(np.zeros(7, np.uint64),) * 3, np.ones(4, np.uint64), one, one, one)
    with pytest.raises(ValueError, match="key_sum must be a writable contiguous array"):
        fold(t.count, t.key_sum[::-1], t.hash_sum, t.check_sum, np.ones(4, np.uint64), one, one, one)
    with pytest.raises(ValueError, match="2 keys, 1 row hashes and 1 signs"):
        fold(t.count, t.key_sum, t.hash_sum, t.check_sum, np.ones(4, np.uint64), np.ones(2, np.uint64), one, one)
    with pytest.raises(ValueError, match="signs must be 2 values of 1 or -1"):
        t.add(np.ones(2, np.uint64), np.ones(2, np.uint64), np.array([1, 2]))
