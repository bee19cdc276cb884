"""The partitioned hash outer join of two snapshots (Labio and Garcia-Molina): exact whatever the order.

Both snapshots are split by a hash of the key into `partitions` parts, so that one part of
the old snapshot fits in memory as a hash table; each part of the new snapshot probes its
table, and what is left in a table at the end was deleted. With `spill_dir` the parts are
files of the agent's own (external memory: one part's table and a block per part in
memory); without, lists in memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from remote_agent.differential import DELETE, INSERT, Change, Record, compared
from remote_agent.differential.spill import Spill

#: Parts the snapshots are split into.
PARTITIONS = 16


def _split(records: Iterable[Record], partitions: int, spill_dir: Path | None, name: str) -> list:
    parts: list[Spill] | list[list[Record]]
    if spill_dir:
        parts = [Spill(spill_dir / f"{name}-part-{i}") for i in range(partitions)]
    else:
        in_memory: list[list[Record]] = [[] for _ in range(partitions)]
        parts = in_memory
    for record in records:
        parts[hash(record[0]) % partitions].append(record)
    for part in parts:
        if isinstance(part, Spill):
            part.close()
    return parts


def partitioned_hash(
    old: Iterable[Record], new: Iterable[Record], partitions: int = PARTITIONS, *, spill_dir: Path | None = None
) -> Iterator[Change]:
    """The differential of `old` and `new`, part by part.

    >>> sorted((c.op, c.key) for c in partitioned_hash([(1, "a"), (2, "b"), (3, "c")], [(2, "B"), (4, "d"), (1, "a")], 2))
    [('delete', 3), ('insert', 4), ('update', 2)]
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     sorted((c.op, c.key) for c in partitioned_hash([(1, "a"), (2, "b")], [(2, "B"), (3, "c")], 4, spill_dir=Path(d)))
    [('delete', 1), ('insert', 3), ('update', 2)]
    """
    olds = _split(old, partitions, spill_dir, "old")
    news = _split(new, partitions, spill_dir, "new")
    for part_old, part_new in zip(olds, news, strict=True):
        table = dict(part_old)
        for key, value in part_new:
            if key in table:
                yield from compared(key, table.pop(key), value)
            else:
                yield Change(INSERT, key, new=value)
        for key, value in table.items():
            yield Change(DELETE, key, old=value)
