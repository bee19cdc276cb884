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


def legs(*argv: str) -> list[tuple]:
    return [(leg.key, leg.rows, leg.strategies) for leg in config_from(parse_args(list(argv))).legs()]


def test_the_full_run_fits_an_hour_with_students_at_1m_on_both_engines():
    full = config_from(parse_args(["--full"]))
    assert (full.rounds, full.verify, full.warm_up) == (3, "ends", True)
    assert full.workloads == [w for w in WORKLOADS if w != "students-stamped"] and len(full.workloads) == 6
    assert "churn-50" in full.workloads
    services = [s for s in STRATEGIES if s not in ("reladiff", "timestamp", "row_version")]
    assert legs("--full") == [
        ("students", 1_000_000, ["full_ship", "auto"]),
        ("students@postgres", 1_000_000, ["full_ship", "auto"]),
        *((w, 200_000, services) for w in WORKLOADS if w not in ("students", "students-stamped")),
    ]
    assert len(full.reductions) == 1 and "reladiff" in full.reductions[0] and "35-45 minutes" in full.plan


def test_the_stamped_run_compares_change_stamps_with_auto_and_full_ship_at_1m():
    assert legs("--stamped") == [
        ("students-stamped", 1_000_000, ["timestamp", "auto", "full_ship"]),
        ("students-stamped@postgres", 1_000_000, ["timestamp", "auto", "full_ship"]),
        ("students@postgres", 1_000_000, ["row_version", "full_ship"]),
    ]


def full_plan() -> str:
    return config_from(parse_args(["--full"])).plan


def test_explicit_options_apply_to_every_workload_of_the_full_run():
    assert legs("--full", "--workloads", "students,narrow", "--source", "sqlite", "--rows", "1000") == [
        ("students", 1000, ["full_ship", "auto"]),
        ("narrow", 1000, [s for s in STRATEGIES if s not in ("reladiff", "timestamp", "row_version")]),
    ]
    assert legs("--full", "--workloads", "students", "--strategies", "sketch") == [
        ("students", 1_000_000, ["sketch"]),
        ("students@postgres", 1_000_000, ["sketch"]),
    ]
    every = config_from(parse_args(["--full", "--strategies", ",".join(STRATEGIES)]))
    assert every.reductions == [] and every.plan is None
    assert config_from(parse_args(["--full", "--workloads", "wide"])).plan == full_plan()


def test_the_source_option_moves_every_workload_to_postgresql():
    assert legs("--quick", "--source", "postgres", "--rows", "20000") == [
        ("students@postgres", 20_000, ["full_ship", "group_hash", "sketch", "auto"])
    ]
    assert config_from(parse_args(["--quick"])).legs()[0].source == "sqlite"


def test_the_10m_profile_runs_students_with_auto_and_full_ship():
    ten = config_from(parse_args(["--10m"]))
    assert legs("--10m") == [("students", 10_000_000, ["auto", "full_ship"])]
    assert (ten.rounds, ten.verify, ten.reductions, ten.name) == (3, "ends", [], "10m")
    assert "service" in ten.plan


def test_the_no_change_round_is_on_by_default_in_both_profiles_and_can_be_turned_off():
    assert config_from(parse_args(["--quick"])).no_change_round
    assert config_from(parse_args(["--full"])).no_change_round
    assert not config_from(parse_args(["--quick", "--no-quiet-round"])).no_change_round
    assert len(config_from(parse_args(["--quick", "--no-quiet-round"])).reductions) == 4  # not a cut of its own


def test_the_runner_and_postgresql_copy_docstring_examples_hold():
    import doctest

    from tests.benchmarks import machine, pgsource, runner

    assert all(doctest.testmod(m).failed == 0 for m in (runner, pgsource, machine))
