"""The change between two snapshots of a keyed table: a snapshot differential.

The algorithms and their quality figures follow Labio and Garcia-Molina, "Efficient Snapshot
Differential Algorithms for Data Warehousing" (the snapshot-differential paper).

Each snapshot is a stream of records `(key, value)`: the key identifies the record within
its snapshot, the value is what an update changes (the whole row, or its hash b in the
compressed form <K, b>). An algorithm yields `Change`s: an update where a key is in both
snapshots with different values, a delete where only the old one has it, an insert where
only the new one does. `window` reads each snapshot once with bounded memory and may
report a moved record as a delete and an insert of one key (a *useless pair*), which
`reconcile` folds back; `sort_merge` and `partitioned_hash` are exact whatever the order.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

Record = tuple[Hashable, Any]
INSERT, DELETE, UPDATE = "insert", "delete", "update"


@dataclass(frozen=True)
class Change:
    """One line of a differential: `old` is None for an insert, `new` for a delete."""

    op: str
    key: Hashable
    old: Any = None
    new: Any = None


def compared(key: Hashable, old: Any, new: Any) -> Iterator[Change]:
    """The change, if any, of a key found in both snapshots."""
    if old != new:
        yield Change(UPDATE, key, old, new)


@dataclass
class Reconciled:
    """A differential with its useless pairs folded: the changes, and the paper's quality figures."""

    changes: list[Change]
    useless_pairs: int  # a delete and an insert of one key with equal values: dropped
    split_updates: int  # a delete and an insert of one key with different values: one update


def reconcile(changes: Iterable[Change]) -> Reconciled:
    """Fold each delete and insert of one key into what they mean: nothing when the values
    are equal (a record that moved further than the window reached), else an update.

    >>> out = reconcile([Change(DELETE, 1, old="a"), Change(INSERT, 2, new="b"), Change(INSERT, 1, new="a"),
    ...                  Change(INSERT, 3, new="c"), Change(DELETE, 3, old="x")])
    >>> [(c.op, c.key) for c in out.changes], out.useless_pairs, out.split_updates
    ([('update', 3), ('insert', 2)], 1, 1)
    """
    pending: dict[Hashable, Change] = {}
    out: list[Change] = []
    useless = split = 0
    for change in changes:
        if change.op == UPDATE:
            out.append(change)
            continue
        other = pending.pop(change.key, None)
        if other is None:
            pending[change.key] = change
            continue
        if other.op == change.op:
            raise ValueError(f"key {change.key!r} is {change.op}d twice: a snapshot holds it twice")
        gone, came = (other, change) if other.op == DELETE else (change, other)
        if gone.old == came.new:
            useless += 1
        else:
            split += 1
            out.append(Change(UPDATE, change.key, gone.old, came.new))
    out.extend(pending.values())
    return Reconciled(out, useless, split)


def distance(old: list[Record], new: list[Record]) -> float:
    """The snapshot-differential paper's distance of two snapshots: how far the records of one key moved between them,
    summed, over the most they could move (0: same order; 1: reversed).

    >>> distance([(1, "a"), (2, "b")], [(1, "a"), (2, "b")]), distance([(1, 0), (2, 0), (3, 0)], [(3, 0), (2, 0), (1, 0)])
    (0.0, 0.888...)
    """
    where = {key: i for i, (key, _) in enumerate(new)}
    moved = sum(abs(i - where[key]) for i, (key, _) in enumerate(old) if key in where)
    most = max(len(old), len(new)) ** 2 / 2
    return moved / most if most else 0.0
