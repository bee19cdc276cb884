"""The sort-merge outer join of two snapshots (Labio and Garcia-Molina): exact whatever the order.

Both snapshots are sorted by key, then merged: a key in both is compared, a key in one only
is a delete or an insert. A snapshot larger than `run_records` is sorted in external memory:
cut into sorted runs spilled to files in `spill_dir`, which are merged while being read
back, so memory holds one run while sorting and one block per run while merging.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from itertools import islice
from pathlib import Path

from remote_agent.differential import DELETE, INSERT, Change, Record, compared
from remote_agent.differential.spill import Spill

#: Records sorted in memory at a time (one run).
RUN_RECORDS = 500_000


def _first(record: Record):
    return record[0]


def sorted_records(records: Iterable[Record], run_records: int, spill_dir: Path | None, name: str) -> Iterator[Record]:
    """`records` in key order: sorted in memory when they fit in one run (or no `spill_dir`), else in runs.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     [k for k, _ in sorted_records([(3, 0), (1, 0), (2, 0), (0, 0)], 2, Path(d), "t")]
    [0, 1, 2, 3]
    """
    records = iter(records)
    first = sorted(islice(records, run_records), key=_first)
    if len(first) < run_records or spill_dir is None:
        yield from heapq.merge(first, sorted(records, key=_first), key=_first)
        return
    runs: list[Spill] = []
    run = first
    while run:
        spill = Spill(spill_dir / f"{name}-run-{len(runs)}")
        spill.extend(run)
        spill.close()
        runs.append(spill)
        run = sorted(islice(records, run_records), key=_first)
    yield from heapq.merge(*runs, key=_first)


def sort_merge(
    old: Iterable[Record], new: Iterable[Record], *, run_records: int = RUN_RECORDS, spill_dir: Path | None = None
) -> Iterator[Change]:
    """The differential of `old` and `new`, merged in key order.

    >>> [(c.op, c.key) for c in sort_merge([(3, "c"), (1, "a"), (2, "b")], [(2, "B"), (4, "d"), (1, "a")])]
    [('update', 2), ('delete', 3), ('insert', 4)]
    """
    a = sorted_records(old, run_records, spill_dir, "old")
    b = sorted_records(new, run_records, spill_dir, "new")
    x, y = next(a, None), next(b, None)
    while x is not None or y is not None:
        if x is not None and (y is None or _first(x) < _first(y)):
            yield Change(DELETE, x[0], old=x[1])
            x = next(a, None)
        elif y is not None and (x is None or _first(y) < _first(x)):
            yield Change(INSERT, y[0], new=y[1])
            y = next(b, None)
        elif x is not None and y is not None:
            yield from compared(x[0], x[1], y[1])
            x, y = next(a, None), next(b, None)
