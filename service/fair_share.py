"""Fair share of the sync pool: sources take turns, and large syncs keep to a share of it.

Two rules make the queue fair when views differ by source and by size:

- **Turns by source.** A waiting sync's turn is how many syncs of its source are ahead of
  it: those running, and those waiting that became due before it. The queue is served by
  turn, then by due time: every source's oldest waiting sync before any source's second, so
  a source with a hundred views due does not take the pool from one with a single view due.
  Within a source the order stays oldest due first. A sync that reads several sources takes
  its latest turn among them.
- **A share for large syncs.** A view whose latest sync left at least SERVICE_LARGE_SYNC_ROWS
  rows is large; at most `large_limit` large syncs run at once, and the pool's other slots
  are kept for small ones, so a small view's sync never waits for a large one to end.

Both are pure: the runner (jobs.py) calls slots.py's decision, which orders the queue here.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Protocol, TypeVar


class Queued(Protocol):
    """What the order needs of a queued sync (slots.Waiting is one)."""

    @property
    def id(self) -> str: ...

    @property
    def sources(self) -> frozenset[str]: ...

    @property
    def due(self) -> str: ...

    @property
    def seq(self) -> int: ...


Q = TypeVar("Q", bound=Queued)


def large_limit(pool: int, share: float) -> int:
    """Large syncs that may run at once: `share` of the pool, at least one, and fewer than the
    pool whenever it has two slots or more (one is always left for small syncs).

    >>> [large_limit(pool, 0.5) for pool in (1, 2, 3, 4, 8)]
    [1, 1, 1, 2, 4]
    >>> large_limit(4, 1.0), large_limit(4, 0.0)
    (3, 1)
    """
    if pool <= 1:
        return 1
    return min(pool - 1, max(1, math.floor(pool * share)))


def fair_order(waiting: Sequence[Q], running: Sequence[Queued]) -> list[Q]:
    """The waiting syncs in the order they are offered slots: by source turn, then due time, then arrival.

    >>> from service.slots import Waiting
    >>> big = [Waiting(f"big{i}", frozenset({"big"}), f"0{i}") for i in range(3)]
    >>> one = Waiting("one", frozenset({"small"}), "09")
    >>> [w.id for w in fair_order([*big, one], [])]  # small's only sync before big's second
    ['big0', 'one', 'big1', 'big2']
    >>> [w.id for w in fair_order([*big, one], [Waiting("r", frozenset({"big"}), "00")])]
    ['one', 'big0', 'big1', 'big2']
    >>> both = Waiting("both", frozenset({"big", "small"}), "00")
    >>> [w.id for w in fair_order([both, *big, one], [])]  # first on both sources
    ['both', 'big0', 'one', 'big1', 'big2']
    """
    busy = Counter(source for sync in running for source in sync.sources)
    ahead: Counter[str] = Counter()
    turn = {}
    for sync in sorted(waiting, key=lambda w: (w.due, w.seq)):
        turn[sync.id] = max((busy[s] + ahead[s] for s in sync.sources), default=0)
        ahead.update(sync.sources)
    return sorted(waiting, key=lambda w: (turn[w.id], w.due, w.seq))
