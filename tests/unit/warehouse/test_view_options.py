"""A view's options load from the catalog's JSON, typed by their strategy's family, and store
back as they were (warehouse/view_options.py)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from warehouse.strategies import STRATEGIES
from warehouse.view_options import (
    OPTIONS,
    AutoOptions,
    DifferencingOptions,
    MatchSettings,
    RowVersionOptions,
    Schedule,
    SnapshotDiffOptions,
    SnapshotDiffSettings,
    StampSettings,
    TimestampOptions,
    ViewOptions,
    readers,
    unread_detail,
    unread_settings,
)

#: Options as the catalog stores them: the keys they were given.
STORED = [
    {"strategy": "group_hash"},
    {"strategy": "sketch", "sample_size": 100, "schedule": {"every_s": 60}, "delete_flags": {"s.a": "gone"}},
    {
        "strategy": "timestamp",
        "timestamps": {"s.a": "at"},
        "delete_flags": {},
        "timestamp_lag_s": 5.0,
        "reconcile_every": 24,
        "timestamps_not_null": ["s.a"],
        "match": {"order_by": "at", "epsilon": {"at": 2}},
    },
    {"strategy": "row_version", "reconcile_every": 3, "row_version_sources": ["pg"]},
    {
        "strategy": "snapshot_diff",
        "snapshot_diff": {"algorithm": "window", "aging_rows": 100000, "block_rows": 1024},
        "dump_sources": ["files"],
    },
    {
        "strategy": "auto",
        "timestamps": {},
        "delete_flags": {},
        "timestamp_lag_s": 5.0,
        "reconcile_every": 24,
        "timestamps_not_null": [],
        "row_version_sources": ["pg"],
        "snapshot_diff": {},
        "dump_sources": [],
    },
]
TIMESTAMP = STORED[2]


@pytest.mark.parametrize("stored", STORED, ids=lambda s: s["strategy"])
def test_stored_options_store_back_unchanged(stored):
    options = ViewOptions.from_stored(json.dumps(stored))
    assert options.stored() == stored
    assert json.loads(json.dumps(options.stored())) == stored
    assert ViewOptions.from_stored(stored) == options


@pytest.mark.parametrize(
    "strategy, family",
    [
        ("auto", AutoOptions),
        ("sketch", DifferencingOptions),
        ("full_ship", DifferencingOptions),
        ("timestamp", TimestampOptions),
        ("row_version", RowVersionOptions),
        ("snapshot_diff", SnapshotDiffOptions),
    ],
)
def test_the_strategy_picks_the_family_of_the_options(strategy, family):
    assert type(ViewOptions.from_stored({"strategy": strategy})) is family


def test_every_strategy_has_a_family_and_no_family_names_another():
    assert list(OPTIONS) == list(STRATEGIES)


def test_each_strategy_reads_its_own_settings_typed():
    timestamp = ViewOptions.from_stored(TIMESTAMP)
    settings = timestamp.timestamp_settings
    assert settings is not None and settings.timestamps == {"s.a": "at"} and settings.timestamps_not_null == ["s.a"]
    assert (timestamp.row_version_settings, timestamp.dump_settings) == (None, None)
    rows = ViewOptions.from_stored(STORED[3]).row_version_settings
    assert rows is not None and (rows.row_version_sources, rows.reconcile_every) == (["pg"], 3)
    dumps = ViewOptions.from_stored(STORED[4]).dump_settings
    assert dumps is not None and dumps.dump_sources == ["files"]
    sketch = ViewOptions.from_stored({"strategy": "sketch"})
    assert (sketch.timestamp_settings, sketch.row_version_settings, sketch.dump_settings) == (None, None, None)
    auto = ViewOptions.from_stored(STORED[-1])
    assert None not in (auto.timestamp_settings, auto.row_version_settings, auto.dump_settings)


def test_options_without_settings_read_the_defaults():
    options = ViewOptions.from_stored({"strategy": "group_hash"})
    assert options.strategy == "group_hash"
    assert options.stamps == StampSettings()
    assert (options.match, options.sample_size, options.schedule) == (None, 0, None)


def test_options_without_a_strategy_or_of_another_are_refused():
    with pytest.raises(ValidationError, match="strategy"):
        ViewOptions.from_stored({"sample_size": 10})
    with pytest.raises(ValidationError, match="does not match any of the expected tags"):
        ViewOptions.from_stored({"strategy": "stamps"})
    with pytest.raises(TypeError, match="family"):
        ViewOptions(strategy="auto")


@pytest.mark.parametrize(
    "stored, words",
    [
        (
            {"strategy": "sketch", "timestamps": {}},
            "strategy sketch does not read timestamps (read by auto and timestamp)",
        ),
        ({"strategy": "timestamp", "dump_sources": []}, "does not read dump_sources (read by auto and snapshot_diff)"),
        ({"strategy": "snapshot_diff", "reconcile_every": 24}, "(read by auto, timestamp and row_version)"),
        ({"strategy": "sketch", "stamps": {}}, "Extra inputs are not permitted"),
    ],
    ids=["timestamps", "dump_sources", "reconcile_every", "unknown"],
)
def test_stored_options_with_a_key_their_strategy_never_reads_are_refused_naming_it(stored, words):
    with pytest.raises(ValidationError) as info:
        ViewOptions.from_stored(stored)
    assert words in str(info.value)


def test_the_stamp_settings_are_parsed_once():
    options = ViewOptions.from_stored(TIMESTAMP)
    assert options.stamps is options.stamps
    assert options.stamps.timestamps == {"s.a": "at"} and options.stamps.not_null == ("s.a",)


def test_new_options_hold_the_settings_their_strategy_reads_and_only_the_optional_ones_given():
    stamps = StampSettings({"s.a": "at"}, {"s.a": "gone"}, not_null=("s.a",), versioned=("s",), dumped=("d",))
    plain = ViewOptions.of("auto", stamps).stored()
    assert plain == {"strategy": "auto", **stamps.to_options()}
    full = ViewOptions.of("auto", stamps, MatchSettings(order_by="at", epsilon={"at": 1}), 10, Schedule(every_s=5))
    assert full.stored() == {
        **plain,
        "match": {"order_by": "at", "epsilon": {"at": 1}},
        "sample_size": 10,
        "schedule": {"every_s": 5},
    }
    assert set(ViewOptions.of("timestamp", stamps).stored()) == {
        "strategy",
        "delete_flags",
        "timestamps",
        "timestamp_lag_s",
        "reconcile_every",
        "timestamps_not_null",
    }
    assert ViewOptions.of("row_version", stamps).stored() == {
        "strategy": "row_version",
        "delete_flags": {"s.a": "gone"},
        "reconcile_every": 24,
        "row_version_sources": ["s"],
    }
    assert ViewOptions.of("snapshot_diff", stamps).stored() == {
        "strategy": "snapshot_diff",
        "delete_flags": {"s.a": "gone"},
        "snapshot_diff": {},
        "dump_sources": ["d"],
    }
    assert ViewOptions.of("tuple_hash", stamps).stored() == {"strategy": "tuple_hash", "delete_flags": {"s.a": "gone"}}


def test_settings_another_strategy_reads_fall_to_their_defaults():
    stamps = StampSettings({"s.a": "at"}, {"s.a": "gone"}, 1.0, 3, ("s.a",), ("s",), SnapshotDiffSettings(), ("d",))
    assert stamps.read_by("auto") == stamps
    assert stamps.read_by("sketch") == StampSettings(delete_flags={"s.a": "gone"})
    assert stamps.read_by("row_version") == StampSettings({}, {"s.a": "gone"}, reconcile_every=3, versioned=("s",))
    assert stamps.read_by("timestamp") == StampSettings({"s.a": "at"}, {"s.a": "gone"}, 1.0, 3, ("s.a",))


def test_a_setting_given_a_value_its_strategy_never_reads_is_named_with_those_that_read_it():
    given = {"timestamps": {"a": "at"}, "timestamp_lag_s": 1, "reconcile_every": 24, "snapshot_diff": {"aging_rows": 9}}
    assert unread_settings("sketch", given) == ["timestamps", "timestamp_lag_s", "snapshot_diff"]
    assert unread_settings("row_version", given) == ["timestamps", "timestamp_lag_s", "snapshot_diff"]
    assert unread_settings("timestamp", given) == ["snapshot_diff"]
    assert unread_settings("auto", given) == []
    # the defaults, given or not, are what every strategy has
    defaults = {"timestamps": {}, "timestamp_lag_s": 5, "reconcile_every": 24, "snapshot_diff": SnapshotDiffSettings()}
    assert unread_settings("sketch", defaults) == []
    assert readers("snapshot_diff") == ["auto", "snapshot_diff"] and len(readers("delete_flags")) == len(STRATEGIES)
    assert unread_detail("group_hash", ["timestamps", "reconcile_every"]) == (
        "strategy group_hash does not read timestamps (read by auto and timestamp) or reconcile_every (read by auto, "
        "timestamp and row_version): leave them out, or choose a strategy that reads them"
    )


def test_sample_and_schedule_are_set_and_removed():
    options = ViewOptions.from_stored({"strategy": "sketch"})
    sized = options.sized(10).scheduled(Schedule(every_s=5))
    assert sized.stored() == {"strategy": "sketch", "sample_size": 10, "schedule": {"every_s": 5}}
    assert sized.sized(0).scheduled(None).stored() == {"strategy": "sketch"}
    assert type(ViewOptions.from_stored(TIMESTAMP).sized(3)) is TimestampOptions


def test_a_view_stored_before_the_schema_policy_evolves_and_is_stored_unchanged():
    stored = json.dumps({"strategy": "sketch", "sample_size": 5})
    options = ViewOptions.from_stored(stored)
    assert options.on_schema_change == "evolve"
    assert json.dumps(options.stored()) == stored
    frozen = options.policed("freeze")
    assert frozen.stored() == {"strategy": "sketch", "sample_size": 5, "on_schema_change": "freeze"}
    assert frozen.sized(7).on_schema_change == "freeze"  # kept by the other settings' changes
    assert frozen.policed("evolve").stored() == {"strategy": "sketch", "sample_size": 5}
    with pytest.raises(ValueError, match="on_schema_change"):
        ViewOptions.from_stored({"strategy": "sketch", "on_schema_change": "ignore"})


def test_the_snapshot_diff_and_match_settings_are_typed_and_store_back_as_given():
    options = ViewOptions.from_stored({**STORED[4], "strategy": "auto"})
    dumps = options.dump_settings
    assert dumps is not None
    assert dumps.snapshot_diff == SnapshotDiffSettings(algorithm="window", aging_rows=100_000, block_rows=1024)
    assert options.stamps.diff is dumps.snapshot_diff
    timestamp = ViewOptions.from_stored(TIMESTAMP)
    assert timestamp.match == MatchSettings(order_by="at", epsilon={"at": 2})
    assert json.dumps(timestamp.stored()["match"]) == '{"order_by": "at", "epsilon": {"at": 2}}'  # not 2.0
    partial = {"strategy": "snapshot_diff", "snapshot_diff": {"algorithm": "sort_merge"}}
    options = ViewOptions.from_stored(partial)
    dumps = options.dump_settings
    assert dumps is not None and (dumps.snapshot_diff.algorithm, dumps.snapshot_diff.aging_rows) == (
        "sort_merge",
        100_000,
    )
    assert options.stored() == partial
    assert ViewOptions.of("snapshot_diff", options.stamps).stored()["snapshot_diff"] == {"algorithm": "sort_merge"}


@pytest.mark.parametrize(
    "diff", [{"algorithm": "bubble"}, {"aging_rows": 0}, {"block_rows": "many"}, {"window": 3}], ids=str
)
def test_snapshot_diff_settings_out_of_their_bounds_are_refused(diff):
    with pytest.raises(ValueError, match="snapshot_diff"):
        ViewOptions.from_stored({"strategy": "snapshot_diff", "snapshot_diff": diff})
