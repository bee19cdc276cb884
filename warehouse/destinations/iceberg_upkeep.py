"""Upkeep of a view's Iceberg table: old snapshots expired, and the files only they read deleted.

Expiry follows the Delta table's vacuum (delta_upkeep.py) and its setting: a table keeps the
snapshots of its last `keep_versions` syncs, so that time travel to each of them works
(`table.scan(snapshot_id=...)`, the snapshot carrying the sync's id). Once the table holds
2 × keep_versions snapshots, every snapshot older than the `keep_versions`-th newest that
carries a sync id is removed from the table's metadata, in one catalog commit of its own
after the sync's (the sync is held whatever becomes of it); the snapshot carrying the newest
sync id, and every snapshot after the oldest kept one, are never among them. Then the data
files, manifests and manifest lists that only the removed snapshots referenced are deleted,
so the table's files stay within about 2 × keep_versions syncs' worth. A crash between the
two leaves files no snapshot refers to (harmless, never deleted afterwards); a commit that
finds the table moved on is dropped and tried at the next sync.

Old metadata files (one per commit) are deleted by the catalog itself after each commit,
keeping the last METADATA_KEPT (the table properties a new table is created with).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from pyiceberg.exceptions import CommitFailedException

log = logging.getLogger(__name__)

#: Previous metadata files the catalog keeps after each commit (Iceberg's own properties).
METADATA_KEPT = 10
PROPERTIES = {
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": str(METADATA_KEPT),
}


def expiring(snapshots: list[tuple[int, bool]], keep: int) -> list[int]:
    """The snapshots to expire among `snapshots` ((id, carries a sync id), oldest first): all
    before the `keep`-th newest one carrying a sync id, once there are 2 × `keep` snapshots.

    >>> expiring([(1, True), (2, True), (3, False), (4, True)], 2)
    [1]
    >>> expiring([(1, True), (2, True), (3, True)], 2)
    []
    >>> expiring([(1, False), (2, False), (3, False), (4, True)], 1)
    [1, 2, 3]
    >>> expiring([(1, True), (2, False), (3, False), (4, False)], 1)
    []
    """
    if len(snapshots) < 2 * keep:
        return []
    carrying = [i for i, (_, carries) in enumerate(snapshots) if carries]
    if len(carrying) < keep:
        return []
    return [snapshot_id for snapshot_id, _ in snapshots[: carrying[-keep]]]


def expire(table: Any, keep: int, carries: str) -> list[str]:
    """Expire what `expiring` says of `table`'s snapshots (those whose summary holds the key
    `carries` carry a sync id), then delete the files only they referenced; the paths deleted."""
    snapshots = sorted(table.snapshots(), key=lambda s: s.sequence_number)
    marked = [(s.snapshot_id, bool(s.summary and s.summary.additional_properties.get(carries))) for s in snapshots]
    gone = set(expiring(marked, keep))
    if not gone:
        return []
    kept = [s for s in snapshots if s.snapshot_id not in gone]
    removable = _files(table, [s for s in snapshots if s.snapshot_id in gone]) - _files(table, kept)
    try:
        table.maintenance.expire_snapshots().by_ids(sorted(gone)).commit()
    except CommitFailedException as exc:  # another commit came first: the next sync tries again
        log.info("iceberg table %s: snapshots not expired now: %s", table.name(), exc)
        return []
    deleted = []
    for path in sorted(removable):
        try:
            table.io.delete(path)
        except OSError as exc:  # gone already, or the store refused: left behind, read by nothing
            log.warning("iceberg table %s: %s not deleted: %s", table.name(), path, exc)
        else:
            deleted.append(path)
    return deleted


def _files(table: Any, snapshots: Iterable[Any]) -> set[str]:
    """Every file `snapshots` read: their manifest lists, manifests and live data files."""
    paths: set[str] = set()
    for snapshot in snapshots:
        paths.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            paths.add(manifest.manifest_path)
            paths.update(e.data_file.file_path for e in manifest.fetch_manifest_entry(table.io, discard_deleted=True))
    return paths
