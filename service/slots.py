"""Which queued syncs start now: a bounded pool, a few syncs per source, a share for large ones, a fair order.

A sync reads from every source its view names, so it needs a slot on each of them and
one of the pool's. The queue is served in fair_share.py's order: sources take turns, and
within a source in order of due time (a scheduled sync: when its schedule made it due;
one started through the API: when it was asked for), so a busy source delays only the
syncs that read it. A large sync also needs one of the few slots large syncs may hold at
once (fair_share.large_limit); one that finds them taken waits without holding its
sources, so the small syncs of its source run meanwhile. A sync that cannot start
because one of its sources is full *holds* its sources: no later sync may take them, so
it starts as soon as the syncs before it there end (nothing waits for ever behind a stream
of younger syncs), while later syncs of other sources fill the pool's free slots.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from service.fair_share import FairQueue, fair_order


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
    #: its view is large (fair_share.py): it needs one of the large syncs' slots too
    large: bool = False


def startable(
    waiting: Sequence[Waiting] | FairQueue[Waiting],
    running: Sequence[Waiting],
    max_total: int,
    max_per_source: int,
    max_large: int | None = None,
) -> list[str]:
    """The ids of the waiting syncs to start now, in the order to start them.

    Args:
        waiting: the queued syncs, in any order (ties of due time and seq: in this order); or
            kept in a FairQueue, which finds the same ones at the heads of its lanes instead of
            sorting the whole queue (the runner's, at a sync's end with thousands queued).
        running: the running syncs (as they waited).
        max_total: syncs at once (SERVICE_MAX_CONCURRENT_SYNCS).
        max_per_source: syncs at once that read one source (SERVICE_MAX_SYNCS_PER_SOURCE).
        max_large: large syncs at once (fair_share.large_limit); None: no limit of their own.

    >>> a1, a2 = Waiting("a1", frozenset({"a"}), "1"), Waiting("a2", frozenset({"a"}), "2")
    >>> b3 = Waiting("b3", frozenset({"b"}), "3")
    >>> startable([b3, a2, a1], [], 2, 1)  # oldest first, one per source
    ['a1', 'b3']
    >>> startable([b3, a2, a1], [a1], 2, 1)  # a is full; b takes the free slot
    ['b3']
    >>> ab0 = Waiting("ab0", frozenset({"a", "b"}), "0")
    >>> startable([ab0, b3], [a1], 2, 1)  # ab0 waits for a and holds b meanwhile
    []
    >>> startable([a1, a2, b3], [Waiting("c", frozenset({"c"}), "0")], 2, 2)
    ['a1']
    >>> big = Waiting("big", frozenset({"b"}), "0", large=True)
    >>> startable([big, a1], [Waiting("c", frozenset({"c"}), "0", large=True)], 2, 1, 1)  # a small one takes the slot
    ['a1']
    >>> queue = FairQueue()
    >>> for sync in (b3, a2):
    ...     queue.add(sync)
    >>> startable(queue, [a1], 2, 1)  # the same decision, taken on the queue kept in order
    ['b3']
    """
    decision = _Decision(running, max_total, max_per_source, max_large)
    if decision.full:  # a full pool starts nothing: the queue is not ordered for nothing (a submit while it is behind)
        return []
    if isinstance(waiting, FairQueue):
        return decision.take(waiting.order(running, decision.closed, decision.large_closed))
    return decision.take(fair_order(waiting, running))


class _Decision:
    """One decision of what starts: the slots left, the sources full or held, as the fair order is walked."""

    def __init__(self, running: Sequence[Waiting], max_total: int, max_per_source: int, max_large: int | None):
        self.free = max_total - len(running)
        self.busy = Counter(source for sync in running for source in sync.sources)
        self.max_per_source = max_per_source
        self.large_free = max_total if max_large is None else max_large - sum(sync.large for sync in running)
        #: sources a sync that could not start goes first on, as soon as they free
        self.held: set[str] = set()

    @property
    def full(self) -> bool:
        return self.free <= 0

    def closed(self, source: str) -> bool:
        """Whether no later sync of `source` can start in this decision."""
        return source in self.held or self.busy[source] >= self.max_per_source

    def large_closed(self) -> bool:
        return self.large_free <= 0

    def take(self, order: Iterable[Waiting]) -> list[str]:
        """The ids to start, walking the waiting syncs in fair order."""
        chosen: list[str] = []
        for sync in order:
            if self.full:
                break
            if sync.large and self.large_closed():
                continue  # it waits for a large sync to end, holding nothing: its sources serve small ones
            if any(self.closed(s) for s in sync.sources):
                self.held |= sync.sources  # it goes first on these as soon as they free
                continue
            chosen.append(sync.id)
            self.busy.update(sync.sources)
            self.free -= 1
            self.large_free -= sync.large
        return chosen
