"""A catalog file opens at its version: a new one is made from the baseline, one of the current
version keeps its records, one of an earlier version since the baseline is migrated with its
records, one of another version is refused by name."""

from __future__ import annotations

import json
import sqlite3

import pytest

from service.catalog import BASELINE, SCHEMA_VERSION, Catalog
from service.catalog_migrations import MIGRATIONS
from warehouse.errors import FormatError
from warehouse.strategies import STRATEGIES


def stamped(path, version: int) -> None:
    """A catalog file of the current tables that says it is of `version`, with one finished sync."""
    Catalog(path).close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA user_version = {version}")
    conn.execute(
        "INSERT INTO views (name, sql, definition, options, created_at) VALUES ('v', 'SELECT 1', '{}', '{\"strategy\": \"auto\"}', '2026-01-01T00:00:00.000+00:00')"
    )
    conn.execute(
        "INSERT INTO syncs (id, view, status, created_at, started_at, finished_at) VALUES "
        "('s1', 'v', 'succeeded', '2026-01-01T00:00:00.000+00:00', '2026-01-01T00:00:01.000+00:00', '2026-01-01T00:00:02.000+00:00')"
    )
    conn.close()


def test_a_new_catalog_is_made_at_the_current_version(tmp_path):
    catalog = Catalog(tmp_path / "catalog.db")
    try:
        assert catalog._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    finally:
        catalog.close()


def test_a_catalog_of_the_current_version_keeps_its_syncs(tmp_path):
    path = tmp_path / "catalog.db"
    stamped(path, SCHEMA_VERSION)
    catalog = Catalog(path)
    try:
        sync = catalog.sync("v", "s1")
        assert (sync.status, sync.queued_s, sync.error_code, sync.trigger) == ("succeeded", None, None, "api")
        catalog.update_sync("s1", queued_s=1.5)
        assert catalog.sync("v", "s1").queued_s == 1.5
    finally:
        catalog.close()


@pytest.mark.parametrize("version", [BASELINE - 1, 1, SCHEMA_VERSION + 1])
def test_a_catalog_of_another_version_is_refused_by_name(tmp_path, version):
    path = tmp_path / "catalog.db"
    stamped(path, version)
    with pytest.raises(FormatError) as info:
        Catalog(path)
    assert str(path) in info.value.message and f"version {version}" in info.value.message
    assert (info.value.found, info.value.expected, info.value.code) == (version, SCHEMA_VERSION, "stored_format")
    hint = "upgrade deltasieve" if version > SCHEMA_VERSION else "create it again"
    assert hint in info.value.message


#: A view's options as deltasieve 0.1.0 stored them: every strategy's keys, whatever the view's
#: strategy (the PostgreSQL sources found when it was defined, the snapshot_diff defaults given whole).
OPTIONS_0_1_0 = {
    "timestamps": {"s.a": "at"},
    "delete_flags": {"s.a": "gone"},
    "timestamp_lag_s": 1.0,
    "reconcile_every": 3,
    "timestamps_not_null": ["s.a"],
    "row_version_sources": ["s"],
    "snapshot_diff": {"algorithm": "window", "aging_rows": 100000, "block_rows": 1024},
    "dump_sources": [],
    "sample_size": 5,
}
#: What a view of each strategy keeps of them (besides its strategy).
KEPT = {
    "auto": set(OPTIONS_0_1_0),
    "sketch": {"delete_flags", "sample_size"},
    "timestamp": {
        "timestamps",
        "delete_flags",
        "timestamp_lag_s",
        "reconcile_every",
        "timestamps_not_null",
        "sample_size",
    },
    "row_version": {"delete_flags", "reconcile_every", "row_version_sources", "sample_size"},
    "snapshot_diff": {"delete_flags", "snapshot_diff", "dump_sources", "sample_size"},
}


def test_a_catalog_of_0_1_0_keeps_with_each_view_the_settings_its_strategy_reads(tmp_path):
    path = tmp_path / "catalog.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(MIGRATIONS[BASELINE])  # the tables of 0.1.0, as it made them
    conn.execute(f"PRAGMA user_version = {BASELINE}")
    conn.execute(
        "INSERT INTO views (name, sql, definition, options, created_at) VALUES ('v', 'SELECT 1', '{}', ?, ?)",
        ('{"strategy": "auto"}', "2026-01-01T00:00:00.000+00:00"),
    )
    for strategy in STRATEGIES:
        options = json.dumps({"strategy": strategy, **OPTIONS_0_1_0})
        conn.execute(
            "INSERT INTO views (name, sql, definition, options, created_at) VALUES (?, 'SELECT 1', '{}', ?, ?)",
            (f"v_{strategy}", options, "2026-01-01T00:00:00.000+00:00"),
        )
    conn.close()
    catalog = Catalog(path)
    try:
        assert catalog._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        for strategy in STRATEGIES:
            options = catalog.view(f"v_{strategy}").options
            kept = KEPT.get(strategy, KEPT["sketch"])
            assert options.stored() == {"strategy": strategy, **{k: OPTIONS_0_1_0[k] for k in kept}}, strategy
            assert options.stamps.delete_flags == {"s.a": "gone"} and options.sample_size == 5
        assert catalog.view("v").options.stored() == {"strategy": "auto"}
    finally:
        catalog.close()


def test_a_catalog_of_the_baseline_loses_views_applied_and_keeps_its_views(tmp_path):
    """Migration 12: a redefinition pending at the upgrade is the view's current version's to say."""
    path = tmp_path / "catalog.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(MIGRATIONS[BASELINE])
    conn.execute(f"PRAGMA user_version = {BASELINE}")
    conn.execute(
        "INSERT INTO views VALUES ('v', 'SELECT 2', '{\"new\": 1}', '{\"strategy\": \"auto\"}', "
        "'2026-01-01T00:00:00.000+00:00', '{\"old\": 1}')"
    )
    conn.execute("INSERT INTO syncs (id, view, status, created_at) VALUES ('s1', 'v', 'failed', '2026-01-01')")
    conn.close()
    catalog = Catalog(path)
    try:
        assert catalog._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        columns = [row["name"] for row in catalog._conn.execute("PRAGMA table_info(views)")]
        assert columns == ["name", "sql", "definition", "options", "created_at"]
        view = catalog.view("v")
        assert (view.sql, view.definition) == ("SELECT 2", {"new": 1})
        assert catalog.sync("v", "s1").status == "failed"
    finally:
        catalog.close()


def test_a_catalog_to_migrate_on_a_sqlite_too_old_for_it_is_refused_untouched(tmp_path, monkeypatch):
    path = tmp_path / "catalog.db"
    stamped(path, SCHEMA_VERSION)  # nothing to migrate: it opens
    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 34, 1))
    monkeypatch.setattr(sqlite3, "sqlite_version", "3.34.1")
    Catalog(path).close()
    with pytest.raises(RuntimeError, match=r"needs SQLite 3\.35\.0 or newer .* links SQLite 3\.34\.1"):
        Catalog(tmp_path / "new.db")
    conn = sqlite3.connect(tmp_path / "new.db")
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 0
    conn.close()
