"""The BestmatchJoin window algorithm (warehouse/multisets/bestmatch.py) against brute force:
random sorted streams with ties, gaps wider than the window, one to three dimensions and
several epsilons (0 included); each of the four window updates must occur."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from warehouse.multisets.bestmatch import Stats, bestmatch_join, dominates, qualifies


def brute(left: list, right: list, point, eps) -> list:
    out = []
    for lt in left:
        lp = point(lt)
        near = [r for r in right if qualifies(lp, point(r), eps)]
        best = [r for r in near if not any(dominates(lp, point(o), point(r)) for o in near)]
        out += [(lt, r) for r in best] or [(lt, None)]
    return out


def streams(rng: random.Random, dims: int, n: int, spread: int) -> tuple[list, list]:
    def make(tag: str) -> list:
        rows = [(tag, i, *(rng.randint(0, spread) for _ in range(dims))) for i in range(n)]
        return sorted(rows, key=lambda t: t[2])

    return make("L"), make("R")


def point(t: tuple) -> tuple:
    return t[2:]


@pytest.mark.parametrize("seed", range(30))
def test_the_window_algorithm_equals_brute_force(seed):
    rng = random.Random(seed)
    dims = 1 + seed % 3
    left, right = streams(rng, dims, rng.randint(0, 60), spread=rng.choice([10, 100, 1000]))
    eps = tuple(rng.choice([0, 1, 3, 10, 40]) for _ in range(dims))
    got = list(bestmatch_join(left, right, point, eps))
    assert Counter(got) == Counter(brute(left, right, point, eps))
    assert list(dict.fromkeys(lt for lt, _ in got)) == left  # every left tuple, in input order


def test_every_window_update_occurs():
    seen = Counter()
    for seed in range(30):
        rng = random.Random(seed)
        left, right = streams(rng, 2, 50, spread=500)
        stats = Stats()
        list(bestmatch_join(left, right, point, (5, 50), stats))
        seen += stats.cases
    assert set(seen) == {1, 2, 3, 4}, seen


def test_the_window_holds_a_few_tuples_of_a_long_stream():
    rng = random.Random(1)
    left = sorted(((i, rng.uniform(0, 10_000)) for i in range(5000)), key=lambda t: t[1])
    right = sorted(((i, rng.uniform(0, 10_000)) for i in range(5000)), key=lambda t: t[1])
    stats = Stats()
    got = list(bestmatch_join(left, right, lambda t: (t[1],), (2.0,), stats))
    assert len({lt for lt, _ in got}) == 5000
    assert stats.widest_left < 30 and stats.widest_right < 30


def test_unsorted_input_is_refused():
    with pytest.raises(ValueError, match="ascending"):
        list(bestmatch_join([(2,), (1,)], [], lambda t: t, (1,)))
