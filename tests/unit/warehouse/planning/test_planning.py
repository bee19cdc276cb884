"""Planning: probabilities from the statistics tables, the cost model and group selection.

Most cases use COST = (Φ_t 64, Φ_k 16, Φ_h 8) with dyadic probabilities, so every value is
exact in binary floating point and can be asserted with ==. For that model

    μ(n) = 48n − 8,  EB(n, P) = μ(n)·P − (16n + 8)(1 − P) = 64n·P − 16n − 8.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warehouse.planning.cost_model import (
    MAX_GROUP_SIZE,
    ClosedGroup,
    CostModel,
    Group,
    GroupBuilder,
    deletion_probability,
    expected_benefit,
    group_survival,
    saving_if_identical,
    saving_ratio,
    select_groups,
    site_prior,
    update_probability,
)

COST = CostModel(tuple_bytes=64, key_bytes=16, hash_bytes=8)
PAPER = CostModel(tuple_bytes=100, key_bytes=10, hash_bytes=20)  # 160-bit hash = 20 bytes


# --- update and deletion probabilities ---------------------------------------------------


@pytest.mark.parametrize(
    ("tno", "uno", "expected"),
    [
        (1, 1, 1.0),  # a new tuple counts as updated: the paper never groups it
        (4, 2, 0.5),
        (5, 1, 0.2),
        (8, 8, 1.0),
    ],
)
def test_update_probability_paper(tno, uno, expected):
    assert update_probability(tno, uno) == expected


@pytest.mark.parametrize(
    ("tno", "uno", "prior", "expected"),
    [
        (1, 1, 0.25, 0.25),  # nothing observed: the prior itself
        (5, 1, 0.25, 0.05),  # 4 quiet syncs: (0 + 0.25) / 5
        (4, 4, 0.5, 0.875),  # 3 updates in 3 syncs: (3 + 0.5) / 4
        (2, 1, 0.0, 0.0),
    ],
)
def test_update_probability_with_prior(tno, uno, prior, expected):
    assert update_probability(tno, uno, prior) == expected


@pytest.mark.parametrize(("tno", "uno"), [(1, 1), (4, 2), (7, 3), (9, 9)])
def test_prior_one_is_the_paper_estimator(tno, uno):
    assert update_probability(tno, uno, prior=1.0) == update_probability(tno, uno)


@pytest.mark.parametrize(
    ("tno", "uno", "prior"),
    [(0, 0, None), (0, 1, None), (3, 0, None), (3, 4, None), (3, 1, -0.1), (3, 1, 1.5), (3, 1, math.nan)],
)
def test_update_probability_rejects_bad_input(tno, uno, prior):
    with pytest.raises(ValueError):
        update_probability(tno, uno, prior)


def test_site_prior():
    assert site_prior(40, 10, default=0.5) == 0.25
    assert site_prior(0, 0, default=0.3) == 0.3  # nothing observed yet
    assert site_prior(7, 0, default=0.3) == 0.0
    for bad in [(-1, 0, 0.5), (3, 4, 0.5), (3, 1, 1.2)]:
        with pytest.raises(ValueError):
            site_prior(*bad)


def test_deletion_probability():
    # ratios 10/100 = 0.1 and 0/50 = 0; the empty snapshot has no ratio: mean 0.05
    assert deletion_probability([(100, 10), (50, 0), (0, 0)]) == 0.05
    # (1/4 + 4/8) / 2 = 0.375
    assert deletion_probability([(4, 1), (8, 4)]) == 0.375
    assert deletion_probability([]) == 0.0
    assert deletion_probability([(0, 0)]) == 0.0
    for bad in [[(4, 5)], [(4, -1)], [(-1, 0)]]:
        with pytest.raises(ValueError):
            deletion_probability(bad)


def test_group_survival():
    assert group_survival([0.5, 0.0], p_delete=0.5) == 0.125  # 0.5² · 0.5 · 1
    assert group_survival([0.25, 0.5], p_delete=0.0) == 0.375  # 0.75 · 0.5
    assert group_survival([], p_delete=0.3) == 1.0
    assert group_survival([0.0], p_delete=1.0) == 0.0
    with pytest.raises(ValueError):
        group_survival([1.5], p_delete=0.0)
    with pytest.raises(ValueError):
        group_survival([0.5], p_delete=-0.5)


# --- cost model --------------------------------------------------------------------------


def test_paper_example():
    # 20 tuples of 800 bits, 80-bit keys, a 160-bit hash, identical group:
    # 800·20 − (80·20 + 160) = 14,240 bits = 1,780 bytes, 14,240 / 16,000 = 89 %
    assert saving_if_identical(20, PAPER) == 1780.0
    assert expected_benefit(20, 1.0, PAPER) == 1780.0
    assert expected_benefit(20, 1.0, PAPER) * 8 == 14240.0
    assert saving_ratio(20, PAPER) == 0.89


def test_expected_benefit_weighs_the_loss():
    # μ(2) = 88, loss 16·2 + 8 = 40; P = 0.5: 88/2 − 40/2 = 24
    assert expected_benefit(2, 0.5, COST) == 24.0
    assert expected_benefit(2, 0.0, COST) == -40.0
    assert expected_benefit(20, 0.0, PAPER) == -220.0  # 10·20 + 20 bytes sent for nothing


@pytest.mark.parametrize(("n", "survival"), [(0, 1.0), (-1, 1.0), (1, 1.5), (1, -0.1), (1, math.nan)])
def test_expected_benefit_rejects_bad_input(n, survival):
    with pytest.raises(ValueError):
        expected_benefit(n, survival, COST)


@pytest.mark.parametrize("sizes", [(0, 1, 1), (10, -1, 1), (10, 1, math.inf), (-5, 1, 1)])
def test_cost_model_rejects_bad_sizes(sizes):
    with pytest.raises(ValueError):
        CostModel(*sizes)


def test_cost_model_stores_floats():
    assert CostModel(100, 10, 20) == CostModel(100.0, 10.0, 20.0)
    assert isinstance(CostModel(100, 10, 20).tuple_bytes, float)


# --- group selection ---------------------------------------------------------------------


def test_empty_input():
    assert select_groups([], p_delete=0.0, cost=COST) == []
    assert GroupBuilder(0.0, COST).finish() == []


def test_stops_at_first_tuple_when_it_is_sure_to_change():
    # p = 1: P = 0, EB(1) = −(16 + 8) = −24 <= 0: nothing is grouped
    assert select_groups([1.0, 1.0, 1.0], p_delete=0.0, cost=COST) == []
    # a certain deletion does the same to a stable tuple
    assert select_groups([0.0, 0.0], p_delete=1.0, cost=COST) == []


def test_stops_when_a_tuple_is_smaller_than_its_key_and_hash():
    # EB(1, P=1) = 10 − 8 − 20 = −18: not worth a hash even if nothing changes
    assert select_groups([0.0], p_delete=0.0, cost=CostModel(10, 8, 20)) == []


def test_zero_benefit_stops_too():
    # p = 0.625: P = 0.375, EB(1) = 64·0.375 − 24 = 0 -> stop (EB <= 0)
    assert select_groups([0.625], p_delete=0.0, cost=COST) == []


def test_cuts_where_the_benefit_would_fall():
    # [0]          EB(1, P=1)     = 64 − 24        = 40
    # [0, 0]       EB(2, P=1)     = 128 − 40       = 88  > 40: grow
    # [0, 0, .5]   EB(3, P=.5)    = 96 − 56        = 40  < 88: cut before the third tuple
    # [.5]         EB(1, P=.5)    = 32 − 24        = 8   > 0: new group
    # [.5, .5]     EB(2, P=.25)   = 32 − 40        = −8  < 8: cut
    # [.5]         EB(1, P=.5)    = 8              > 0: new group
    # [.5, .75]    EB(2, P=.125)  = 16 − 40        = −24 < 8: cut
    # [.75]        EB(1, P=.25)   = 16 − 24        = −8 <= 0: stop, .75 and 0.875 ungrouped
    probs = [0.0, 0.0, 0.5, 0.5, 0.75, 0.875]
    assert select_groups(probs, p_delete=0.0, cost=COST) == [
        Group(start=0, size=2, survival=1.0, benefit=88.0),
        Group(start=2, size=1, survival=0.5, benefit=8.0),
        Group(start=3, size=1, survival=0.5, benefit=8.0),
    ]


def test_grows_while_benefit_rises_with_deletions():
    # The paper's rule. p_delete = 0.25, every p = 0: P(n) = 0.75^n
    # EB(1) = 64·0.75 − 24 = 24; EB(2) = 128·0.5625 − 40 = 32 > 24: grow
    # EB(3) = 192·0.421875 − 56 = 25 < 32: cut; the third tuple alone: 24
    assert select_groups([0.0, 0.0, 0.0], p_delete=0.25, cost=COST, criterion="group") == [
        Group(start=0, size=2, survival=0.5625, benefit=32.0),
        Group(start=2, size=1, survival=0.75, benefit=24.0),
    ]


def test_per_tuple_rule_stops_growing_where_benefit_per_tuple_falls():
    # Same tuples, default rule: EB(1)/1 = 24, EB(2)/2 = 16 < 24: cut at every tuple.
    # Three groups of one save 72 in all, against 32 + 24 = 56 for the paper's plan.
    groups = select_groups([0.0, 0.0, 0.0], p_delete=0.25, cost=COST)
    assert groups == [Group(start=i, size=1, survival=0.75, benefit=24.0) for i in range(3)]
    assert sum(g.benefit for g in groups) > 56.0


def test_per_tuple_rule_beats_the_paper_rule_on_a_long_stable_run():
    # 1,000 tuples that change with probability 0.3 % each, the sizes of the demo's data.
    cost = CostModel(tuple_bytes=45, key_bytes=3.4, hash_bytes=17.7)
    probs = [0.001] * 1000
    per_tuple = select_groups(probs, p_delete=0.002, cost=cost)
    paper = select_groups(probs, p_delete=0.002, cost=cost, criterion="group")
    assert 5 <= per_tuple[0].size <= 20 < paper[0].size
    assert sum(g.benefit for g in per_tuple) > sum(g.benefit for g in paper)


def test_unknown_criterion_is_refused():
    with pytest.raises(ValueError, match="criterion"):
        GroupBuilder(0.0, COST, criterion="biggest")


def test_equal_benefit_cuts():
    # [0]          EB(1, P=1)     = 40
    # [0, .375]    EB(2, P=.625)  = 128·0.625 − 40 = 40 = 40: a tie cuts
    # [.375]       EB(1, P=.625)  = 40 − 24 = 16 > 0: its own group
    assert select_groups([0.0, 0.375], p_delete=0.0, cost=COST) == [
        Group(start=0, size=1, survival=1.0, benefit=40.0),
        Group(start=1, size=1, survival=0.625, benefit=16.0),
    ]


def test_cap_closes_a_group_that_would_still_grow():
    # with P = 1 EB keeps rising (40, 88, 136, ...), only the cap cuts
    groups = select_groups([0.0] * 5, p_delete=0.0, cost=COST, max_group_size=2)
    assert [(g.start, g.size, g.benefit) for g in groups] == [(0, 2, 88.0), (2, 2, 88.0), (4, 1, 40.0)]
    uncapped = select_groups([0.0] * 5, p_delete=0.0, cost=COST)
    assert [(g.start, g.size, g.benefit) for g in uncapped] == [(0, 5, 64 * 5 - 16 * 5 - 8.0)]


def test_default_cap():
    groups = select_groups([0.0] * (MAX_GROUP_SIZE + 3), p_delete=0.0, cost=COST)
    assert [(g.start, g.size) for g in groups] == [(0, MAX_GROUP_SIZE), (MAX_GROUP_SIZE, 3)]


def test_rejects_descending_input():
    with pytest.raises(ValueError, match="ascending"):
        select_groups([0.5, 0.25], p_delete=0.0, cost=COST)
    # the order is checked after the selection stopped, too
    with pytest.raises(ValueError, match="ascending"):
        select_groups([1.0, 0.5], p_delete=0.0, cost=COST)
    with pytest.raises(ValueError):
        select_groups([0.0, 1.5], p_delete=0.0, cost=COST)


def test_builder_streams_ids_and_closed_groups():
    b = GroupBuilder(0.0, COST)
    assert b.push(0.0) == 0
    assert b.push(0.0) == 0
    assert b.closed == []  # the first group is still open
    assert b.open_start == 0
    assert b.push(0.5) == 1  # EB would fall from 88 to 40: group 0 closes, 0.5 opens group 1
    assert b.closed == [ClosedGroup(start=0, size=2, survival=1.0, benefit=88.0, index=0)]
    # Adding 0.75 to group 1 gives P = .125, μ = 2·48 − 8 = 88: 88·.125 − 40·.875 = −24 < 8,
    # so group 1 closes at EB 8, and 0.75 opens group 2 provisionally: 64·.25 − 24 = −8.
    assert b.push(0.75) == 2
    assert b.open_start == 3
    assert b.closed[-1] == ClosedGroup(start=2, size=1, survival=0.5, benefit=8.0, index=1)
    # 0.75 again: P = 1/16, EB(2) = 88/16 − 40·15/16 = −32 < −8, so group 2 closes at −8,
    # which is not worth its hash: it is rejected and the selection stops.
    assert b.push(0.75) is None
    assert b.stopped
    assert b.rejected == ClosedGroup(start=3, size=1, survival=0.25, benefit=-8.0, index=2)
    assert b.push(1.0) is None  # everything after a stop stays ungrouped
    with pytest.raises(ValueError, match="ascending"):
        b.push(0.5)
    assert b.pushed == 6  # the rejected push does not count
    assert [g.index for g in b.finish()] == [0, 1]
    assert b.finish() == b.closed  # idempotent
    with pytest.raises(RuntimeError):
        b.push(1.0)


def test_a_tuple_not_worth_a_hash_alone_can_start_a_group_that_is():
    # Φt = 10, Φk = 2, Φh = 16, nothing changes: one tuple saves 8 − 16 = −8 bytes, two
    # 0, three 8 — each tuple raises EB, so the group grows past its negative start.
    cost = CostModel(tuple_bytes=10, key_bytes=2, hash_bytes=16)
    groups = select_groups([0.0] * 3, p_delete=0.0, cost=cost)
    assert groups == [Group(start=0, size=3, survival=1.0, benefit=8.0)]


def test_a_group_that_never_pays_is_rejected_with_its_tuples():
    # Φt = 10, Φk = 8, Φh = 16: each stable tuple saves 2 bytes, so even the largest
    # group allowed (4) reaches 4·2 − 16 = −8 <= 0: nothing is grouped.
    cost = CostModel(tuple_bytes=10, key_bytes=8, hash_bytes=16)
    b = GroupBuilder(0.0, cost, max_group_size=4)
    ids = [b.push(0.0) for _ in range(6)]
    assert ids[:4] == [0, 0, 0, 0] and ids[4:] == [None, None]
    assert b.finish() == []
    assert b.rejected is not None and (b.rejected.size, b.rejected.benefit) == (4, -8.0)


def test_builder_reports_the_last_group_at_finish():
    b = GroupBuilder(0.0, COST, max_group_size=2)
    assert [b.push(0.0) for _ in range(3)] == [0, 0, 1]
    assert [g.index for g in b.closed] == [0]
    assert b.finish() == [
        ClosedGroup(start=0, size=2, survival=1.0, benefit=88.0, index=0),
        ClosedGroup(start=2, size=1, survival=1.0, benefit=40.0, index=1),
    ]


def test_builder_rejects_bad_settings():
    with pytest.raises(ValueError):
        GroupBuilder(1.5, COST)
    with pytest.raises(ValueError):
        GroupBuilder(0.0, COST, max_group_size=0)


def _assert_prefix_cover(groups: list[Group], n: int) -> int:
    """The groups are contiguous, start at 0 and leave only a tail; returns the tail's size."""
    covered = 0
    for g in groups:
        assert g.start == covered and g.size >= 1
        covered += g.size
    assert covered <= n
    return n - covered


def test_groups_cover_a_contiguous_prefix():
    probs = [0.0, 0.0, 0.5, 0.5, 0.75, 0.875]
    groups = select_groups(probs, p_delete=0.0, cost=COST)
    ungrouped = _assert_prefix_cover(groups, len(probs))
    assert sum(g.size for g in groups) + ungrouped == len(probs)
    assert ungrouped == 2


def test_builder_ids_match_select_groups():
    probs = [0.0, 0.0, 0.125, 0.25, 0.25, 0.5, 0.5, 0.75]
    b = GroupBuilder(0.0625, COST)
    ids = [b.push(p) for p in probs]
    b.finish()
    if b.rejected is not None:  # ids of a rejected group were provisional
        ids = [None if i == b.rejected.index else i for i in ids]
    groups = select_groups(probs, p_delete=0.0625, cost=COST)
    expected: list[int | None] = [None] * len(probs)
    for index, g in enumerate(groups):
        expected[g.start : g.start + g.size] = [index] * g.size
    assert ids == expected
    assert [Group(g.start, g.size, g.survival, g.benefit) for g in b.finish()] == groups


# --- property ----------------------------------------------------------------------------

probability = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@st.composite
def cost_models(draw) -> CostModel:
    tuple_bytes = draw(st.floats(min_value=1.0, max_value=1000.0))
    key_bytes = draw(st.floats(min_value=0.0, max_value=tuple_bytes))
    hash_bytes = draw(st.floats(min_value=0.0, max_value=200.0))
    return CostModel(tuple_bytes, key_bytes, hash_bytes)


@settings(max_examples=300, deadline=None)
@given(
    probs=st.lists(st.one_of(probability, st.sampled_from([0.0, 0.01, 0.5, 1.0])), max_size=60).map(sorted),
    p_delete=st.one_of(st.just(0.0), st.floats(min_value=0.0, max_value=0.3)),
    cost=cost_models(),
    cap=st.sampled_from([1, 2, 3, 7, MAX_GROUP_SIZE]),
    criterion=st.sampled_from(["per_tuple", "group"]),
)
def test_groups_are_locally_optimal(probs, p_delete, cost, cap, criterion):
    groups = select_groups(probs, p_delete, cost, max_group_size=cap, criterion=criterion)

    def score(n, members):  # what the criterion maximises when it grows a group
        eb = expected_benefit(n, group_survival(members, p_delete), cost)
        return eb / n if criterion == "per_tuple" else eb

    ungrouped = _assert_prefix_cover(groups, len(probs))
    assert sum(g.size for g in groups) + ungrouped == len(probs)
    for g in groups:
        members = probs[g.start : g.start + g.size]
        assert g.size <= cap
        assert g.survival == group_survival(members, p_delete)
        assert g.benefit == expected_benefit(g.size, g.survival, cost)
        assert g.benefit > 0
        # every tuple that joined raised the criterion strictly (in exact arithmetic; the
        # builder compares EB·n cross-multiplied, so allow for rounding)
        for k in range(1, g.size):
            assert score(k + 1, members[: k + 1]) >= score(k, members[:k]) - 1e-9 * (1 + abs(score(k, members[:k])))
        # the next tuple could not have raised it, unless the cap closed the group
        end = g.start + g.size
        if end < len(probs) and g.size < cap:
            extended = probs[g.start : end + 1]
            assert score(g.size + 1, extended) <= score(g.size, members) + 1e-9 * (1 + abs(score(g.size, members)))
    if ungrouped:
        # the selection stopped on a tuple that is not worth a group on its own
        first = probs[len(probs) - ungrouped]
        assert expected_benefit(1, group_survival([first], p_delete), cost) <= 0
