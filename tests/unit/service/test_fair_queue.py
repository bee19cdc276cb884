"""FairQueue (service/fair_share.py) gives fair_order's order, and startable the same choice on it.

fair_order defines the order; the runner keeps its queue in a FairQueue and asks startable
on it at each sync's end. Over random queues, running sets and limits, both must answer as the
definition does, also after syncs leave the queue (started or cancelled).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from service.fair_share import FairQueue, fair_order
from service.slots import Waiting, startable

SOURCES = "abcde"

#: a sync: its sources (none to three of a few, so that they collide), its due time out of a
#: few (ties), its seq (ties too: arrival order breaks them) and its size
syncs = st.lists(
    st.tuples(
        st.frozensets(st.sampled_from(SOURCES), max_size=3),
        st.sampled_from(["00", "01", "02", "05"]),
        st.integers(0, 3),
        st.booleans(),
    ),
    max_size=40,
)
running_syncs = st.lists(
    st.tuples(st.frozensets(st.sampled_from(SOURCES), min_size=1, max_size=2), st.booleans()), max_size=6
)


def _queue(specs) -> tuple[FairQueue[Waiting], list[Waiting]]:
    """The syncs `specs` as a FairQueue and as the list the definition takes, in arrival order."""
    waiting = [Waiting(f"w{i}", sources, due, seq, large) for i, (sources, due, seq, large) in enumerate(specs)]
    queue: FairQueue[Waiting] = FairQueue()
    for sync in waiting:
        queue.add(sync)
    return queue, waiting


def _running(specs) -> list[Waiting]:
    return [Waiting(f"r{i}", sources, "", large=large) for i, (sources, large) in enumerate(specs)]


@settings(max_examples=150, deadline=None)
@given(syncs, running_syncs, st.data())
def test_the_kept_order_is_fair_orders_also_as_syncs_leave(specs, running_specs, data):
    queue, waiting = _queue(specs)
    running = _running(running_specs)
    assert [w.id for w in queue.order(running)] == [w.id for w in fair_order(waiting, running)]
    gone = data.draw(st.sets(st.sampled_from([w.id for w in waiting])) if waiting else st.just(set()))
    for sync in waiting:
        if sync.id in gone:
            queue.remove(sync)
    left = [w for w in waiting if w.id not in gone]
    assert len(queue) == len(left)
    order = list(queue.order(running))
    assert [w.id for w in order] == [w.id for w in fair_order(left, running)]
    if left:  # the first pick at a sync's end
        assert order[0].id == fair_order(left, running)[0].id


@settings(max_examples=200, deadline=None)
@given(syncs, running_syncs, st.integers(1, 8), st.integers(1, 3), st.none() | st.integers(1, 4))
def test_the_choice_is_startables(specs, running_specs, max_total, max_per_source, max_large):
    queue, waiting = _queue(specs)
    running = _running(running_specs)
    kept = startable(queue, running, max_total, max_per_source, max_large)
    assert kept == startable(waiting, running, max_total, max_per_source, max_large)


def test_closed_sources_and_a_closed_large_lane_are_left_out():
    """What the decision can no longer start is never looked at: the lanes of a full source
    (a sync that reads it and an open source still comes, and holds the open one), and large syncs."""
    queue, _ = _queue(
        [
            (frozenset({"a"}), "00", 0, False),
            (frozenset({"a", "b"}), "01", 0, False),
            (frozenset({"b"}), "02", 0, True),
            (frozenset({"b"}), "03", 0, False),
        ]
    )
    assert [w.id for w in queue.order([], closed=lambda s: s == "a")] == ["w1", "w2", "w3"]
    assert [w.id for w in queue.order([], closed=lambda s: s == "a", large_closed=lambda: True)] == ["w1", "w3"]
    assert [w.id for w in queue.order([], closed=lambda s: True)] == []
