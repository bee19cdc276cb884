"""The sort-merge outer join of two snapshots (000 §3.1): exact whatever the order.

Both snapshots are sorted by key, then merged: a key in both is compared, a key in one only
is a delete or an insert. (Here the sort is in memory; files too large for it are cut into
runs first, a later step.)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from . import DELETE, INSERT, Change, Record, compared


def sort_merge(old: Iterable[Record], new: Iterable[Record]) -> Iterator[Change]:
    """The differential of `old` and `new`, merged in key order.

    >>> [(c.op, c.key) for c in sort_merge([(3, "c"), (1, "a"), (2, "b")], [(2, "B"), (4, "d"), (1, "a")])]
    [('update', 2), ('delete', 3), ('insert', 4)]
    """
    a, b = sorted(old, key=lambda r: r[0]), sorted(new, key=lambda r: r[0])
    i = j = 0
    while i < len(a) or j < len(b):
        if j == len(b) or (i < len(a) and a[i][0] < b[j][0]):
            yield Change(DELETE, a[i][0], old=a[i][1])
            i += 1
        elif i == len(a) or b[j][0] < a[i][0]:
            yield Change(INSERT, b[j][0], new=b[j][1])
            j += 1
        else:
            yield from compared(a[i][0], a[i][1], b[j][1])
            i, j = i + 1, j + 1
