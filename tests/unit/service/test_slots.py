"""The queue discipline (service/slots.py, service/fair_share.py): limits kept, sources in turn, nobody starves.

A small discrete-time model of the service: views on schedules, syncs that take a number of
ticks by source, the runner's rule (start what `startable` says whenever something ends or
arrives). The model is the runner's loop without threads or Spark; the decision is the real one.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pytest

from service.slots import Waiting, startable


@dataclass
class View:
    name: str
    sources: frozenset[str]
    every: int  # ticks from the end of a sync to the next due time
    due: int = 0
    large: bool = False
    ticks: int = 0  # its sync's length, if not its sources'


def simulate(
    views: list[View],
    ticks: int,
    duration: dict[str, int],
    max_total: int,
    max_per_source: int,
    max_large: int | None = None,
):
    """Run the schedules for `ticks`; each sync's (view, due, start) and the most syncs seen per source."""
    waiting: dict[str, tuple[View, int]] = {}
    running: dict[str, tuple[View, int]] = {}  # view -> (view, end tick)
    starts: list[tuple[str, int, int]] = []
    most: Counter[str] = Counter()
    for t in range(ticks):
        for name, (view, end) in list(running.items()):
            if end <= t:
                del running[name]
                view.due = t + view.every
        for view in views:
            if view.due <= t and view.name not in waiting and view.name not in running:
                waiting[view.name] = (view, view.due)
        queue = [
            Waiting(name, v.sources, f"{due:08d}", i, v.large) for i, (name, (v, due)) in enumerate(waiting.items())
        ]
        now_running = [Waiting(name, v.sources, "", large=v.large) for name, (v, _) in running.items()]
        for name in startable(queue, now_running, max_total, max_per_source, max_large):
            view, due = waiting.pop(name)
            running[name] = (view, t + (view.ticks or max(duration[s] for s in view.sources)))
            starts.append((name, due, t))
        assert len(running) <= max_total
        for source, count in Counter(s for v, _ in running.values() for s in v.sources).items():
            most[source] = max(most[source], count)
    return starts, most


def test_one_slow_and_one_fast_source_no_view_starves():
    """Twelve views on a slow source, twelve on a fast one, all due every tick: each source
    holds at most one sync, the fast source's views do not crowd out the slow one's, and every
    view of the slow source waits at most one round of its source's views."""
    views = [View(f"slow{i}", frozenset({"slow"}), 1) for i in range(12)]
    views += [View(f"fast{i}", frozenset({"fast"}), 1) for i in range(12)]
    starts, most = simulate(views, 2_000, {"slow": 10, "fast": 1}, max_total=2, max_per_source=1)
    assert most == {"slow": 1, "fast": 1}
    waits = {name: [] for name in (v.name for v in views)}
    for name, due, start in starts:
        waits[name].append(start - due)
    assert all(len(w) > 5 for w in waits.values()), {n: len(w) for n, w in waits.items()}
    slow_round = 12 * 10  # every other view of the slow source once
    assert max(max(w) for n, w in waits.items() if n.startswith("slow")) <= slow_round
    assert max(max(w) for n, w in waits.items() if n.startswith("fast")) <= 12 * 1 + 1


def test_a_view_over_two_busy_sources_is_not_starved_by_single_source_views():
    """A view reading a and b waits while views of a and of b keep one of them busy; as it
    holds its sources, it runs within a bounded wait instead of never."""
    views = [View("ab", frozenset({"a", "b"}), 1)]
    views += [View(f"a{i}", frozenset({"a"}), 0) for i in range(4)]
    views += [View(f"b{i}", frozenset({"b"}), 0) for i in range(4)]
    starts, most = simulate(views, 1_000, {"a": 3, "b": 5}, max_total=2, max_per_source=1)
    assert most == {"a": 1, "b": 1}
    ab = [(due, start) for name, due, start in starts if name == "ab"]
    assert len(ab) > 20
    # at worst every view of b (the slower source) once before it: those due earlier, and the one running
    assert max(start - due for due, start in ab) <= 4 * 5


@pytest.mark.parametrize("max_total,max_per_source", [(1, 1), (2, 1), (3, 2), (4, 4)])
def test_limits_hold_and_the_pool_is_used(max_total, max_per_source):
    views = [View(f"{s}{i}", frozenset({s}), 2) for s in "abc" for i in range(5)]
    starts, most = simulate(views, 500, {"a": 4, "b": 2, "c": 7}, max_total, max_per_source)
    assert max(most.values()) <= max_per_source
    # never idle while a sync that could run waits: with three sources the pool fills to min(total, 3 * per source)
    assert sum(most.values()) >= min(max_total, 3 * max_per_source)


def test_order_is_due_time_then_arrival():
    early = Waiting("late-arrival", frozenset({"x"}), "2026-01-01T00:00:00.000+00:00", 9)
    later = Waiting("first-arrival", frozenset({"y"}), "2026-01-01T00:00:05.000+00:00", 1)
    assert startable([later, early], [], 1, 1) == ["late-arrival"]
    tie = Waiting("tie", frozenset({"z"}), early.due, 3)
    assert startable([early, tie], [], 1, 1) == ["tie"]


def test_a_source_with_many_views_due_does_not_take_the_pool_from_one_with_few():
    """Forty views of `erp` due every tick and two of `crm`, two syncs a source and two in all:
    a crm view waits at most for one erp sync to end, where oldest-due-first made it wait for
    erp's backlog."""
    views = [View(f"erp{i}", frozenset({"erp"}), 1) for i in range(40)]
    views += [View(f"crm{i}", frozenset({"crm"}), 1) for i in range(2)]
    starts, most = simulate(views, 2_000, {"erp": 4, "crm": 4}, max_total=2, max_per_source=2)
    assert most["erp"] <= 2
    crm = [start - due for name, due, start in starts if name.startswith("crm")]
    assert len(crm) > 100
    assert max(crm) <= 4, max(crm)


def test_large_syncs_keep_to_their_share_and_small_ones_always_have_a_slot():
    """Two large views (a sync of 60 ticks) on sources of their own and twelve small ones (one
    tick) on a third, two syncs at once, one of them large: the large ones never run together,
    each still runs, and a small view waits at most for the others of its source, never for a
    large sync to end."""

    def views() -> list[View]:
        return [View(f"big{i}", frozenset({f"b{i}"}), 1, large=True, ticks=60) for i in range(2)] + [
            View(f"small{i}", frozenset({"s"}), 5) for i in range(12)
        ]

    starts, _ = simulate(views(), 3_000, {"s": 1}, max_total=2, max_per_source=1, max_large=1)
    spans = sorted((start, start + 60) for name, _, start in starts if name.startswith("big"))
    assert len(spans) > 20 and all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False)), spans[:4]
    small = [start - due for name, due, start in starts if name.startswith("small")]
    assert max(small) <= 12, max(small)
    # without the share both large syncs fill the pool and the small ones wait for them
    starts, _ = simulate(views(), 3_000, {"s": 1}, max_total=2, max_per_source=1)
    assert max(start - due for name, due, start in starts if name.startswith("small")) > 12
