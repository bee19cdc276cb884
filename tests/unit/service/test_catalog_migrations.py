"""A catalog written by an older service opens in this one, its records readable."""

from __future__ import annotations

import sqlite3

from service.catalog import MIGRATIONS, SCHEMA_VERSION, Catalog


def old_catalog(path, version: int) -> None:
    """A catalog file as a service of catalog `version` left it, with one finished sync."""
    conn = sqlite3.connect(path, isolation_level=None)
    for target in range(1, version + 1):
        conn.executescript(MIGRATIONS[target])
    conn.execute(f"PRAGMA user_version = {version}")
    conn.execute(
        "INSERT INTO views (name, sql, definition, options, created_at) VALUES ('v', 'SELECT 1', '{}', '{}', '2026-01-01T00:00:00.000+00:00')"
    )
    conn.execute(
        "INSERT INTO syncs (id, view, status, created_at, started_at, finished_at) VALUES "
        "('s1', 'v', 'succeeded', '2026-01-01T00:00:00.000+00:00', '2026-01-01T00:00:01.000+00:00', '2026-01-01T00:00:02.000+00:00')"
    )
    conn.close()


def test_a_catalog_of_version_4_gains_queued_s_and_keeps_its_syncs(tmp_path):
    path = tmp_path / "catalog.db"
    old_catalog(path, 4)
    catalog = Catalog(path)
    try:
        sync = catalog.sync("v", "s1")
        assert (sync.status, sync.queued_s, sync.error_code) == ("succeeded", None, None)
        catalog.update_sync("s1", queued_s=1.5)
        assert catalog.sync("v", "s1").queued_s == 1.5
        assert catalog._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    finally:
        catalog.close()
