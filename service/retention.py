"""Retention: which of a view's syncs, deltas and stored versions to forget, and forgetting them.

Every sync leaves a record in the catalog and a delta under `deltas/<sync>/`; a view synced
every minute adds half a million of each a year. The policy (SERVICE_KEEP_DELTAS, retention_policy.py) keeps either
the syncs of the last while (`30d`, `12h`, `45m`) or the newest N syncs of each view (`1000`),
and a background task removes the rest: the record (a tombstone of it stays, so that the
change feed and the sync endpoints answer 410 for it, and 404 only for ids the view never
had; the newest TOMBSTONES_KEPT of each view), its delta and the version it committed.
Never removed: the sync of the view's current version and every sync after it, the view's newest record (its last attempt), and any sync at
or after the oldest one a consumer still needs (`needed`: a destination's applied sync, given
by the caller through `NeededSyncs`).

Removal is one sync at a time: its record becomes a tombstone in one catalog transaction, and
then its files go (a delta is renamed aside, then deleted, so no reader ever sees half of
one). A view a change-feed reader is streaming is left alone until the reader is done
(readers.py); a running sync reads no old delta and never loses its view's current version.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping

from service.catalog import Catalog
from service.periodic import Periodic
from service.readers import Readers
from service.records import SyncRecord
from service.retention_policy import Keep
from warehouse.store.versions import ViewStore

log = logging.getLogger("service.retention")

#: Tombstones kept per view (the newest): enough to answer 410 for a week of removed syncs of a
#: view synced every minute, bounded so the catalog stays bounded too; an id removed longer
#: ago is a 404 whose message names the possibility.
TOMBSTONES_KEPT = 10_000
FINISHED = ("succeeded", "failed")

#: The oldest sync still needed of each view (its record and every later sync are kept), e.g.
#: the applied sync of a view's most lagging destination. The hook the destinations wire in.
NeededSyncs = Callable[[], Mapping[str, str]]


def removable(
    syncs: list[SyncRecord], keep: Keep, now: dt.datetime, current: str | None, needed: str | None = None
) -> list[str]:
    """The ids of a view's syncs (`syncs`: its records, oldest first) the policy lets go.

    Only finished syncs go, never the view's newest record, never the sync of its `current`
    version nor any sync after it, and never `needed` (the oldest sync a consumer still
    reads after) nor any sync after it. A failed sync holds no delta: it goes by the policy alone.

    >>> def s(id, status="succeeded", day=1):
    ...     return SyncRecord(id, "v", status, None, "", None, f"2026-01-{day:02}T00:00:00+00:00", {}, None, "api")
    >>> syncs = [s("a", day=1), s("b", "failed", day=2), s("c", day=3), s("d", day=4), s("e", "failed", day=5)]
    >>> now = dt.datetime(2026, 1, 5, 12, tzinfo=dt.UTC)
    >>> removable(syncs, Keep(count=2), now, current="d")
    ['a', 'b', 'c']
    >>> removable(syncs, Keep(count=2), now, current="c")
    ['a', 'b']
    >>> removable(syncs, Keep(seconds=3 * 86400), now, current="d")
    ['a', 'b']
    >>> removable(syncs, Keep(count=1), now, current="d", needed="c")
    ['a', 'b']
    >>> removable(syncs, Keep(count=1), now, current=None)
    ['b']
    """
    finished = [s for s in syncs[:-1] if s.status in FINISHED and s.finished_at]
    if keep.count is not None:
        kept = {s.id for s in [s for s in syncs if s.status in FINISHED][-keep.count :]}
        old = [s for s in finished if s.id not in kept]
    else:
        assert keep.seconds is not None
        cutoff = now - dt.timedelta(seconds=keep.seconds)
        old = [s for s in finished if dt.datetime.fromisoformat(str(s.finished_at)) < cutoff]
    order = {s.id: i for i, s in enumerate(syncs)}
    # a succeeded sync goes only before both the current one and the one still needed;
    # without a current version (never succeeded, or its record unknown) none goes
    bound = min(order.get(current, -1) if current else -1, order.get(needed, len(syncs)) if needed else len(syncs))
    return [s.id for s in old if s.status == "failed" or order[s.id] < bound]


def forget(catalog: Catalog, store: ViewStore, readers: Readers, view: str, ids: list[str]) -> int:
    """Remove the syncs `ids` of `view`, one at a time: how many went. Stops early when a reader
    of the view starts (the rest wait for the next round)."""
    removed = 0
    for sync_id in ids:
        with readers.excluding(view) as alone:
            if not alone:
                break
            if not catalog.bury_sync(view, sync_id):
                continue
            store.remove_sync(sync_id)
            removed += 1
    return removed


class RetentionTask(Periodic):
    """Applies the policy to every view every `interval_s` seconds, in a thread of its own."""

    def __init__(
        self,
        catalog: Catalog,
        stores: Callable[[str], ViewStore],
        readers: Readers,
        keep: Keep,
        interval_s: float,
        needed: NeededSyncs | None = None,
    ):
        super().__init__("retention", interval_s, self.run_once)
        self.catalog = catalog
        self.stores = stores
        self.readers = readers
        self.keep = keep
        #: the hook for consumers that read deltas after a sync of their own (destinations)
        self.needed: NeededSyncs = needed or dict

    def run_once(self) -> int:
        """One round over every view: how many syncs were removed."""
        needed = self.needed()
        now = dt.datetime.now(dt.UTC)
        total = 0
        for view in self.catalog.views():
            store = self.stores(view.name)
            current = store.current()
            ids = removable(
                self.catalog.history(view.name),
                self.keep,
                now,
                current.sync_id if current else None,
                needed.get(view.name),
            )
            total += forget(self.catalog, store, self.readers, view.name, ids)
            store.sweep_removed(self.catalog.buried(view.name))
            self.catalog.prune_tombstones(view.name, TOMBSTONES_KEPT)
        # the audit log follows the policy of sync records (service/audit.py)
        self.catalog.audit.prune(self.keep.seconds, self.keep.count, now)
        if total:
            log.info("retention removed %d sync(s) (policy %s)", total, self.keep)
        return total
