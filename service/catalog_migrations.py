"""The catalog's tables, as the migrations that make them: each catalog file says in its
user_version how far it has come, and opening it runs the ones it lacks, in order.

BASELINE makes the tables of deltasieve 0.1.0 in one step (a new catalog file starts
there); a later change of the tables adds the migration BASELINE + 1, and so on. A
catalog file of a version below BASELINE (other than 0: a new file) was written while
deltasieve was developed, before 0.1.0, and is refused.
"""

from __future__ import annotations

#: The catalog version of deltasieve 0.1.0: its tables, made by MIGRATIONS[BASELINE].
BASELINE = 10
#: Bump with a migration in MIGRATIONS when the catalog's tables, or what they hold, change.
SCHEMA_VERSION = 13
#: The oldest SQLite that runs every migration: ALTER TABLE ... DROP COLUMN (12) came with 3.35.
SQLITE_NEEDED = (3, 35, 0)

MIGRATIONS: dict[int, str] = {
    BASELINE: """
    CREATE TABLE sources (
        name TEXT PRIMARY KEY,
        url TEXT NOT NULL,
        token TEXT,
        created_at TEXT NOT NULL
    );
    -- applied: a redefinition stored and not yet applied: the definition the stored rows
    -- still follow (NULL: they follow `definition`). The view's next sync applies it.
    -- Dropped by 11: the view's current version records what its rows follow
    CREATE TABLE views (
        name TEXT PRIMARY KEY,
        sql TEXT NOT NULL,
        definition TEXT NOT NULL,
        options TEXT NOT NULL,
        created_at TEXT NOT NULL,
        applied TEXT
    );
    -- trigger: what started a sync ("api", "schedule", "redefine"). error_code: what kind
    -- of failure a failed sync had, for programs. queued_s: seconds the sync waited in the
    -- queue (NULL for one that never ran). verify: whether it compares every row
    -- (?verify=true), so that a sync still queued at a stop is queued again as asked
    CREATE TABLE syncs (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        view TEXT NOT NULL REFERENCES views(name),
        status TEXT NOT NULL,
        error TEXT,
        created_at TEXT NOT NULL,
        started_at TEXT,
        finished_at TEXT,
        metrics TEXT NOT NULL DEFAULT '{}',
        progress TEXT,
        trigger TEXT NOT NULL DEFAULT 'api',
        error_code TEXT,
        queued_s REAL,
        verify INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX syncs_by_view ON syncs(view, seq);
    -- tombstones of the syncs retention removed (service/retention.py): enough to answer 410,
    -- not 404, for them, and to order a position among the syncs kept
    CREATE TABLE removed_syncs (
        view TEXT NOT NULL,
        id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        finished_at TEXT,
        removed_at TEXT NOT NULL,
        PRIMARY KEY (view, id)
    );
    -- how far each destination of a view has caught up (service/publishing.py): the latest sync
    -- whose changes it holds, moved on by syncs with no change too, and the last failure
    CREATE TABLE publications (
        view TEXT NOT NULL,
        destination TEXT NOT NULL,
        applied_sync TEXT,
        error TEXT,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (view, destination)
    );
    -- API keys made through POST /v1/keys (service/keys.py): the key's SHA-256 only, never the key.
    -- `views` and `sources` are JSON lists of names the key is limited to (NULL: not limited)
    CREATE TABLE api_keys (
        name TEXT PRIMARY KEY,
        digest TEXT NOT NULL UNIQUE,
        scope TEXT NOT NULL,
        views TEXT,
        sources TEXT,
        created_at TEXT NOT NULL
    );
    -- the audit log (service/audit.py): who changed or read what, when. The key's name, never the key
    CREATE TABLE audit (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        at TEXT NOT NULL,
        key_name TEXT,
        method TEXT NOT NULL,
        route TEXT NOT NULL,
        view TEXT,
        source TEXT,
        status INTEGER NOT NULL,
        rows INTEGER
    );
    CREATE INDEX audit_by_time ON audit(at);
    """,
    # a view's options hold the settings its strategy reads, no other strategy's (a model per
    # family of strategies, warehouse/view_options.py); 0.1.0 stored every strategy's keys with
    # every view, empty or as given. auto reads them all
    11: """
    UPDATE views SET options = json_remove(options,
        '$.timestamps', '$.timestamp_lag_s', '$.timestamps_not_null', '$.timestamps_text', '$.reconcile_every',
        '$.row_version_sources', '$.snapshot_diff', '$.dump_sources')
    WHERE json_extract(options, '$.strategy') IN ('sketch', 'group_hash', 'tuple_hash', 'range_checksum', 'full_ship');
    UPDATE views SET options = json_remove(options, '$.row_version_sources', '$.snapshot_diff', '$.dump_sources')
    WHERE json_extract(options, '$.strategy') = 'timestamp';
    UPDATE views SET options = json_remove(options,
        '$.timestamps', '$.timestamp_lag_s', '$.timestamps_not_null', '$.timestamps_text', '$.snapshot_diff',
        '$.dump_sources')
    WHERE json_extract(options, '$.strategy') = 'row_version';
    UPDATE views SET options = json_remove(options,
        '$.timestamps', '$.timestamp_lag_s', '$.timestamps_not_null', '$.timestamps_text', '$.reconcile_every',
        '$.row_version_sources')
    WHERE json_extract(options, '$.strategy') = 'snapshot_diff'
    """,
    # What a view's rows follow is its current version's to say (meta.json "definition"), the
    # catalog keeps what the view asks for: a redefinition pending at the upgrade stays pending
    12: """
    ALTER TABLE views DROP COLUMN applied;
    """,
    # a sync the service's stop interrupted is retried once after the restart (service/jobs.py
    # recover): the retry names the sync it retries
    13: """
    ALTER TABLE syncs ADD COLUMN retry_of TEXT;
    """,
}
