"""The catalog: sources, views and sync history, in one SQLite file under the data dir."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from service.audit import AuditTable
from service.catalog_migrations import BASELINE, MIGRATIONS, SCHEMA_VERSION, SQLITE_NEEDED
from service.errors import Conflict, Gone, NotFound
from service.keys import KeyTable
from service.records import SourceRecord, SyncRecord, ViewRecord
from service.retention_policy import Keep
from warehouse.errors import FormatError
from warehouse.view_options import ViewOptions

ACTIVE = ("queued", "running")


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


class Catalog:
    """Thread-safe access to the catalog file."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._conn.row_factory = sqlite3.Row
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA foreign_keys=ON")
        # deleted or overwritten data is zeroed: a secret sealed in place leaves no copy in a free page
        self._conn.execute("PRAGMA secure_delete=ON")
        self._lock = threading.RLock()
        try:
            self._migrate()
        except Exception:  # refused: the file stays as it was, and closed
            self._conn.close()
            raise
        self.keys = KeyTable(self._conn, self._lock)
        self.audit = AuditTable(self._conn, self._lock)

    def _migrate(self) -> None:
        """Bring the file to SCHEMA_VERSION: a new one from BASELINE; refused (FormatError) if
        of a version before BASELINE (catalog_migrations.py) or after SCHEMA_VERSION, and
        (RuntimeError) if it needs migrating and Python's SQLite is older than SQLITE_NEEDED."""
        with self._lock:
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
            if version != 0 and not BASELINE <= version <= SCHEMA_VERSION:
                hint = (
                    "upgrade deltasieve to read it"
                    if version > SCHEMA_VERSION
                    else "create it again (see Upgrading in the operations docs)"
                )
                reads = (
                    f"version {BASELINE}" if BASELINE == SCHEMA_VERSION else f"versions {BASELINE} to {SCHEMA_VERSION}"
                )
                raise FormatError(
                    f"the catalog {self.path} is of version {version}, and this deltasieve reads {reads}: {hint}",
                    version,
                    SCHEMA_VERSION,
                )
            if version < SCHEMA_VERSION and sqlite3.sqlite_version_info < SQLITE_NEEDED:
                needed = ".".join(map(str, SQLITE_NEEDED))
                raise RuntimeError(
                    f"the catalog {self.path} needs SQLite {needed} or newer to be brought to version {SCHEMA_VERSION}, "
                    f"and this Python links SQLite {sqlite3.sqlite_version}: run deltasieve on a Python that links a newer one"
                )
            for target in range(max(version + 1, BASELINE), SCHEMA_VERSION + 1):
                self._conn.execute("BEGIN")
                for statement in _statements(MIGRATIONS[target]):
                    self._conn.execute(statement)
                self._conn.execute(f"PRAGMA user_version = {target}")
                self._conn.execute("COMMIT")

    def close(self) -> None:
        self._conn.close()

    # -- sources -----------------------------------------------------------------------
    def add_source(self, name: str, url: str, token: str | None) -> SourceRecord:
        with self._lock:
            try:
                self._conn.execute("INSERT INTO sources VALUES (?, ?, ?, ?)", (name, url, token, now()))
            except sqlite3.IntegrityError:
                raise Conflict(f"source {name!r} already exists") from None
        return self.source(name)

    def source(self, name: str) -> SourceRecord:
        row = self._conn.execute("SELECT * FROM sources WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise NotFound(f"source {name!r} not found")
        return SourceRecord(**dict(row))

    def sources(self) -> list[SourceRecord]:
        return [SourceRecord(**dict(r)) for r in self._conn.execute("SELECT * FROM sources ORDER BY name")]

    def update_source(self, name: str, url: str, token: str | None) -> SourceRecord:
        """Give a source a new agent URL and token (a rotated token, a moved agent)."""
        with self._lock:
            if (
                self._conn.execute("UPDATE sources SET url = ?, token = ? WHERE name = ?", (url, token, name)).rowcount
                == 0
            ):
                raise NotFound(f"source {name!r} not found")
        return self.source(name)

    def rewrite_secrets(
        self, token: Callable[[str], str | None], destination: Callable[[dict], dict | None]
    ) -> list[str]:
        """Rewrite secrets stored in clear (`token`, `destination`: their new forms, None: as is), leaving
        no copy on disk (secure_delete, the log emptied); the sources and views rewritten."""
        done = []
        with self._lock, self._transaction():
            for row in self._conn.execute("SELECT name, token FROM sources WHERE token IS NOT NULL").fetchall():
                new = token(row["token"])
                if new is not None:
                    self._conn.execute("UPDATE sources SET token = ? WHERE name = ?", (new, row["name"]))
                    done.append(f"source {row['name']}")
            for row in self._conn.execute("SELECT name, options FROM views").fetchall():
                options = json.loads(row["options"])
                specs = [destination(d) for d in options.get("destinations", [])]
                if any(s is not None for s in specs):
                    options["destinations"] = [n or o for n, o in zip(specs, options["destinations"], strict=True)]
                    self._conn.execute(
                        "UPDATE views SET options = ? WHERE name = ?", (json.dumps(options), row["name"])
                    )
                    done.append(f"view {row['name']}")
        if done:
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return done

    def delete_source(self, name: str) -> None:
        """Remove a source; refused (Conflict) while a view reads it, checked under the lock so
        that no view naming it is added in between."""
        with self._lock:
            self.source(name)
            readers = self.views_reading(name)
            if readers:
                raise Conflict(
                    f"source {name!r} is read by the view(s) {readers}; delete or redefine them first (DELETE /v1/views/{readers[0]})"
                )
            self._conn.execute("DELETE FROM sources WHERE name = ?", (name,))

    def views_reading(self, source: str) -> list[str]:
        """The views whose definition reads `source`."""
        return [v.name for v in self.views() if source in {site["source"] for site in v.definition.get("sites", [])}]

    # -- views -------------------------------------------------------------------------
    def add_view(self, name: str, sql: str, definition: dict, options: ViewOptions) -> ViewRecord:
        with self._lock:
            try:
                self._conn.execute(
                    "INSERT INTO views (name, sql, definition, options, created_at) VALUES (?, ?, ?, ?, ?)",
                    (name, sql, json.dumps(definition), json.dumps(options.stored()), now()),
                )
            except sqlite3.IntegrityError:
                raise Conflict(f"view {name!r} already exists") from None
        return self.view(name)

    def view(self, name: str) -> ViewRecord:
        row = self._conn.execute("SELECT * FROM views WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise NotFound(f"view {name!r} not found")
        return _view(row)

    def views(self) -> list[ViewRecord]:
        return [_view(r) for r in self._conn.execute("SELECT * FROM views ORDER BY name")]

    def view_names(self) -> list[str]:
        """Every view's name (no options parsed: a scrape of /metrics asks this of thousands)."""
        return [r[0] for r in self._conn.execute("SELECT name FROM views ORDER BY name")]

    def delete_view(self, name: str, drop_data: Callable[[], None]) -> None:
        """Remove a view with its sync history; `drop_data` removes its stored rows.

        Refused (Conflict) while a sync of the view is queued or running. The check, the
        removal and `drop_data` happen under the catalog's lock, so no sync can be queued
        in between.
        """
        with self._lock:
            self.view(name)
            self._refuse_if_busy(name, "deleted")
            with self._transaction():
                self._conn.execute("DELETE FROM syncs WHERE view = ?", (name,))
                self._conn.execute("DELETE FROM removed_syncs WHERE view = ?", (name,))
                self._conn.execute("DELETE FROM publications WHERE view = ?", (name,))
                self._conn.execute("DELETE FROM views WHERE name = ?", (name,))
            drop_data()

    def replace_view(
        self, name: str, sql: str, definition: dict, options: ViewOptions, drop_data: Callable[[], None]
    ) -> ViewRecord:
        """Give an existing view a new definition; its history and stored rows go (the next
        sync loads it afresh: a view that gains or loses its key, whose deltas change format). Refused (Conflict) while a sync of the view is queued or running."""
        with self._lock:
            self.view(name)
            self._refuse_if_busy(name, "redefined")
            with self._transaction():
                self._conn.execute("DELETE FROM syncs WHERE view = ?", (name,))
                self._conn.execute("DELETE FROM removed_syncs WHERE view = ?", (name,))
                self._conn.execute(
                    "UPDATE views SET sql = ?, definition = ?, options = ?, created_at = ? WHERE name = ?",
                    (sql, json.dumps(definition), json.dumps(options.stored()), now(), name),
                )
            drop_data()
        return self.view(name)

    def redefine_view(
        self, name: str, sql: str, definition: dict, options: ViewOptions, by_sync: str | None = None
    ) -> ViewRecord:
        """Store a view's new definition, its history kept: its stored rows follow the one their
        version records until the view's next sync applies the new one (service/redefinitions.py).
        Refused (Conflict) while a sync of the view is queued or running, unless it is
        `by_sync`, the sync that will apply it (a table view following its table)."""
        with self._lock:
            self.view(name)
            busy = self.busy_sync(name)
            if busy is None or busy.id != by_sync:
                self._refuse_if_busy(name, "redefined")
            with self._transaction():
                self._conn.execute(
                    "UPDATE views SET sql = ?, definition = ?, options = ? WHERE name = ?",
                    (sql, json.dumps(definition), json.dumps(options.stored()), name),
                )
        return self.view(name)

    def set_view_options(self, name: str, options: ViewOptions) -> ViewRecord:
        """Change options of a view that leave its rows as they are (its sample's size, its schedule);
        refused (Conflict) while a sync of the view is queued or running."""
        with self._lock:
            self.view(name)
            self._refuse_if_busy(name, "redefined")
            with self._transaction():
                self._conn.execute("UPDATE views SET options = ? WHERE name = ?", (json.dumps(options.stored()), name))
        return self.view(name)

    def adopt_definition(self, name: str, before: dict, definition: dict) -> bool:
        """Give view `name` `definition` if its definition is still `before` (a sync took a
        widening of its columns: pipeline/schema_policy.py); whether it did."""
        with self._lock:
            return (
                self._conn.execute(
                    "UPDATE views SET definition = ? WHERE name = ? AND definition = ?",
                    (json.dumps(definition), name, json.dumps(before)),
                ).rowcount
                == 1
            )

    def busy_sync(self, view: str) -> SyncRecord | None:
        """The view's sync that is queued or running, if any."""
        row = self._conn.execute(
            "SELECT * FROM syncs WHERE view = ? AND status IN ('queued', 'running')", (view,)
        ).fetchone()
        return _sync(row) if row else None

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """All statements inside, or none (call with the lock held)."""
        self._conn.execute("BEGIN")
        try:
            yield
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def _refuse_if_busy(self, view: str, what: str) -> None:
        busy = self.busy_sync(view)
        if busy is not None:
            raise Conflict(
                f"view {view!r} cannot be {what} while its sync {busy.id} is {busy.status}; wait for the sync to finish (GET /v1/views/{view}/syncs/{busy.id}), then retry"
            )

    # -- syncs -------------------------------------------------------------------------
    def queue_sync(
        self,
        view: str,
        trigger: str = "api",
        verify: bool = False,
        redefines: Callable[[ViewRecord], bool] | None = None,
        retry_of: str | None = None,
    ) -> SyncRecord:
        """Record a queued sync, or raise Conflict if the view already has one under way (or, for
        trigger "schedule", if its schedule was removed since the scheduler looked).

        `retry_of`: the interrupted sync this one retries (trigger "retry").

        `redefines`: whether a sync of the view (its record) applies a redefinition
        (service/redefinitions.py pending_redefinition); its trigger is "redefine" then, whatever
        starts it. Asked under the lock, so that no PUT comes in between.
        """
        with self._lock:
            record = self.view(view)
            if trigger == "schedule" and record.options.schedule is None:
                raise Conflict(f"view {view!r} has no schedule")
            busy = self.busy_sync(view)
            if busy is not None:
                raise Conflict(f"view {view!r} already has sync {busy.id} {busy.status}; wait for it to finish")
            if redefines is not None and redefines(record):
                trigger = "redefine"
            sync_id = uuid.uuid4().hex
            # a scheduled sync's record may be lost with the machine (never with the process):
            # the scheduler queues the view's sync again, as its newest record is the one before
            with self._unsynced() if trigger == "schedule" else contextlib.nullcontext():
                self._conn.execute(
                    "INSERT INTO syncs (id, view, status, created_at, trigger, verify, retry_of) "
                    "VALUES (?, ?, 'queued', ?, ?, ?, ?)",
                    (sync_id, view, now(), trigger, int(verify), retry_of),
                )
        return self.sync(view, sync_id)

    def update_sync(self, sync_id: str, **fields: Any) -> None:
        for key in ("metrics", "progress"):
            if key in fields and not isinstance(fields[key], str) and fields[key] is not None:
                fields[key] = json.dumps(fields[key], default=str)
        assignments = ", ".join(f"{k} = ?" for k in fields)
        with self._lock:
            self._conn.execute(f"UPDATE syncs SET {assignments} WHERE id = ?", (*fields.values(), sync_id))

    def cancel_queued(self, errors: list[tuple[str, str]], finished_at: str) -> None:
        """End the queued syncs `errors` names (id, error) failed with error_code "cancelled", in
        one transaction (one wait for the disk, however many); a sync no longer queued is left as is."""
        with self._lock, self._transaction():
            self._conn.executemany(
                "UPDATE syncs SET status = 'failed', finished_at = ?, error = ?, error_code = 'cancelled'"
                " WHERE id = ? AND status = 'queued'",
                [(finished_at, error, sync_id) for sync_id, error in errors],
            )

    def set_running(self, sync_id: str, started_at: str, queued_s: float) -> None:
        """Record that a queued sync started, without waiting for the disk: if the machine stops
        before the sync's end is written (which waits for it, and carries this along), the
        record may be found queued at the next start, and recover() (jobs.py) asks the view's
        store then, as for a running one: a sync whose version is current succeeded, any other
        committed nothing and runs again. A process that dies loses nothing (_unsynced)."""
        with self._lock, self._unsynced():
            self._conn.execute(
                "UPDATE syncs SET status = 'running', started_at = ?, queued_s = ? WHERE id = ?",
                (started_at, queued_s, sync_id),
            )

    def set_progress(self, sync_id: str, progress: dict) -> None:
        """Write a running sync's progress without waiting for the disk (the other writes do):
        a stop loses at most the latest news of a sync that ends anyway, and the next write
        that waits for the disk carries it there. An fsync per phase of every sync held the
        catalog, which every sync and the scheduler share, for milliseconds at a time."""
        with self._lock, self._unsynced():
            self._conn.execute(
                "UPDATE syncs SET progress = ? WHERE id = ?", (json.dumps(progress, default=str), sync_id)
            )

    @contextlib.contextmanager
    def _unsynced(self) -> Iterator[None]:
        """Commit the writes inside without an fsync (call with the lock held).

        In WAL mode such a commit is in the log file when it returns: a process killed after it
        loses nothing. Only the machine's stop (power, kernel) may lose it, and then with every
        commit after it and none before: the log is read back up to its first frame that does
        not check out, and each commit that waits for the disk (the default, FULL) syncs the
        log with all before it. So only a write whose loss the next start puts right goes here,
        and a sync's end, which tells that its version is the view's, always waits."""
        self._conn.execute("PRAGMA synchronous = NORMAL")
        try:
            yield
        finally:
            self._conn.execute("PRAGMA synchronous = FULL")

    def sync(self, view: str, sync_id: str) -> SyncRecord:
        row = self._conn.execute("SELECT * FROM syncs WHERE view = ? AND id = ?", (view, sync_id)).fetchone()
        if row is None:
            self._refuse_if_buried(view, sync_id)
            raise self._not_found(view, sync_id)
        return _sync(row)

    def syncs(self, view: str, limit: int = 100) -> list[SyncRecord]:
        rows = self._conn.execute("SELECT * FROM syncs WHERE view = ? ORDER BY seq DESC LIMIT ?", (view, limit))
        return [_sync(r) for r in rows]

    def active_syncs(self) -> list[SyncRecord]:
        return [_sync(r) for r in self._conn.execute("SELECT * FROM syncs WHERE status IN ('queued', 'running')")]

    def succeeded_after(self, view: str, after: str | None) -> list[SyncRecord]:
        """The view's succeeded syncs after sync `after` (all of them for None), oldest first.

        `after` may be any sync of the view, also a failed one; an unknown id is NotFound, one
        retention removed is Gone, and so is None once retention removed the view's first syncs.
        Syncs of one view run one at a time, so this order is the order of their commits.
        """
        seq = 0
        if after is None:
            self._refuse_if_load_buried(view)
        else:
            row = self._conn.execute("SELECT seq FROM syncs WHERE view = ? AND id = ?", (view, after)).fetchone()
            if row is None:
                self._refuse_if_buried(view, after)
                raise self._not_found(view, after)
            seq = row["seq"]
        rows = self._conn.execute(
            "SELECT * FROM syncs WHERE view = ? AND status = 'succeeded' AND seq > ? ORDER BY seq", (view, seq)
        )
        return [_sync(r) for r in rows]

    def succeeded_before(self, view: str, sync_id: str) -> list[SyncRecord]:
        """The view's succeeded syncs before sync `sync_id`, oldest first."""
        rows = self._conn.execute(
            "SELECT * FROM syncs WHERE view = ? AND status = 'succeeded'"
            " AND seq < (SELECT seq FROM syncs WHERE view = ? AND id = ?) ORDER BY seq",
            (view, view, sync_id),
        )
        return [_sync(r) for r in rows]

    # -- retention (service/retention.py) ---------------------------------------------
    def history(self, view: str) -> list[SyncRecord]:
        """Every sync record of the view, oldest first."""
        return [_sync(r) for r in self._conn.execute("SELECT * FROM syncs WHERE view = ? ORDER BY seq", (view,))]

    def retention_candidates(self, keep: Keep, now: dt.datetime) -> list[str]:
        """The views that may have syncs `keep` lets go (retention.removable decides): those with
        more finished syncs than the count kept, or with one that finished before the time kept.
        One query, so that a round of retention visits only the views with something to remove."""
        if keep.count is not None:
            rows = self._conn.execute(
                "SELECT view FROM syncs WHERE status IN ('succeeded', 'failed') GROUP BY view HAVING COUNT(*) > ?",
                (keep.count,),
            )
        else:
            assert keep.seconds is not None
            # a second's margin: a timestamp written in another precision compares as text a little off
            cutoff = now - dt.timedelta(seconds=keep.seconds) + dt.timedelta(seconds=1)
            rows = self._conn.execute(
                "SELECT DISTINCT view FROM syncs WHERE status IN ('succeeded', 'failed') AND finished_at < ?",
                (cutoff.astimezone(dt.UTC).isoformat(timespec="milliseconds"),),
            )
        return sorted(r["view"] for r in rows)

    def bury_syncs(self, burials: Mapping[str, list[str]]) -> dict[str, list[str]]:
        """Replace finished syncs' records by their tombstones (`burials`: each view's ids), all in
        one transaction: the ids it buried, by view (a sync gone already, or not finished, is left out).

        One commit, so one wait for the disk, however many: the files of a buried sync are
        removed only after it, so that no crash leaves a record whose files went."""
        buried: dict[str, list[str]] = {}
        stamp = now()
        with self._lock, self._transaction():
            for view, ids in burials.items():
                for sync_id in ids:
                    row = self._conn.execute(
                        "SELECT seq, finished_at FROM syncs WHERE view = ? AND id = ?"
                        " AND status NOT IN ('queued', 'running')",
                        (view, sync_id),
                    ).fetchone()
                    if row is None:
                        continue
                    self._conn.execute(
                        "INSERT OR REPLACE INTO removed_syncs VALUES (?, ?, ?, ?, ?)",
                        (view, sync_id, row["seq"], row["finished_at"], stamp),
                    )
                    self._conn.execute("DELETE FROM syncs WHERE id = ?", (sync_id,))
                    buried.setdefault(view, []).append(sync_id)
        return buried

    def prune_tombstones(self, view: str, keep: int) -> int:
        """Keep the view's `keep` newest tombstones, so that they stay bounded too; how many went."""
        with self._lock:
            return self._conn.execute(
                "DELETE FROM removed_syncs WHERE view = ? AND seq < (SELECT seq FROM removed_syncs WHERE view = ?"
                " ORDER BY seq DESC LIMIT 1 OFFSET ?)",
                (view, view, keep - 1),
            ).rowcount

    def _not_found(self, view: str, sync_id: str) -> NotFound:
        """NotFound for a sync id the view does not have, which says so plainly when the view
        never lost a sync to retention, and names the other possibility when it did."""
        buried = self._conn.execute("SELECT 1 FROM removed_syncs WHERE view = ? LIMIT 1", (view,)).fetchone()
        longer_ago = (
            " (or one retention removed so long ago that its tombstone went too: read the view's rows, "
            f"GET /v1/views/{view}/rows, and follow the change feed after the sync its X-Last-Sync header names)"
            if buried
            else ""
        )
        return NotFound(f"sync {sync_id!r} of view {view!r} not found{longer_ago}")

    def buried(self, view: str) -> set[str]:
        """The ids of the view's syncs retention removed."""
        return {r["id"] for r in self._conn.execute("SELECT id FROM removed_syncs WHERE view = ?", (view,))}

    def _refuse_if_load_buried(self, view: str) -> None:
        """Gone (410) when retention removed the view's first syncs: a feed from the start
        would miss its load."""
        if self._conn.execute("SELECT 1 FROM removed_syncs WHERE view = ? LIMIT 1", (view,)).fetchone():
            raise Gone(
                f"the first syncs of view {view!r} (its load among them) were removed by the retention policy "
                f"(SERVICE_KEEP_DELTAS); read the view's rows (GET /v1/views/{view}/rows) and follow the change "
                "feed after the sync its X-Last-Sync header names"
            )

    def _refuse_if_buried(self, view: str, sync_id: str) -> None:
        """Gone (410) when retention removed the sync: it was the view's, and is no longer kept."""
        row = self._conn.execute(
            "SELECT finished_at, removed_at FROM removed_syncs WHERE view = ? AND id = ?", (view, sync_id)
        ).fetchone()
        if row is not None:
            raise Gone(
                f"sync {sync_id} of view {view!r} (finished {row['finished_at']}) was removed at {row['removed_at']} by the "
                "retention policy (SERVICE_KEEP_DELTAS); read the view's rows (GET /v1/views/"
                f"{view}/rows) and follow the change feed after the sync its X-Last-Sync header names"
            )

    def latest_sync(self, view: str) -> SyncRecord | None:
        """The view's newest sync record, whatever its status."""
        row = self._conn.execute("SELECT * FROM syncs WHERE view = ? ORDER BY seq DESC LIMIT 1", (view,)).fetchone()
        return _sync(row) if row else None

    def schedules(self) -> list[Scheduled]:
        """Every scheduled view with its newest sync's status and end, in one query (the
        scheduler reads this several times a second: parsing thousands of views' options and
        asking for each one's newest sync apart cost it a core)."""
        rows = self._conn.execute(
            "SELECT v.name, json_extract(v.options, '$.schedule.every_s') AS every_s, v.created_at, s.status,"
            " s.finished_at FROM views v LEFT JOIN syncs s ON s.seq = (SELECT max(seq) FROM syncs WHERE view = v.name)"
            " WHERE every_s IS NOT NULL ORDER BY v.name"
        )
        return [Scheduled(*r) for r in rows]

    def last_succeeded(self, view: str) -> SyncRecord | None:
        row = self._conn.execute(
            "SELECT * FROM syncs WHERE view = ? AND status = 'succeeded' ORDER BY seq DESC LIMIT 1", (view,)
        ).fetchone()
        return _sync(row) if row else None

    # -- publications ------------------------------------------------------------------
    def publication(self, view: str, destination: str) -> tuple[str | None, str | None]:
        """(applied sync, last error) of a view's destination (named by `destination`)."""
        row = self._conn.execute(
            "SELECT applied_sync, error FROM publications WHERE view = ? AND destination = ?", (view, destination)
        ).fetchone()
        return (row["applied_sync"], row["error"]) if row else (None, None)

    def set_publication(self, view: str, destination: str, applied_sync: str | None, error: str | None) -> None:
        """Record how far a view's destination has caught up, and its last error (None: none)."""
        with self._lock:
            self._conn.execute(
                "INSERT INTO publications (view, destination, applied_sync, error, updated_at) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (view, destination) DO UPDATE SET applied_sync = excluded.applied_sync,"
                " error = excluded.error, updated_at = excluded.updated_at",
                (view, destination, applied_sync, error, now()),
            )

    def changing_after(self, view: str, after: str | None) -> int:
        """How many succeeded syncs of the view after `after` (all for None, or an unknown one)
        changed it: rows inserted, updated or deleted, or a redefinition applied."""
        known = (
            after is not None
            and self._conn.execute("SELECT 1 FROM syncs WHERE view = ? AND id = ?", (view, after)).fetchone()
        )
        return sum(1 for s in self.succeeded_after(view, after if known else None) if changed(s))


class Scheduled(NamedTuple):
    """A scheduled view as the scheduler sees it: its period, and its newest sync's status and end."""

    view: str
    every_s: int
    #: when the view was (re)defined: a view never synced is due then
    created_at: str
    #: None: never synced
    status: str | None
    finished_at: str | None


def changed(sync: SyncRecord) -> bool:
    """Whether a succeeded sync changed its view (its delta has lines, or it redefined the view).

    >>> from service.records import SyncRecord as S
    >>> changed(S("s", "v", "succeeded", None, "", None, None, {"rows_updated": 2}, None, "api"))
    True
    >>> changed(S("s", "v", "succeeded", None, "", None, None, {"rows_inserted": 0}, None, "api"))
    False
    """
    rows = sum(int(sync.metrics.get(k) or 0) for k in ("rows_inserted", "rows_updated", "rows_deleted"))
    return rows > 0 or sync.trigger == "redefine"


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]


def _view(row: sqlite3.Row) -> ViewRecord:
    return ViewRecord(
        name=row["name"],
        sql=row["sql"],
        definition=json.loads(row["definition"]),
        options=ViewOptions.from_stored(row["options"]),
        created_at=row["created_at"],
    )


def _sync(row: sqlite3.Row) -> SyncRecord:
    data = dict(row)
    data["metrics"] = json.loads(data["metrics"] or "{}")
    data["progress"] = json.loads(data["progress"]) if data["progress"] else None
    data.pop("seq", None)
    data["verify"] = bool(data.get("verify"))
    return SyncRecord(**data)
