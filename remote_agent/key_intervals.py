"""Which key intervals a ranged re-read of the site query covers: merged, and capped in number.

A range-checksum request names key ranges [lo, hi) (None: unbounded). The agent need only
read the rows whose key falls in one of them; rows between them lie in no range and would
be skipped anyway. So the ranges are merged where one ends where the next begins, and when
that still leaves more than a cap of intervals, the ones nearest each other are joined
across the gap between them (the gap's rows are read and skipped): each interval costs one
statement or more at the source, and a statement has a fixed cost of its own.

Keys are the request's canonical values (a scalar, or a tuple for a composite key), in
Python's order; whether the database filters in that same order is the adapter's business
(`Adapter.range_key`).
"""

from __future__ import annotations

import datetime as dt
import heapq
from collections.abc import Sequence
from decimal import Decimal

#: Intervals read in one request at most (each is a keyset-chunked scan of its own).
#: Measured on 1M integer keys: a bounded statement costs about 1.5-2 ms at the source
#: (SQLite and PostgreSQL alike) beyond its rows; 64 of them cost a tenth of a second,
#: far below a full read (1.3-2.1 s). One statement OR-ing the intervals instead cost
#: SQLite 3.3 s for 64 of them (it walks the whole index and tests every term), so
#: intervals are never OR-ed. Through the whole answer (read, convert, hash a small batch
#: per interval) an interval cost the agent 2-6 ms, what 300-800 rows of a full read cost:
#: on 200k SQLite rows, 300 ranges of 12 rows took 1.1 s capped at 64 (111,568 rows
#: read), 2.0 s at 256 (11,872), 1.7 s uncapped (3,600); 1,000 ranges 1.6 s at 64
#: (187,968), 6.7 s uncapped (12,000); the full read 1.45 s (a machine under load).
#: 64 keeps a round's statements cheap; a higher cap reads fewer rows but takes longer.
MAX_INTERVALS = 64
#: Intervals at most where the key's bounds are an expression no index serves (a text key
#: compared byte-wise under another collation): each statement then scans the table at
#: the source (measured: 90 ms for 200k rows on PostgreSQL, against 0.4 ms by the index).
MAX_UNINDEXED_INTERVALS = 4

Interval = tuple[object, object]


def merge(ranges: Sequence[Interval]) -> list[Interval]:
    """Join ranges sorted by lower bound where one ends where the next begins.

    >>> merge([(None, 10), (10, 20), (25, 30), (30, None)])
    [(None, 20), (25, None)]
    >>> merge([(None, None)])
    [(None, None)]
    >>> merge([])
    []
    """
    out: list[Interval] = []
    for lo, hi in ranges:
        if out and out[-1][1] is not None and lo is not None and out[-1][1] == lo:
            out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def cap(intervals: Sequence[Interval], limit: int = MAX_INTERVALS) -> list[Interval]:
    """At most `limit` intervals: close the narrowest gaps (by `gap`) until few enough remain.

    >>> cap([(0, 10), (12, 20), (100, 110), (111, 120)], 2)
    [(0, 20), (100, 120)]
    >>> cap([(0, 10), (12, 20)], 5)
    [(0, 10), (12, 20)]
    >>> cap([("a", "b"), ("ba", "c"), ("x", "y")], 2)
    [('a', 'c'), ('x', 'y')]
    """
    if limit < 1:
        raise ValueError("at least one interval")
    if len(intervals) <= limit:
        return list(intervals)
    gaps = [(gap(intervals[i][1], intervals[i + 1][0]), i) for i in range(len(intervals) - 1)]
    closed = {i for _, i in heapq.nsmallest(len(intervals) - limit, gaps)}
    out: list[Interval] = []
    for i, (lo, hi) in enumerate(intervals):
        if i - 1 in closed:
            out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def plan(ranges: Sequence[Interval], limit: int = MAX_INTERVALS) -> list[Interval] | None:
    """The intervals to read for these sorted ranges, or None when they span the whole key space.

    >>> plan([(None, 5), (5, None)]) is None
    True
    >>> plan([(3, 5), (5, 8), (20, None)])
    [(3, 8), (20, None)]
    >>> plan([(1, 2), (3, 4), (6, 7)], limit=1)
    [(1, 7)]
    """
    intervals = cap(merge(ranges), limit) if ranges else []
    if intervals and intervals[0] == (None, None):
        return None
    return intervals


def gap(a: object, b: object) -> tuple:
    """How far apart two keys lie, as a value that sorts narrower gaps first.

    Each component is placed on a number line that keeps its order (`position`); two
    composite keys are the nearer the later their first differing component.

    >>> gap(10, 12) < gap(10, 50)
    True
    >>> gap("apple", "apply") < gap("apple", "banana")
    True
    >>> gap((1, "a"), (1, "z")) < gap((1, "z"), (2, "a"))
    True
    """
    left = a if isinstance(a, tuple) else (a,)
    right = b if isinstance(b, tuple) else (b,)
    for i, (x, y) in enumerate(zip(left, right)):
        if x != y:
            return (-i, abs(position(y) - position(x)))
    return (-len(left), 0.0)


def position(v: object) -> float:
    """A number that grows with `v` in Python's order (not strictly: text by its first 8 bytes).

    >>> position("ab") < position("b") < position("ba")
    True
    >>> position(dt.date(2020, 1, 2)) - position(dt.date(2020, 1, 1))
    1.0
    """
    if v is None:
        return 0.0
    if isinstance(v, (bool, int, float, Decimal)):
        return float(v)
    if isinstance(v, str):
        v = v.encode("utf-8")  # UTF-8 byte order is code point order
    if isinstance(v, (bytes, bytearray)):
        return float(int.from_bytes(bytes(v[:8]).ljust(8, b"\0"), "big"))
    if isinstance(v, dt.datetime):
        return (v if v.tzinfo else v.replace(tzinfo=dt.UTC)).timestamp()
    if isinstance(v, dt.date):
        return float(v.toordinal())
    return 0.0
