"""The catalog's tables, as the migrations that make them: each catalog file says in its
user_version how far it has come, and opening it runs the ones it lacks, in order."""

from __future__ import annotations

#: Bump with a migration in MIGRATIONS when the catalog's tables change.
SCHEMA_VERSION = 10

MIGRATIONS: dict[int, str] = {
    1: """
    CREATE TABLE sources (
        name TEXT PRIMARY KEY,
        url TEXT NOT NULL,
        token TEXT,
        created_at TEXT NOT NULL
    );
    CREATE TABLE views (
        name TEXT PRIMARY KEY,
        sql TEXT NOT NULL,
        definition TEXT NOT NULL,
        options TEXT NOT NULL,
        created_at TEXT NOT NULL
    );
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
        progress TEXT
    );
    CREATE INDEX syncs_by_view ON syncs(view, seq);
    """,
    # what started a sync: "api" (POST .../syncs; every sync before this version) or "schedule"
    2: """
    ALTER TABLE syncs ADD COLUMN trigger TEXT NOT NULL DEFAULT 'api';
    """,
    # a redefinition stored and not yet applied: the definition the stored rows still follow
    # (NULL: they follow `definition`); the view's next sync applies it (trigger "redefine")
    3: """
    ALTER TABLE views ADD COLUMN applied TEXT;
    """,
    # what kind of failure a failed sync had, for programs ("schema_changed"); NULL before this version
    4: """
    ALTER TABLE syncs ADD COLUMN error_code TEXT;
    """,
    # seconds a sync waited in the queue before it ran; NULL before this version and for a sync that never ran
    5: """
    ALTER TABLE syncs ADD COLUMN queued_s REAL;
    """,
    # tombstones of the syncs retention removed (service/retention.py): enough to answer 410,
    # not 404, for them, and to order a position among the syncs kept
    6: """
    CREATE TABLE removed_syncs (
        view TEXT NOT NULL,
        id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        finished_at TEXT,
        removed_at TEXT NOT NULL,
        PRIMARY KEY (view, id)
    );
    """,
    # how far each destination of a view has caught up (service/publishing.py): the latest sync
    # whose changes it holds, moved on by syncs with no change too, and the last failure
    7: """
    CREATE TABLE publications (
        view TEXT NOT NULL,
        destination TEXT NOT NULL,
        applied_sync TEXT,
        error TEXT,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (view, destination)
    );
    """,
    # whether a queued sync compares every row (?verify=true): a sync still queued when the
    # service stopped is queued again at the next start with what it was asked (service/jobs.py)
    8: """
    ALTER TABLE syncs ADD COLUMN verify INTEGER NOT NULL DEFAULT 0;
    """,
    # API keys made through POST /v1/keys (service/keys.py): the key's SHA-256 only, never the key;
    # `views` and `sources` are JSON lists of names the key is limited to (NULL: not limited)
    9: """
    CREATE TABLE api_keys (
        name TEXT PRIMARY KEY,
        digest TEXT NOT NULL UNIQUE,
        scope TEXT NOT NULL,
        views TEXT,
        sources TEXT,
        created_at TEXT NOT NULL
    );
    """,
    # the audit log (service/audit.py): who changed or read what, when; the key's name, never the key
    10: """
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
}
