"""The quick and full profiles, and that every cut of the quick one is recorded and can be undone."""

from __future__ import annotations

from tests.benchmarks.__main__ import config_from, parse_args
from tests.benchmarks.strategies import STRATEGIES
from workloads.generators import WORKLOADS


def test_quick_cuts_are_recorded_and_each_option_undoes_its_own():
    quick = config_from(parse_args(["--quick"]))
    assert (quick.rows, quick.rounds, quick.workloads, quick.verify, quick.warm_up) == (
        200_000,
        5,
        ["students"],
        "last",
        False,
    )
    assert "reladiff" not in quick.strategies and len(quick.strategies) == 4
    assert (
        len(quick.reductions) == 4
        and any("warm-up" in r for r in quick.reductions)
        and any("reladiff" in r for r in quick.reductions)
    )
    undone = config_from(
        parse_args(["--quick", "--warm-up", "--verify", "ends", "--strategies", "group_hash,reladiff"])
    )
    assert (undone.verify, undone.warm_up, undone.strategies) == ("ends", True, ["group_hash", "reladiff"])
    assert len(undone.reductions) == 1 and "students only" in undone.reductions[0]


def test_the_full_run_cuts_nothing():
    full = config_from(parse_args(["--full"]))
    assert (full.rows, full.rounds, full.verify, full.warm_up, full.reductions) == (1_000_000, 10, "ends", True, [])
    assert full.workloads == list(WORKLOADS) and len(full.workloads) == 6 and "churn-50" in full.workloads
    assert full.strategies == list(STRATEGIES)


def test_the_no_change_round_is_on_by_default_in_both_profiles_and_can_be_turned_off():
    assert config_from(parse_args(["--quick"])).no_change_round
    assert config_from(parse_args(["--full"])).no_change_round
    assert not config_from(parse_args(["--quick", "--no-quiet-round"])).no_change_round
    assert len(config_from(parse_args(["--quick", "--no-quiet-round"])).reductions) == 4  # not a cut of its own
