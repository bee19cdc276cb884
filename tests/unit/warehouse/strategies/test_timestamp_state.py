"""The timestamp strategy's state: kept in a version's site directory, refused when newer."""

from __future__ import annotations

import json

import pytest

from warehouse.errors import FormatError
from warehouse.store.versions import Version
from warehouse.strategies.timestamp import STATE_FILE, Watermark


def test_the_watermark_round_trips_and_a_version_without_it_has_none(tmp_path):
    version = Version(7, "sync7", tmp_path / "7")
    assert Watermark.load(version, 0) is None and Watermark.load(None, 0) is None
    Watermark("2026-11-25 20:00:00.123", 3).save(version.site_dir(0))
    assert Watermark.load(version, 0) == Watermark("2026-11-25 20:00:00.123", 3)
    assert Watermark.load(version, 1) is None


def test_a_newer_state_is_refused(tmp_path):
    version = Version(7, "sync7", tmp_path / "7")
    Watermark("2026-11-25 20:00:00", 0).save(version.site_dir(0))
    path = version.site_dir(0) / STATE_FILE
    path.write_text(json.dumps({**json.loads(path.read_text()), "format": 99}))
    with pytest.raises(FormatError, match="format 99, and this deltasieve reads format 1: upgrade deltasieve"):
        Watermark.load(version, 0)
