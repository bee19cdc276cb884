"""The row_version strategy's state: the snapshot kept in a version's site directory, refused when newer."""

from __future__ import annotations

import json

import pytest

from warehouse.errors import FormatError
from warehouse.store.versions import Version
from warehouse.strategies.row_version.strategy import STATE_FILE, SnapshotState
from warehouse.strategies.row_version.xid_snapshots import Snapshot


def test_the_snapshot_round_trips_and_a_version_without_it_has_none(tmp_path):
    version = Version(3, "sync3", tmp_path / "3")
    assert SnapshotState.load(version, 0) is None and SnapshotState.load(None, 0) is None
    state = SnapshotState(Snapshot(2**33 + 5, 2**33 + 9, (2**33 + 5, 2**33 + 7), "7712259602242094645"), 2)
    state.save(version.site_dir(0))
    assert SnapshotState.load(version, 0) == state
    path = version.site_dir(0) / STATE_FILE
    path.write_text(json.dumps({**json.loads(path.read_text()), "format": 99}))
    with pytest.raises(FormatError, match="format 99, and this deltasieve reads format 1: upgrade deltasieve"):
        SnapshotState.load(version, 0)
