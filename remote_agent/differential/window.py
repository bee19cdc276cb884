"""The window algorithm (000 §4): a snapshot differential reading each snapshot once.

Records that match are expected near each other in the two files (a dump rewrites pages,
it rarely reverses the table). Each snapshot has an input block and an *aging buffer*, a
hash table of the records not matched yet, oldest first. Block by block: the two input
blocks are matched with each other, then each with the other snapshot's aging buffer; what
stays unmatched enters its own aging buffer, and when a buffer is full its oldest record
leaves it unmatched — as a delete from the old snapshot's buffer, an insert from the new
one's. At the end both buffers are emptied the same way. Memory is bounded by the two
buffers; a record displaced further than a buffer holds comes out as a delete and an
insert of one key (a useless pair, folded by `reconcile`), never as a wrong change.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable, Iterator
from itertools import islice
from typing import Any

from . import DELETE, INSERT, Change, Record, compared

#: Records read from each snapshot at a time.
BLOCK_ROWS = 1024
#: Records each aging buffer holds before it lets the oldest go unmatched.
AGING_ROWS = 100_000


class _Aging:
    """An aging buffer: key -> value, oldest first, at most `capacity` records."""

    def __init__(self, capacity: int, op: str):
        self.records: OrderedDict[Hashable, Any] = OrderedDict()
        self.capacity, self.op = capacity, op

    def take(self, key: Hashable) -> tuple[bool, Any]:
        if key in self.records:
            return True, self.records.pop(key)
        return False, None

    def add(self, records: dict[Hashable, Any]) -> Iterator[Change]:
        """Enter `records` at the young end; yield the oldest that no longer fit."""
        for key, value in records.items():
            self.records[key] = value
            if len(self.records) > self.capacity:
                yield self._unmatched(*self.records.popitem(last=False))

    def drain(self) -> Iterator[Change]:
        while self.records:
            yield self._unmatched(*self.records.popitem(last=False))

    def _unmatched(self, key: Hashable, value: Any) -> Change:
        return Change(DELETE, key, old=value) if self.op == DELETE else Change(INSERT, key, new=value)


def window(
    old: Iterable[Record], new: Iterable[Record], *, block_rows: int = BLOCK_ROWS, aging_rows: int = AGING_ROWS
) -> Iterator[Change]:
    """The differential of snapshots `old` and `new` (streams of (key, value)), each read
    once, holding at most `2 * (block_rows + aging_rows)` records.

    >>> old = [(1, "a"), (2, "b"), (3, "c"), (4, "d")]
    >>> new = [(2, "b"), (1, "A"), (4, "d"), (5, "e")]
    >>> [(c.op, c.key) for c in window(old, new, block_rows=1, aging_rows=2)]
    [('update', 1), ('delete', 3), ('insert', 5)]

    A record moved further than the buffers reach comes out as a delete and an insert:

    >>> out = window([(1, "a"), (2, "b"), (3, "c")], [(4, "d"), (5, "e"), (1, "a")], block_rows=1, aging_rows=1)
    >>> [(c.op, c.key) for c in out if c.key == 1]
    [('delete', 1), ('insert', 1)]
    """
    olds, news = iter(old), iter(new)
    aged_old, aged_new = _Aging(aging_rows, DELETE), _Aging(aging_rows, INSERT)
    while True:
        block_old = dict(islice(olds, block_rows))
        block_new = dict(islice(news, block_rows))
        if not block_old and not block_new:
            break
        for key in [k for k in block_old if k in block_new]:  # the two blocks with each other
            yield from compared(key, block_old.pop(key), block_new.pop(key))
        for key in list(block_old):  # the old block with the new snapshot's buffer
            found, value = aged_new.take(key)
            if found:
                yield from compared(key, block_old.pop(key), value)
        for key in list(block_new):  # the new block with the old snapshot's buffer
            found, value = aged_old.take(key)
            if found:
                yield from compared(key, value, block_new.pop(key))
        yield from aged_old.add(block_old)
        yield from aged_new.add(block_new)
    yield from aged_old.drain()
    yield from aged_new.drain()
