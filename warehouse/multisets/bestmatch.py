"""The constrained left-outer BestmatchJoin, computed by the window algorithm.

The algorithm is the one of "The Window Algorithm" (TU München, Lehrstuhl III: Datenbanksysteme).

For each left tuple, its *best matches* among the right tuples: those within `eps[d]` of it
in every dimension d, and not dominated by another such tuple (one at least as close in
every dimension and closer in one). A left tuple with none is kept alone (left outer).
Both inputs stream in ascending order of dimension 0; the algorithm holds only the tuples
within a window on that dimension.

The window [lo, hi] (hi = lo + eps[0]) moves up: the inputs' tuples up to hi enter their
windows; the left tuples that entered before are joined with the right ones that just
entered, those that just entered with the whole right window, and each pair that
qualifies updates its left tuple's best matches. Then the left tuples on lo are done
(every right tuple within eps[0] above them has been seen) and go out with their matches,
and the bounds move by one of four cases: (1) nothing left on either side: the end; (2)
tuples in the window and in the stream: lo is the smaller of the window's lowest and the
next tuple less eps[0]; (3) tuples in the window only: lo is the window's lowest; (4) an
empty window, tuples in the stream: hi is the next tuple, lo = hi - eps[0]. Right tuples
below lo can match no left tuple still to come, and leave.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

Point = Callable[[Any], tuple[float, ...]]


def qualifies(a: tuple[float, ...], b: tuple[float, ...], eps: tuple[float, ...]) -> bool:
    """Whether `b` is within `eps` of `a` in every dimension.

    >>> qualifies((1, 5), (2, 5), (1, 0)), qualifies((1, 5), (2, 6), (1, 0))
    (True, False)
    """
    return all(abs(x - y) <= e for x, y, e in zip(a, b, eps, strict=True))


def dominates(left: tuple[float, ...], b: tuple[float, ...], c: tuple[float, ...]) -> bool:
    """Whether `b` is a better match for `left` than `c`: as close in every dimension,
    closer in one.

    >>> dominates((0, 0), (1, 1), (1, 2)), dominates((0, 0), (1, 2), (2, 1)), dominates((0, 0), (1, 1), (1, 1))
    (True, False, False)
    """
    closer = False
    for x, y, z in zip(left, b, c, strict=True):
        if abs(x - y) > abs(x - z):
            return False
        closer |= abs(x - y) < abs(x - z)
    return closer


@dataclass
class Stats:
    """Which of the four window updates happened, how often, and the largest windows."""

    cases: Counter = field(default_factory=Counter)
    widest_left: int = 0
    widest_right: int = 0


def bestmatch_join(
    left: Iterable[Any], right: Iterable[Any], point: Point, eps: tuple[float, ...], stats: Stats | None = None
) -> Iterator[tuple[Any, Any]]:
    """(left tuple, best match) for every best match, (left tuple, None) for a left tuple
    without one; left tuples in input order. Both inputs ascend in `point(t)[0]`.

    >>> pt = lambda t: (t[0], t[1])
    >>> list(bestmatch_join([(1, 0), (5, 0), (20, 0)], [(2, 9), (2, 1), (6, 0), (6, 3)], pt, (2, 5)))
    [((1, 0), (2, 1)), ((5, 0), (6, 0)), ((20, 0), None)]
    """
    stats = stats if stats is not None else Stats()
    lefts, rights = _Stream(left, point), _Stream(right, point)
    window_left: list[tuple[Any, tuple, list]] = []  # (tuple, point, best matches so far)
    window_right: list[tuple[Any, tuple]] = []
    lo = hi = None
    while True:
        if lo is None:  # the start is case 4: an empty window, tuples in the stream
            if lefts.done:
                stats.cases[1] += 1
                return
            hi = lefts.peek_point[0]
            lo = hi - eps[0]
            stats.cases[4] += 1
        old_left = len(window_left)
        old_right = len(window_right)
        while not lefts.done and lefts.peek_point[0] <= hi:
            t, p = lefts.take()
            window_left.append((t, p, []))
        while not rights.done and rights.peek_point[0] <= hi:
            t, p = rights.take()
            if p[0] >= lo:
                window_right.append((t, p))
        stats.widest_left = max(stats.widest_left, len(window_left))
        stats.widest_right = max(stats.widest_right, len(window_right))
        for i, (_, lp, best) in enumerate(window_left):  # old lefts x new rights, new lefts x all rights
            for r, rp in window_right[old_right if i < old_left else 0 :]:
                if qualifies(lp, rp, eps):
                    _offer(lp, best, r, rp)
        # the left tuples on lo are done: every right tuple up to lo + eps[0] has been joined
        while window_left and window_left[0][1][0] <= lo:
            t, _, best = window_left.pop(0)
            yield from ((t, r) for r, _ in best) if best else [(t, None)]
        if not window_left and lefts.done:
            stats.cases[1] += 1
            return
        if window_left and not lefts.done:
            lo, case = min(window_left[0][1][0], lefts.peek_point[0] - eps[0]), 2
        elif window_left:
            lo, case = window_left[0][1][0], 3
        else:
            lo, case = lefts.peek_point[0] - eps[0], 4
        hi = lo + eps[0]
        stats.cases[case] += 1
        window_right = [(r, rp) for r, rp in window_right if rp[0] >= lo]


def _offer(lp: tuple, best: list, r: Any, rp: tuple) -> None:
    """Make `r` one of the left tuple's best matches unless one of them dominates it; drop
    those it dominates."""
    if any(dominates(lp, bp, rp) for _, bp in best):
        return
    best[:] = [(b, bp) for b, bp in best if not dominates(lp, rp, bp)]
    best.append((r, rp))


class _Stream:
    """An input stream with one tuple of look-ahead; checks the ascending order."""

    def __init__(self, tuples: Iterable[Any], point: Point):
        self._it, self._point = iter(tuples), point
        self._next: tuple[Any, tuple] | None = None
        self._last: float | None = None
        self._advance()

    def _advance(self) -> None:
        for t in self._it:
            p = tuple(self._point(t))
            if self._last is not None and p[0] < self._last:
                raise ValueError(
                    f"the input is not in ascending order of its first dimension: {p[0]} after {self._last}"
                )
            self._last = p[0]
            self._next = (t, p)
            return
        self._next = None

    @property
    def done(self) -> bool:
        return self._next is None

    @property
    def peek_point(self) -> tuple:
        if self._next is None:
            raise IndexError("peek past the end of the input")
        return self._next[1]

    def take(self) -> tuple[Any, tuple]:
        out = self._next
        if out is None:
            raise IndexError("take past the end of the input")
        self._advance()
        return out
