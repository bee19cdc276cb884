"""Versioned storage of a view: fragments, statistics and deltas as Parquet, one pointer file.

Layout under `<data-dir>/views/<view>/`:

    CURRENT                      {"format": 2, "version": N, "sync_id": ...}; replaced atomically
    versions/<N>/meta.json       what version N holds ({"format": 2, ...})
    versions/<N>/site-<i>/fragment/   the site query's rows plus update statistics (__tno: syncs
                                 seen, __uno: updates seen): all of them, or with layers.json the base under an overlay (layers.py)
    versions/<N>/site-<i>/layers.json, upserts/, removed/   the overlay (format 3)
    versions/<N>/site-<i>/omega.parquet  the update statistics as a histogram (update_counts.py)
    versions/<N>/site-<i>/deletions/  deletion statistics: per sync tuples before, deleted, inserted (deletions.py)
    versions/<N>/site-<i>/sketch/     the sketch strategy's table of the fragment (sketch.arrow), when kept
    versions/<N>/site-<i>/sketch-prepared/   a new table of the fragment, built after the commit
                                 for the next sync (sketch_prep.py); written as
                                 sketch-prepared.tmp-*/ and renamed when whole
    versions/<N>/view/           the view's rows, when it joins several sites: all of them, or
                                 the base under an overlay in view-overlay/ (layers.json,
                                 upserts/, removed/), grown by incremental maintenance (join_delta.py)
    deltas/<sync-id>/            the sync's delta (__op + the view's columns); retention
                                 (service/retention.py) removes those of syncs outside its policy
    staging/<sync-id>/           work files of a running sync
    staging/<sync-id>.projected/ the current version projected to a redefinition's fewer columns,
                                 which the sync applying it starts from (pipeline/redefine.py)
    staging/<sync-id>.widened/   the current version with wider column types, which a sync
                                 that takes a widening starts from (widened.py)

A sync writes everything under its staging directory, moves the finished version and delta
into place, and then replaces CURRENT: that rename is the single step that makes the new
version visible. Anything a crash leaves behind is not referenced by CURRENT and is
removed by `cleanup()`.

CURRENT and meta.json carry the layout's format (formats.STORAGE_FORMAT); another format,
or none, is refused (FormatError), never guessed at.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from warehouse import faults
from warehouse.errors import StorageError
from warehouse.formats import STORAGE_FORMAT, check_format

#: Versions kept besides the current one (a reader may still be streaming the previous one).
KEEP_OLD_VERSIONS = 1
#: Marks a directory written beside a committed version and renamed when whole; what a
#: crash leaves under this name is removed by `cleanup()`.
TMP_MARK = ".tmp-"
#: A forgotten sync's delta renamed aside before it is deleted (retention).
REMOVED_MARK = ".removed-"


@dataclass(frozen=True)
class Version:
    number: int
    sync_id: str
    path: Path

    def site_dir(self, site: int) -> Path:
        return self.path / f"site-{site}"

    def fragment(self, site: int) -> Path:
        """The fragment's rows, or with a layers.json beside it its base layer (layers.py)."""
        return self.site_dir(site) / "fragment"

    def deletions(self, site: int) -> Path:
        return self.path / f"site-{site}" / "deletions"

    def rows(self) -> Path:
        """The view's rows, stored only for a view over several sites (else: fragment 0);
        with a layers.json in `view_overlay()`, the base under an overlay (layers.py)."""
        return self.path / "view"

    def view_overlay(self) -> Path:
        """layers.json, upserts/ and removed/ of the view's rows, when they have an overlay."""
        return self.path / "view-overlay"

    def meta(self) -> dict:
        meta = json.loads((self.path / "meta.json").read_text())
        check_format(meta, STORAGE_FORMAT, f"{self.path / 'meta.json'} of view version {self.number}")
        return meta


class ViewStore:
    """The stored versions of one view."""

    def __init__(self, data_dir: Path, view: str):
        self.root = Path(data_dir) / "views" / view
        self.view = view

    # -- reading ---------------------------------------------------------------------
    def current(self) -> Version | None:
        pointer = self.root / "CURRENT"
        if not pointer.exists():
            return None
        data = json.loads(pointer.read_text())
        check_format(data, STORAGE_FORMAT, f"view {self.view!r} ({pointer})")
        path = self.root / "versions" / str(data["version"])
        if not path.is_dir():
            raise StorageError(f"view {self.view!r}: CURRENT names version {data['version']}, which is missing")
        return Version(data["version"], data["sync_id"], path)

    def delta(self, sync_id: str) -> Path:
        return self.root / "deltas" / sync_id

    def version_of(self, sync_id: str) -> Version | None:
        """The stored version that sync `sync_id` committed, if it is still kept (`cleanup()`
        keeps the current one and KEEP_OLD_VERSIONS before it; a running service all since
        its start)."""
        versions = self.root / "versions"
        if not versions.is_dir():
            return None
        for path in versions.iterdir():
            meta = path / "meta.json"
            if not path.name.isdigit() or not meta.is_file():
                continue
            try:
                stored = json.loads(meta.read_text()).get("sync_id")
            except (OSError, ValueError):  # being removed, or half written by a crash
                continue
            if stored == sync_id:
                return Version(int(path.name), sync_id, path)
        return None

    # -- writing ---------------------------------------------------------------------
    def staging(self, sync_id: str) -> Path:
        path = self.root / "staging" / sync_id
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        return path

    def staged_version(self, sync_id: str, number: int) -> Version:
        return Version(number, sync_id, self.root / "staging" / sync_id / "version")

    def staged_delta(self, sync_id: str) -> Path:
        return self.root / "staging" / sync_id / "delta"

    def commit(self, staged: Version, meta: dict) -> Version:
        """Move a staged version and its delta into place and make it current, atomically."""
        # unindented: json's indenting encoder is its pure-Python one, a sync's metrics its largest cost here
        (staged.path / "meta.json").write_text(json.dumps({"format": STORAGE_FORMAT, **meta}, default=str))
        versions = self.root / "versions"
        versions.mkdir(parents=True, exist_ok=True)
        final = versions / str(staged.number)
        if final.exists():  # a leftover of a crashed sync that never became current
            shutil.rmtree(final)
        os.replace(staged.path, final)
        delta = self.staged_delta(staged.sync_id)
        if delta.exists():
            (self.root / "deltas").mkdir(exist_ok=True)
            os.replace(delta, self.delta(staged.sync_id))
        pointer_tmp = self.root / "CURRENT.tmp"
        pointer_tmp.write_text(
            json.dumps({"format": STORAGE_FORMAT, "version": staged.number, "sync_id": staged.sync_id})
        )
        fsync_file(pointer_tmp)
        faults.checkpoint("before_visible")
        os.replace(pointer_tmp, self.root / "CURRENT")  # the commit point
        fsync_dir(self.root)
        return Version(staged.number, staged.sync_id, final)

    def widening(self, sync_id: str) -> Path:
        """Where a sync that widens the view's columns keeps the widened copy it starts from
        (store/widened.py): beside its staging directory, which each attempt starts afresh."""
        return self.root / "staging" / f"{sync_id}.widened"

    def projection(self, sync_id: str) -> Path:
        """Where a sync that applies a redefinition leaving columns out keeps the current
        version projected to the new columns, which it syncs from (pipeline/redefine.py)."""
        return self.root / "staging" / f"{sync_id}.projected"

    def discard(self, sync_id: str) -> None:
        shutil.rmtree(self.root / "staging" / sync_id, ignore_errors=True)
        shutil.rmtree(self.widening(sync_id), ignore_errors=True)
        shutil.rmtree(self.projection(sync_id), ignore_errors=True)

    def forget(self, sync_id: str) -> None:
        """Remove all a sync that never became current may have left: staging and delta."""
        self.discard(sync_id)
        current = self.current()
        if current is None or current.sync_id != sync_id:
            shutil.rmtree(self.delta(sync_id), ignore_errors=True)

    def cleanup(self, keep_syncs: set[str] | None = None) -> list[Path]:
        """Remove staging leftovers, versions newer than CURRENT and all but the newest old ones,
        and half-written directories beside the versions kept (TMP_MARK)."""
        removed = []
        staging = self.root / "staging"
        if staging.exists():
            for child in staging.iterdir():
                if keep_syncs and child.name in keep_syncs:
                    continue
                shutil.rmtree(child, ignore_errors=True)
                removed.append(child)
        current = self.current()
        versions = self.root / "versions"
        if versions.exists():
            numbers = sorted(int(p.name) for p in versions.iterdir() if p.name.isdigit())
            for n in numbers:
                if current is None or n > current.number or n < current.number - KEEP_OLD_VERSIONS:
                    shutil.rmtree(versions / str(n), ignore_errors=True)
                    removed.append(versions / str(n))
                    continue
                for partial in (versions / str(n)).glob(f"site-*/*{TMP_MARK}*"):
                    shutil.rmtree(partial, ignore_errors=True)
                    removed.append(partial)
        (self.root / "CURRENT.tmp").unlink(missing_ok=True)
        return removed

    # -- retention (service/retention.py) -------------------------------------------
    def remove_sync(self, sync_id: str) -> bool:
        """Remove a forgotten sync's delta and the version it committed, unless that version
        is the current one or among the KEEP_OLD_VERSIONS before it; whether it left the version
        (for a later round, once newer versions came). The delta is renamed aside first: a
        reader finds it whole or not at all."""
        delta = self.delta(sync_id)
        if delta.is_dir():
            aside = delta.with_name(f"{REMOVED_MARK}{sync_id}")
            os.replace(delta, aside)
            shutil.rmtree(aside, ignore_errors=True)
        version = self.version_of(sync_id)
        if version is None:
            return False
        current = self.current()
        if current is not None and version.number < current.number - KEEP_OLD_VERSIONS:
            shutil.rmtree(version.path, ignore_errors=True)
            return False
        return True

    def sweep_removed(self, sync_ids: set[str]) -> set[str]:
        """Finish removals a crash cut short, and those left while their version was recent:
        the files of the forgotten syncs `sync_ids`. The ids whose versions are still left (recent)."""
        deltas = self.root / "deltas"
        present = set()
        for path in deltas.iterdir() if deltas.is_dir() else ():
            if path.name.startswith(REMOVED_MARK):
                shutil.rmtree(path, ignore_errors=True)
            else:
                present.add(path.name)
        current = self.current()
        versions = self.root / "versions"
        oldest_kept = current.number - KEEP_OLD_VERSIONS if current is not None else 0
        left = set()
        for path in versions.iterdir() if versions.is_dir() else ():
            if not path.name.isdigit():
                continue
            try:
                sync_id = json.loads((path / "meta.json").read_text()).get("sync_id")
            except (OSError, ValueError):
                continue
            if sync_id not in sync_ids:
                continue
            if current is not None and int(path.name) < oldest_kept:
                shutil.rmtree(path, ignore_errors=True)
            else:
                left.add(sync_id)
        for sync_id in sync_ids & present:  # a delta's directory is named by its sync's id
            if self.remove_sync(sync_id):
                left.add(sync_id)
        return left

    def drop(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def fsync_file(path: Path) -> None:
    with open(path, "rb+") as handle:
        os.fsync(handle.fileno())


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
