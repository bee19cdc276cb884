"""The window algorithm: a snapshot differential reading each snapshot once.

From Labio and Garcia-Molina, "Efficient Snapshot Differential Algorithms for Data Warehousing".

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

import numpy as np

from remote_agent.differential import DELETE, INSERT, UPDATE, Change, Record, compared

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


Block = tuple[np.ndarray, np.ndarray]


def _blocks(batches: Iterable[Block], rows: int) -> Iterator[Block]:
    """The (keys, values) arrays of `batches` cut again into blocks of `rows` records
    (slices of a batch where a block lies within one; copied only where it spans two).

    >>> [k.tolist() for k, _ in _blocks([(np.arange(5), np.arange(5)), (np.arange(5, 7), np.arange(2))], 3)]
    [[0, 1, 2], [3, 4, 5], [6]]
    """
    keys: list[np.ndarray] = []
    values: list[np.ndarray] = []
    held = 0
    for k, v in batches:
        start = 0
        if held:  # complete the block begun in the batches before
            start = min(rows - held, len(k))
            keys.append(k[:start])
            values.append(v[:start])
            held += start
            if held < rows:
                continue
            yield np.concatenate(keys), np.concatenate(values)
            keys, values, held = [], [], 0
        while len(k) - start >= rows:
            yield k[start : start + rows], v[start : start + rows]
            start += rows
        if start < len(k):
            keys, values, held = [k[start:]], [v[start:]], len(k) - start
    if held:
        yield np.concatenate(keys), np.concatenate(values)


def window_blocks(
    old: Iterable[Block], new: Iterable[Block], *, block_rows: int = BLOCK_ROWS, aging_rows: int = AGING_ROWS
) -> Iterator[Change]:
    """`window` over records given as arrays, a batch at a time: (keys, values) of one
    numeric key column and of the values compared (row hashes). Each step matches the two
    input blocks and the two aging buffers with each other in one NumPy set intersection
    (records of the two buffers never match each other: they met before), then keeps in
    each buffer its `aging_rows` youngest unmatched records, the older leaving as deletes
    or inserts. The same differential as `window` of the same records and block size,
    without a Python operation per record.

    >>> old = [(np.array([1, 2, 3, 4]), np.array([10, 20, 30, 40]))]
    >>> new = [(np.array([2, 1]), np.array([20, 11])), (np.array([4, 5]), np.array([40, 50]))]
    >>> [(c.op, c.key) for c in window_blocks(old, new, block_rows=1, aging_rows=2)]
    [('update', 1), ('delete', 3), ('insert', 5)]
    """
    olds, news = _blocks(old, block_rows), _blocks(new, block_rows)
    empty = (np.empty(0, np.int64), np.empty(0, np.uint64))
    aged_old, aged_new = empty, empty  # unmatched records, oldest first
    while True:
        ko, vo = next(olds, empty)
        kn, vn = next(news, empty)
        if not len(ko) and not len(kn):
            break
        ko, vo = np.concatenate([aged_old[0], ko]), np.concatenate([aged_old[1], vo])
        kn, vn = np.concatenate([aged_new[0], kn]), np.concatenate([aged_new[1], vn])
        _, at_old, at_new = np.intersect1d(ko, kn, assume_unique=True, return_indices=True)
        differ = np.flatnonzero(vo[at_old] != vn[at_new])
        for key, was, now in zip(
            ko[at_old[differ]].tolist(), vo[at_old[differ]].tolist(), vn[at_new[differ]].tolist(), strict=True
        ):
            yield Change(UPDATE, key, was, now)
        aged_old, gone = _age(ko, vo, at_old, aging_rows)
        aged_new, came = _age(kn, vn, at_new, aging_rows)
        for key, value in zip(*(a.tolist() for a in gone), strict=True):
            yield Change(DELETE, key, old=value)
        for key, value in zip(*(a.tolist() for a in came), strict=True):
            yield Change(INSERT, key, new=value)
    for key, value in zip(*(a.tolist() for a in aged_old), strict=True):
        yield Change(DELETE, key, old=value)
    for key, value in zip(*(a.tolist() for a in aged_new), strict=True):
        yield Change(INSERT, key, new=value)


def _age(keys: np.ndarray, values: np.ndarray, matched: np.ndarray, capacity: int) -> tuple[Block, Block]:
    """The unmatched records split into the `capacity` youngest (kept) and the older (leaving)."""
    rest = np.ones(len(keys), bool)
    rest[matched] = False
    keys, values = keys[rest], values[rest]
    cut = max(len(keys) - capacity, 0)
    return (keys[cut:], values[cut:]), (keys[:cut], values[:cut])
