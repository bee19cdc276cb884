"""A view's options load from the catalog's JSON and store back as they were (warehouse/view_options.py)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from warehouse.view_options import (
    MatchSettings,
    Schedule,
    SnapshotDiffSettings,
    StampSettings,
    ViewOptions,
)

#: Options as the catalog stores them: the keys they were given.
STORED = [
    {"strategy": "group_hash"},
    {"strategy": "sketch", "sample_size": 100, "schedule": {"every_s": 60}},
    {
        "strategy": "timestamp",
        "timestamps": {"s.a": "at"},
        "delete_flags": {},
        "timestamp_lag_s": 5.0,
        "reconcile_every": 24,
        "timestamps_not_null": ["s.a"],
        "row_version_sources": [],
        "snapshot_diff": {"algorithm": "window", "aging_rows": 100000, "block_rows": 1024},
        "dump_sources": [],
        "match": {"order_by": "at", "epsilon": {"at": 2}},
    },
]


@pytest.mark.parametrize("stored", STORED)
def test_stored_options_store_back_unchanged(stored):
    options = ViewOptions.model_validate_json(json.dumps(stored))
    assert options.stored() == stored
    assert json.loads(json.dumps(options.stored())) == stored


def test_options_without_settings_read_the_defaults():
    options = ViewOptions.model_validate({"strategy": "group_hash"})
    assert options.strategy == "group_hash"
    assert options.stamps == StampSettings()
    assert (options.match, options.sample_size, options.schedule) == (None, 0, None)


def test_options_without_a_strategy_are_refused():
    with pytest.raises(ValidationError, match="strategy"):
        ViewOptions.model_validate({"sample_size": 10})


def test_the_stamp_settings_are_parsed_once():
    options = ViewOptions.model_validate(STORED[-1])
    assert options.stamps is options.stamps
    assert options.stamps.timestamps == {"s.a": "at"} and options.stamps.not_null == ("s.a",)


def test_new_options_hold_every_stamp_setting_and_only_the_optional_ones_given():
    stamps = StampSettings({"s.a": "at"})
    plain = ViewOptions.of("auto", stamps).stored()
    assert plain == {"strategy": "auto", **stamps.to_options()}
    full = ViewOptions.of("auto", stamps, MatchSettings(order_by="at", epsilon={"at": 1}), 10, Schedule(every_s=5))
    assert full.stored() == {
        **plain,
        "match": {"order_by": "at", "epsilon": {"at": 1}},
        "sample_size": 10,
        "schedule": {"every_s": 5},
    }


def test_sample_and_schedule_are_set_and_removed():
    options = ViewOptions.model_validate({"strategy": "sketch"})
    sized = options.sized(10).scheduled(Schedule(every_s=5))
    assert sized.stored() == {"strategy": "sketch", "sample_size": 10, "schedule": {"every_s": 5}}
    assert sized.sized(0).scheduled(None).stored() == {"strategy": "sketch"}


def test_a_view_stored_before_the_schema_policy_evolves_and_is_stored_unchanged():
    stored = json.dumps({"strategy": "sketch", "sample_size": 5})
    options = ViewOptions.model_validate_json(stored)
    assert options.on_schema_change == "evolve"
    assert json.dumps(options.stored()) == stored
    frozen = options.policed("freeze")
    assert frozen.stored() == {"strategy": "sketch", "sample_size": 5, "on_schema_change": "freeze"}
    assert frozen.sized(7).on_schema_change == "freeze"  # kept by the other settings' changes
    assert frozen.policed("evolve").stored() == {"strategy": "sketch", "sample_size": 5}
    with pytest.raises(ValueError, match="on_schema_change"):
        ViewOptions.model_validate({"strategy": "sketch", "on_schema_change": "ignore"})


def test_the_snapshot_diff_and_match_settings_are_typed_and_store_back_as_given():
    options = ViewOptions.model_validate(STORED[-1])
    assert options.snapshot_diff == SnapshotDiffSettings(algorithm="window", aging_rows=100_000, block_rows=1024)
    assert options.stamps.diff is options.snapshot_diff
    assert options.match == MatchSettings(order_by="at", epsilon={"at": 2})
    assert json.dumps(options.stored()["match"]) == '{"order_by": "at", "epsilon": {"at": 2}}'  # not 2.0
    partial = {"strategy": "snapshot_diff", "snapshot_diff": {"algorithm": "sort_merge"}}
    options = ViewOptions.model_validate(partial)
    assert (options.snapshot_diff.algorithm, options.snapshot_diff.aging_rows) == ("sort_merge", 100_000)
    assert options.stored() == partial
    assert ViewOptions.of("snapshot_diff", options.stamps).stored()["snapshot_diff"] == {"algorithm": "sort_merge"}


@pytest.mark.parametrize(
    "diff", [{"algorithm": "bubble"}, {"aging_rows": 0}, {"block_rows": "many"}, {"window": 3}], ids=str
)
def test_snapshot_diff_settings_out_of_their_bounds_are_refused(diff):
    with pytest.raises(ValueError, match="snapshot_diff"):
        ViewOptions.model_validate({"strategy": "snapshot_diff", "snapshot_diff": diff})
