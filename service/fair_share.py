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

Both are pure: the runner (jobs.py) calls slots.py's decision, which orders the queue here:
fair_order defines the order; FairQueue keeps the queue so that the same order's first syncs
are found without sorting it all again each time a slot frees.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, Protocol, TypeVar


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


class Sized(Queued, Protocol):
    """What the kept order needs besides: whether the sync is large (slots.Waiting is one)."""

    @property
    def large(self) -> bool: ...


S = TypeVar("S", bound=Sized)


class _Lane:
    """One source's waiting syncs of one size, sorted by (due, seq, arrival)."""

    __slots__ = ("keys", "syncs")

    def __init__(self) -> None:
        self.keys: list[tuple[str, int, int]] = []
        self.syncs: list = []


class FairQueue(Generic[S]):
    """The waiting syncs, kept sorted by source, so that fair_order's next ones are found at the heads.

    fair_order sorts the whole queue, O(n log n), every time a slot frees. Here each source
    keeps its waiting syncs sorted by due time (a sync of several sources is in each of their
    lists, a sync of none in a list of its own), in two lanes, small and large. A sync's turn
    on a source is then its place in that source's lanes plus the source's running syncs, found
    by bisection; and no sync at place k of a source can have a turn below the source's running
    count + k. `order` merges the lanes lazily on those bounds: it yields fair_order's order
    one sync at a time at O(log) each, after O(sources) to start. Insertion order breaks ties of
    (due, seq), as fair_order's stable sorts do on a queue listed in arrival order.

    >>> from service.slots import Waiting
    >>> queue = FairQueue()
    >>> for w in [Waiting(f"big{i}", frozenset({"big"}), f"0{i}") for i in range(3)]:
    ...     queue.add(w)
    >>> queue.add(Waiting("one", frozenset({"small"}), "09"))
    >>> [w.id for w in queue.order([])]
    ['big0', 'one', 'big1', 'big2']
    >>> queue.remove(queue.get("big0"))
    >>> [w.id for w in queue.order([Waiting("r", frozenset({"big"}), "00")])]
    ['one', 'big1', 'big2']
    >>> [w.id for w in queue.order([], closed=lambda source: source == "big")]  # big's need not be looked at
    ['one']
    """

    def __init__(self) -> None:
        #: each source's lanes, [small, large]; None: the syncs that read no source
        self._lanes: dict[str | None, tuple[_Lane, _Lane]] = {}
        self._syncs: dict[str, tuple[S, tuple[str, int, int]]] = {}
        self._arrivals = itertools.count()

    def __len__(self) -> int:
        return len(self._syncs)

    def __contains__(self, sync_id: object) -> bool:
        return sync_id in self._syncs

    def get(self, sync_id: str) -> S:
        return self._syncs[sync_id][0]

    def add(self, sync: S) -> None:
        """Queue `sync` (its id not queued yet): O(sources of it × log n)."""
        key = (sync.due, sync.seq, next(self._arrivals))
        self._syncs[sync.id] = (sync, key)
        for source in sync.sources or (None,):
            lane = self._lanes.setdefault(source, (_Lane(), _Lane()))[sync.large]
            at = bisect.bisect_left(lane.keys, key)
            lane.keys.insert(at, key)
            lane.syncs.insert(at, sync)

    def remove(self, sync: S) -> None:
        """Take `sync` out of the queue (it starts, or is cancelled)."""
        _, key = self._syncs.pop(sync.id)
        for source in sync.sources or (None,):
            lanes = self._lanes[source]
            lane = lanes[sync.large]
            at = bisect.bisect_left(lane.keys, key)
            del lane.keys[at], lane.syncs[at]
            if not lanes[0].keys and not lanes[1].keys:
                del self._lanes[source]

    def clear(self) -> None:
        self._lanes.clear()
        self._syncs.clear()

    def order(
        self,
        running: Sequence[Queued],
        closed: Callable[[str], bool] = lambda source: False,
        large_closed: Callable[[], bool] = lambda: False,
    ) -> Iterator[S]:
        """The waiting syncs in fair_order(waiting, running)'s order, lazily.

        Args:
            running: the running syncs.
            closed: whether nothing more can start on a source (a caller's decision so far):
                the syncs all of whose sources are closed are left out, unlooked at.
            large_closed: whether no more large syncs can start: large syncs are left out then.
        """
        busy = Counter(source for sync in running for source in sync.sources)
        heap: list[tuple] = []
        for source, lanes in self._lanes.items():
            for large in (0, 1):
                if lanes[large].keys:
                    heap.append(self._bound(source, lanes, large, 0, busy))
        heapq.heapify(heap)
        pushed: set[str] = set()
        while heap:
            entry = heapq.heappop(heap)
            if entry[4]:  # a sync, at its turn: no sync still unlooked at comes before it
                sync = entry[5]
                if not (sync.large and large_closed()):
                    yield sync
                continue
            source, large, at = entry[5:]
            if (source is not None and closed(source)) or (large and large_closed()):
                continue  # every sync of this lane still to come would be passed over
            lanes = self._lanes[source]
            sync = lanes[large].syncs[at]
            if sync.id not in pushed:
                pushed.add(sync.id)
                heapq.heappush(heap, (self._turn(sync, busy), *entry[1:4], 1, sync))
            if at + 1 < len(lanes[large].keys):
                heapq.heappush(heap, self._bound(source, lanes, large, at + 1, busy))

    def _bound(self, source: str | None, lanes: tuple[_Lane, _Lane], large: int, at: int, busy: Counter) -> tuple:
        """The heap entry of a lane from place `at` on: the least turn any of its syncs there may have."""
        key = lanes[large].keys[at]
        if source is None:
            return (0, *key, 0, None, large, at)
        place = at + bisect.bisect_left(lanes[1 - large].keys, key)
        return (busy[source] + place, *key, 0, source, large, at)

    def _turn(self, sync: S, busy: Counter) -> int:
        """fair_order's turn of a queued sync: its latest among its sources."""
        key = self._syncs[sync.id][1]
        return max(
            (
                busy[source] + sum(bisect.bisect_left(lane.keys, key) for lane in self._lanes[source])
                for source in sync.sources
            ),
            default=0,
        )
