"""The IBLT recovers exactly the set differences, never a pair that is not in them.

Python sets of (key, row hash) pairs are the reference: table(A) minus table(B) must peel
to A - B with sign +1 and B - A with sign -1.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deltasieve_protocol import iblt
from deltasieve_protocol.iblt import FORMAT_VERSION, Iblt, _pair_hash
from deltasieve_protocol.iblt_arrow import MAX_ABS_COUNT, from_arrow, to_arrow
from deltasieve_protocol.iblt_sizing import cells_for

U64 = st.integers(0, 2**64 - 1)


def arrays(pairs):
    pairs = sorted(pairs)
    return np.array([k for k, _ in pairs], dtype=np.uint64), np.array([h for _, h in pairs], dtype=np.uint64)


def table(pairs, cells, seed=0):
    t = Iblt(cells, seed=seed)
    t.add(*arrays(pairs))
    return t


def random_pairs(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`n` random (key, row hash) pairs."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 2**63, size=n, dtype=np.uint64), rng.integers(0, 2**63, size=n, dtype=np.uint64)


def as_set(keys, hashes):
    return set(zip(keys.tolist(), hashes.tolist()))


@st.composite
def two_sides(draw):
    """Sets A and B: shared pairs, updated rows (same key, new hash), keys on one side only."""
    keys = draw(st.lists(U64, unique=True, max_size=300))
    kinds = draw(st.lists(st.sampled_from("=uab"), min_size=len(keys), max_size=len(keys)))
    a, b = set(), set()
    for key, kind in zip(keys, kinds):
        h = draw(U64)
        if kind in "=ua":
            a.add((key, h))
        if kind == "=":
            b.add((key, h))
        elif kind == "u":
            b.add((key, draw(U64.filter(lambda x, h=h: x != h))))
        elif kind == "b":
            b.add((key, h))
    return a, b


# At cells_for's default target a peel fails by design on about 0.2% of tables (two pairs
# sharing all their cells), and hypothesis's examples are not the same on every machine
# even with derandomize: CI met such a table twice. Sized for one failure in a million, a
# failed peel here is a bug, not a draw (the default target's rate is measured by
# scripts/iblt_sizing.py, its table in iblt_sizing.cells_for).
@settings(max_examples=150, deadline=None, derandomize=True)
@given(two_sides(), st.integers(0, 2**64 - 1))
def test_difference_peels_to_the_set_differences(sides, seed):
    a, b = sides
    cells = cells_for(len(a ^ b), 0, failure=1e-6)
    peeled = table(a, cells, seed).subtract(table(b, cells, seed)).peel()
    assert as_set(peeled.plus_keys, peeled.plus_hashes) <= a - b
    assert as_set(peeled.minus_keys, peeled.minus_hashes) <= b - a
    assert peeled.complete
    assert as_set(peeled.plus_keys, peeled.plus_hashes) == a - b
    assert as_set(peeled.minus_keys, peeled.minus_hashes) == b - a
    assert peeled.plus_keys.dtype == peeled.minus_hashes.dtype == np.uint64


def test_folding_the_other_side_with_sign_minus_one_is_subtracting_its_table():
    rng = np.random.default_rng(3)
    keys, hashes = rng.integers(0, 2**63, (2, 1000), dtype=np.uint64)
    mine, theirs = table(as_set(keys[:600], hashes[:600]), 600), table(as_set(keys[300:], hashes[300:]), 600)
    folded = mine.copy()
    folded.add(keys[300:], hashes[300:], sign=-1)
    subtracted = mine.subtract(theirs)
    assert np.array_equal(folded.count, subtracted.count)
    assert all(np.array_equal(getattr(folded, n), getattr(subtracted, n)) for n in ("key_sum", "hash_sum", "check_sum"))


@pytest.mark.parametrize("d, cells, partial", [(200, 30, False), (400, 360, True), (3000, 3300, True)])
def test_a_table_too_small_reports_only_true_differences(d, cells, partial):
    rng = np.random.default_rng(d)
    keys, hashes = rng.integers(0, 2**64, (2, d), dtype=np.uint64)
    a, b = as_set(keys[: d // 2], hashes[: d // 2]), as_set(keys[d // 2 :], hashes[d // 2 :])
    peeled = table(a, cells).subtract(table(b, cells)).peel()
    assert not peeled.complete
    assert as_set(peeled.plus_keys, peeled.plus_hashes) <= a
    assert as_set(peeled.minus_keys, peeled.minus_hashes) <= b
    assert (peeled.plus_keys.size + peeled.minus_keys.size > 0) == partial


def test_sums_of_two_pairs_under_a_count_of_one_are_not_a_pair():
    t = Iblt(3)  # one cell per sub-table: every pair lands in the same three cells
    t.add(np.array([11, 22], dtype=np.uint64), np.array([111, 222], dtype=np.uint64))
    t.count[:] = 1  # forged: count says one pair, the sums hold two
    peeled = t.peel()
    assert not peeled.complete
    assert peeled.plus_keys.size == peeled.minus_keys.size == 0


def test_a_valid_pair_in_a_cell_that_is_not_its_own_is_not_reported():
    t = Iblt(300)
    key, h = np.array([5], dtype=np.uint64), np.array([6], dtype=np.uint64)
    own = int(t._cells(key, h)[0, 0])
    forged = (own + 1) % t.width  # same sub-table, another cell
    t.count[forged], t.key_sum[forged], t.hash_sum[forged] = 1, key[0], h[0]
    t.check_sum[forged] = t._checksums(key, h)[0]
    peeled = t.peel()
    assert not peeled.complete and peeled.plus_keys.size == 0


def test_a_pair_missing_from_one_of_its_cells_ends_the_peel():
    """Taking the pair out would put it back, with the other sign, into the cell it is missing from."""
    t = Iblt(300)
    key, h = np.array([5], dtype=np.uint64), np.array([6], dtype=np.uint64)
    t.add(key, h)
    missing = int(t._cells(key, h)[1, 0])
    t.count[missing] = t.key_sum[missing] = t.hash_sum[missing] = t.check_sum[missing] = 0
    peeled = t.peel()
    assert not peeled.complete
    assert as_set(peeled.plus_keys, peeled.plus_hashes) <= {(5, 6)} and peeled.minus_keys.size == 0


def test_peeling_random_garbage_terminates_without_completing():
    rng = np.random.default_rng(0)
    t = Iblt(3000)
    t.count[:] = rng.integers(-1, 2, t.cells)
    for name in ("key_sum", "hash_sum", "check_sum"):
        getattr(t, name)[:] = rng.integers(0, 2**64, t.cells, dtype=np.uint64)
    peeled = t.peel()
    assert not peeled.complete and peeled.plus_keys.size == peeled.minus_keys.size == 0


def test_an_update_lands_in_other_cells_than_the_old_row():
    t = Iblt(3000)
    keys = np.arange(100, dtype=np.uint64)
    old, new = t._cells(keys, keys), t._cells(keys, keys + np.uint64(1))
    assert not (old == new).all(axis=0).any()


def test_hashing_is_pinned():
    """Both sides of the wire must place a pair alike: a change here needs a new FORMAT_VERSION."""
    t = Iblt(30, seed=0)
    t.add(np.array([1], dtype=np.uint64), np.array([2], dtype=np.uint64))
    assert np.flatnonzero(t.count).tolist() == GOLDEN_CELLS
    assert int(_pair_hash(np.uint64(1), np.uint64(2), np.uint64(0))) == GOLDEN_HASH
    assert FORMAT_VERSION == 1


GOLDEN_CELLS = [4, 13, 20]
GOLDEN_HASH = 17235469408947973867


def test_signed_keys_are_taken_by_their_bit_pattern():
    signed, unsigned = Iblt(30), Iblt(30)
    signed.add(np.array([-1, 7], dtype=np.int64), np.array([3, -2], dtype=np.int64))
    unsigned.add(np.array([2**64 - 1, 7], dtype=np.uint64), np.array([3, 2**64 - 2], dtype=np.uint64))
    assert signed.subtract(unsigned).is_empty()


@pytest.mark.parametrize(
    "keys, hashes, sign, error",
    [([1, 2], [1], 1, ValueError), ([1], [1], 0, ValueError), ([1.5], [1], 1, TypeError), ([[1]], [[1]], 1, TypeError)],
)
def test_add_rejects_bad_input(keys, hashes, sign, error):
    with pytest.raises(error):
        Iblt(30).add(np.array(keys), np.array(hashes), sign=sign)


@pytest.mark.parametrize("other", [Iblt(33), Iblt(30, hashes=5), Iblt(30, seed=1)])
def test_subtract_needs_the_same_shape_and_seed(other):
    with pytest.raises(ValueError, match="differ in shape or seed"):
        Iblt(30).subtract(other)


def test_cells_round_up_to_a_multiple_of_hashes():
    t = Iblt(np.int64(31), hashes=4)
    assert (t.cells, t.width) == (32, 8)


@pytest.mark.parametrize(
    "args, error",
    [
        ((0,), ValueError),
        ((6, 0), ValueError),
        ((6, 3, -1), ValueError),
        ((6, 3, 2**64), ValueError),
        ((6.0,), TypeError),
    ],
)
def test_constructor_rejects_bad_parameters(args, error):
    with pytest.raises(error):
        Iblt(*args)


@pytest.mark.parametrize("big", [False, True])
def test_arrow_round_trip(big):
    rng = np.random.default_rng(1)
    t = table(as_set(*rng.integers(0, 2**64, (2, 50), dtype=np.uint64)), 90, seed=2**64 - 1)
    if big:
        t.count[0] = -(2**40)
    batch = to_arrow(t)
    assert batch.schema.field("count").type == (pa.int64() if big else pa.int32())
    back = from_arrow(batch)
    assert (back.cells, back.hashes, back.seed) == (t.cells, t.hashes, t.seed)
    assert all(np.array_equal(getattr(back, n), getattr(t, n)) for n in ("count", "key_sum", "hash_sum", "check_sum"))
    assert back.count.dtype == np.int64


def _with(batch, metadata=None, **columns):
    names = batch.schema.names
    arrays = [columns.get(n, batch.column(n)) for n in names]
    meta = dict(batch.schema.metadata)
    meta.update(metadata or {})
    return pa.record_batch(arrays, names=names, metadata={k: v for k, v in meta.items() if v is not None})


GOOD = to_arrow(Iblt(6))


@pytest.mark.parametrize(
    "batch, message",
    [
        (_with(GOOD, {b"iblt.version": b"2"}), "unknown IBLT format version 2"),
        (_with(GOOD, {b"iblt.seed": None}), "lacks the iblt.seed metadata"),
        (_with(GOOD, {b"iblt.cells": b"six"}), "not an integer"),
        (_with(GOOD, {b"iblt.cells": b"9"}), "has 6 rows but its metadata says 9 cells"),
        (_with(GOOD, {b"iblt.cells": b"6", b"iblt.hashes": b"4"}), "not a positive multiple"),
        (_with(GOOD, count=pa.array([0] * 6, pa.float64())), "expected int32 or int64"),
        (_with(GOOD, key_sum=pa.array([0] * 6, pa.int64())), "key_sum is int64, expected uint64"),
        (_with(GOOD, hash_sum=pa.array([0, None, 0, 0, 0, 0], pa.uint64())), "hash_sum has nulls"),
        (_with(GOOD, count=pa.array([0, 0, MAX_ABS_COUNT + 1, 0, 0, 0], pa.int64())), "counts out of range"),
        (
            pa.record_batch([pa.array([0] * 6, pa.int32())], names=["count"], metadata=GOOD.schema.metadata),
            "has columns",
        ),
    ],
)
def test_from_arrow_rejects_what_to_arrow_would_not_write(batch, message):
    with pytest.raises(ValueError, match=message):
        from_arrow(batch)


def test_cells_for_grows_with_the_expected_difference_its_spread_and_the_confidence():
    assert cells_for(0, 0) >= 3
    assert cells_for(10, 0) < cells_for(100, 0) < cells_for(10_000, 0)
    assert cells_for(100, 0) < cells_for(100, 400)
    assert cells_for(100, 0, failure=0.1) < cells_for(100, 0, failure=0.001)
    assert cells_for(100_000, 0) < 1.4 * 100_000
    assert cells_for(5, 0) % 3 == 0 and cells_for(5, 0, hashes=4) % 4 == 0


@pytest.mark.parametrize("args", [(-1, 0), (1, -1), (1, 0, 0.0), (1, 0, 1.0), (1, 0, 0.01, 7)])
def test_cells_for_rejects_bad_arguments(args):
    with pytest.raises(ValueError):
        cells_for(*args)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)), max_size=200),
    st.sampled_from([1, 2, 4, 8]),
    st.integers(0, 2**64 - 1),
)
def test_a_shrunk_table_is_the_table_built_at_that_width(pairs, width, seed):
    keys, hashes = arrays(pairs)
    big, small = Iblt(3 * 16, seed=seed), Iblt(3 * width, seed=seed)
    big.add(keys, hashes)
    small.add(keys, hashes)
    shrunk = big.shrink(width)
    for name in ("count", "key_sum", "hash_sum", "check_sum"):
        assert (getattr(shrunk, name) == getattr(small, name)).all(), name


def test_shrink_needs_a_width_that_divides():
    with pytest.raises(ValueError, match="must divide"):
        Iblt(3 * 16).shrink(3)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(two_sides(), st.integers(0, 2**64 - 1))
def test_a_compact_table_peels_to_the_same_differences(sides, seed):
    """As sent: the warehouse's table compact (counts modulo 4, 32-bit checks), the other
    side's pairs folded in with sign -1 (its own table subtracted, as the agent does)."""
    a, b = sides
    cells = cells_for(len(a ^ b), 0)
    sent = from_arrow(to_arrow(table(a, cells, seed).to_compact()))
    theirs = table(b, cells, seed).to_compact()
    peeled = sent.subtract(theirs).peel()
    if peeled.complete:
        assert as_set(peeled.plus_keys, peeled.plus_hashes) == a - b
        assert as_set(peeled.minus_keys, peeled.minus_hashes) == b - a
    else:  # allowed rarely by design; what came out must still be true
        assert as_set(peeled.plus_keys, peeled.plus_hashes) <= a - b
        assert as_set(peeled.minus_keys, peeled.minus_hashes) <= b - a


def test_a_compact_table_is_about_20_bytes_a_cell_on_the_wire():
    from deltasieve_protocol import frames

    rng = np.random.default_rng(1)
    t = Iblt(30_000, seed=5)
    t.add(rng.integers(0, 2**63, 200_000).astype(np.uint64), rng.integers(0, 2**63, 200_000).astype(np.uint64))
    full, compact = (len(frames.arrow_frame(frames.SKETCH, to_arrow(x))) for x in (t, t.to_compact()))
    assert full / t.cells > 24 and compact / t.cells < 20.5, (full / t.cells, compact / t.cells)


@pytest.mark.parametrize("compact", [False, True])
def test_a_reference_add_larger_than_fold_pairs_goes_in_parts_to_the_same_table(compact, monkeypatch):
    keys, hashes = random_pairs(1_000, seed=6)
    whole, parts = Iblt(600, 3, 2, compact=compact), Iblt(600, 3, 2, compact=compact)
    whole.reference_add(keys, hashes)
    monkeypatch.setattr(iblt, "FOLD_PAIRS", 64)
    parts.reference_add(keys, hashes)
    for name in ("count", "key_sum", "hash_sum", "check_sum"):
        assert np.array_equal(getattr(whole, name), getattr(parts, name)), name


@pytest.mark.parametrize("compact", [False, True])
def test_small_batches_fold_as_one_large_batch(compact):
    """Many small batches, counts left unnormalized until the end, fold into the same table
    as one large batch."""
    keys, hashes = random_pairs(4_000, seed=5)
    whole, pieces = Iblt(3_000, 3, 11, compact=compact), Iblt(3_000, 3, 11, compact=compact)
    whole.add(keys, hashes)
    whole.add(keys[:500], hashes[:500], sign=-1)
    for start in range(0, 4_000, 25):
        pieces.add(keys[start : start + 25], hashes[start : start + 25], normalize=False)
    for start in range(0, 500, 25):
        pieces.add(keys[start : start + 25], hashes[start : start + 25], sign=-1, normalize=False)
    pieces.normalize()
    for name in ("count", "key_sum", "hash_sum", "check_sum"):
        assert np.array_equal(getattr(whole, name), getattr(pieces, name)), name
    assert set(whole.subtract(Iblt(3_000, 3, 11, compact=compact)).peel().plus_keys) <= set(keys.tolist())


def test_a_compact_table_holds_21_bytes_a_cell_and_counts_past_a_byte_modulo_4():
    """In memory a compact count is a byte that wraps: 900 pairs in 3 cells, never
    normalized on the way, give the full table's counts modulo 4."""
    keys, hashes = random_pairs(900, seed=9)
    full, compact = Iblt(3, 3, 4), Iblt(3, 3, 4, compact=True)
    full.add(keys, hashes)
    full.add(keys[:50], hashes[:50], sign=-1)
    for start in range(0, 900, 100):
        compact.add(keys[start : start + 100], hashes[start : start + 100], normalize=False)
    compact.add(keys[:50], hashes[:50], sign=-1, normalize=False)
    compact.normalize()
    assert int(full.count.max()) > 255
    expected = full.to_compact()
    for name in ("count", "key_sum", "hash_sum", "check_sum"):
        assert np.array_equal(getattr(compact, name), getattr(expected, name)), name
    big = Iblt(30_000, 3, 4, compact=True)
    assert sum(a.nbytes for a in (big.count, big.key_sum, big.hash_sum, big.check_sum)) == 21 * big.cells


@settings(max_examples=40, deadline=None, derandomize=True)
@given(two_sides(), st.integers(0, 2**64 - 1), st.sampled_from([1, 2, 5]), st.booleans())
def test_subtract_folded_is_the_difference_with_the_shrunk_table(sides, seed, ratio, compact):
    """The agent's difference against its wider table: the same cells as subtracting the
    shrunk table, in the narrower table's own arrays, the wider table untouched."""
    a, b = sides
    cells = cells_for(len(a ^ b), 0)
    width = -(-cells // 3)
    sent, mine = table(a, 3 * width, seed), table(b, 3 * width * ratio, seed)
    if compact:
        sent, mine = sent.to_compact(), mine.to_compact()
    expected, before = sent.subtract(mine.shrink(width)), mine.copy()
    arrays = [sent.count, sent.key_sum, sent.hash_sum, sent.check_sum]
    got = sent.subtract_folded(mine)
    assert got is sent and all(x is y for x, y in zip(arrays, [got.count, got.key_sum, got.hash_sum, got.check_sum]))
    for name in ("count", "key_sum", "hash_sum", "check_sum"):
        assert np.array_equal(getattr(got, name), getattr(expected, name)), name
        assert np.array_equal(getattr(mine, name), getattr(before, name)), name
    if ratio > 1:
        with pytest.raises(ValueError, match="must divide"):
            mine.subtract_folded(sent)


@pytest.mark.parametrize("pairs", [300, 3_000], ids=["peels", "too-many"])
def test_peeling_in_place_finds_what_peeling_a_copy_finds(pairs):
    rng = np.random.default_rng(8)
    t = Iblt(1_200, 3, 4, compact=True)
    t.add(rng.integers(0, 2**63, pairs).astype(np.uint64), rng.integers(0, 2**63, pairs).astype(np.uint64))
    before = t.copy()
    copied = t.peel()
    assert np.array_equal(t.key_sum, before.key_sum) and np.array_equal(t.count, before.count)
    in_place = t.peel(in_place=True)
    assert copied.complete == in_place.complete == (pairs == 300)
    for name in ("plus_keys", "plus_hashes", "minus_keys", "minus_hashes"):
        assert np.array_equal(getattr(copied, name), getattr(in_place, name)), name
