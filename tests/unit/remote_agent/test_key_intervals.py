"""Merging and capping the key intervals of a ranged re-read (remote_agent/key_intervals.py)."""

from __future__ import annotations

import random

import pytest

from remote_agent import key_intervals as ki


def _inside(key, intervals) -> bool:
    return any((lo is None or lo <= key) and (hi is None or key < hi) for lo, hi in intervals)


def _ranges(rng: random.Random, n: int) -> list[tuple]:
    """n sorted, non-overlapping integer ranges, some touching, some with gaps."""
    bounds = sorted(rng.sample(range(10_000), 2 * n))
    out = []
    for i in range(n):
        lo, hi = bounds[2 * i], bounds[2 * i + 1]
        if out and rng.random() < 0.4:
            lo = out[-1][1]  # touching the previous one
        out.append((lo, hi))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_every_key_of_a_range_is_read_and_the_cap_holds(seed):
    rng = random.Random(seed)
    ranges = _ranges(rng, rng.randrange(1, 200))
    limit = rng.choice([1, 3, 16, ki.MAX_INTERVALS])
    intervals = ki.plan(ranges, limit)
    assert 1 <= len(intervals) <= limit
    assert all(a[1] < b[0] for a, b in zip(intervals, intervals[1:])), "sorted, disjoint, not touching"
    for lo, hi in ranges:
        for key in (lo, hi - 1, (lo + hi) // 2):
            assert _inside(key, intervals)
    assert intervals[0][0] == ranges[0][0] and intervals[-1][1] == ranges[-1][1]


def test_touching_ranges_merge_and_gaps_stay():
    assert ki.merge([(1, 5), (5, 9), (12, 20), (20, 21)]) == [(1, 9), (12, 21)]


def test_the_cap_closes_the_narrowest_gaps_first():
    ranges = [(0, 10), (11, 20), (1_000, 1_010), (1_500, 1_600), (1_601, 1_700)]
    assert ki.cap(ranges, 3) == [(0, 20), (1_000, 1_010), (1_500, 1_700)]
    assert ki.cap(ranges, 1) == [(0, 1_700)]


def test_unbounded_ends_and_the_whole_key_space():
    assert ki.plan([(None, 3), (3, 7), (9, None)]) == [(None, 7), (9, None)]
    assert ki.plan([(None, 3), (3, None)]) is None
    assert ki.plan([(None, 3), (4, None)], limit=1) is None  # closing the gap spans every key
    assert ki.plan([]) == []


def test_composite_and_text_keys():
    ranges = [(("a", 1), ("a", 5)), (("a", 7), ("b", 0)), (("q", 0), ("r", 0))]
    assert ki.plan(ranges, 2) == [(("a", 1), ("b", 0)), (("q", 0), ("r", 0))]
    words = [("Zoo", "apple"), ("apply", "b"), ("éclair", "f")]
    assert ki.plan(words, 2) == [("Zoo", "b"), ("éclair", "f")]  # "apple".."apply": the nearest
