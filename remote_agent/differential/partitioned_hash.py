"""The partitioned hash outer join of two snapshots (000 §3.2): exact whatever the order.

Both snapshots are split by a hash of the key into `partitions` parts, so that one part of
the old snapshot fits in memory as a hash table; each part of the new snapshot probes its
table, and what is left in a table at the end was deleted. (Here the parts are lists in
memory; spilling them to files is a later step.)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from . import DELETE, INSERT, Change, Record, compared

#: Parts the snapshots are split into.
PARTITIONS = 16


def partitioned_hash(old: Iterable[Record], new: Iterable[Record], partitions: int = PARTITIONS) -> Iterator[Change]:
    """The differential of `old` and `new`, part by part.

    >>> sorted((c.op, c.key) for c in partitioned_hash([(1, "a"), (2, "b"), (3, "c")], [(2, "B"), (4, "d"), (1, "a")], 2))
    [('delete', 3), ('insert', 4), ('update', 2)]
    """
    olds: list[list[tuple]] = [[] for _ in range(partitions)]
    news: list[list[tuple]] = [[] for _ in range(partitions)]
    for key, value in old:
        olds[hash(key) % partitions].append((key, value))
    for key, value in new:
        news[hash(key) % partitions].append((key, value))
    for part_old, part_new in zip(olds, news, strict=True):
        table = dict(part_old)
        for key, value in part_new:
            if key in table:
                yield from compared(key, table.pop(key), value)
            else:
                yield Change(INSERT, key, new=value)
        for key, value in table.items():
            yield Change(DELETE, key, old=value)
