"""Which queued syncs start now: a bounded pool, a few syncs per source, oldest due first.

A sync reads from every source its view names, so it needs a slot on each of them and
one of the pool's. The queue is served in order of due time (a scheduled sync: when its
schedule made it due; one started through the API: when it was asked for), whatever its
source, so a busy source delays only the syncs that read it. A sync that cannot start
because one of its sources is full *holds* its sources: no later sync may take them, so
it starts as soon as the syncs before it there end (nothing waits for ever behind a stream
of younger syncs), while later syncs of other sources fill the pool's free slots.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Waiting:
    """A queued sync as the decision sees it."""

    id: str
    #: the sources its view reads (one slot on each)
    sources: frozenset[str]
    #: when it became due (ISO 8601 UTC, comparable as text): the order it is served in
    due: str
    #: arrival order, to break ties of `due`
    seq: int = 0


def startable(
    waiting: Sequence[Waiting], running: Sequence[frozenset[str]], max_total: int, max_per_source: int
) -> list[str]:
    """The ids of the waiting syncs to start now, in the order to start them.

    Args:
        waiting: the queued syncs, in any order.
        running: the sources of each running sync.
        max_total: syncs at once (SERVICE_MAX_CONCURRENT_SYNCS).
        max_per_source: syncs at once that read one source (SERVICE_MAX_SYNCS_PER_SOURCE).

    >>> a1, a2 = Waiting("a1", frozenset({"a"}), "1"), Waiting("a2", frozenset({"a"}), "2")
    >>> b3 = Waiting("b3", frozenset({"b"}), "3")
    >>> startable([b3, a2, a1], [], 2, 1)  # oldest first, one per source
    ['a1', 'b3']
    >>> startable([b3, a2, a1], [frozenset({"a"})], 2, 1)  # a is full; b takes the free slot
    ['b3']
    >>> ab0 = Waiting("ab0", frozenset({"a", "b"}), "0")
    >>> startable([ab0, b3], [frozenset({"a"})], 2, 1)  # ab0 waits for a and holds b meanwhile
    []
    >>> startable([a1, a2, b3], [frozenset({"c"})], 2, 2)
    ['a1']
    """
    busy = Counter(source for sources in running for source in sources)
    free = max_total - len(running)
    held: set[str] = set()
    chosen: list[str] = []
    for sync in sorted(waiting, key=lambda w: (w.due, w.seq)):
        if free <= 0:
            break
        if sync.sources & held or any(busy[s] >= max_per_source for s in sync.sources):
            held |= sync.sources  # it goes first on these as soon as they free
            continue
        chosen.append(sync.id)
        busy.update(sync.sources)
        free -= 1
    return chosen
