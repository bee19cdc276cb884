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

A round looks only at the views that have syncs to remove (one catalog query finds them).
Their records become tombstones in one catalog transaction per batch of views, which waits
for the disk once, and only then do their files go (a delta is renamed aside, then deleted,
so no reader ever sees half of one): a crash never leaves a record whose files went, and
the tombstones whose files a crash left are swept by the next start's first round. A view a
change-feed reader is streaming is left alone until the reader is done (readers.py); a
running sync reads no old delta and never loses its view's current version.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

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
#: Views whose removals share one catalog transaction (one wait for the disk): a reader of one
#: of them that comes meanwhile waits for the batch's files to go, a fraction of a second.
BATCH_VIEWS = 64

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


def forget(
    catalog: Catalog, stores: Callable[[str], ViewStore], readers: Readers, plan: Mapping[str, list[str]]
) -> Forgotten:
    """Remove the syncs `plan` names (each view's ids), BATCH_VIEWS views at a time: what went.

    A batch's tombstones are one catalog transaction, which waits for the disk once, and only
    then do the files go: a crash before the commit leaves every record and file in place; one
    after it leaves tombstones whose files the next round's sweep removes, never a record the
    catalog still shows whose delta is gone. A view with a reader is left for the next round;
    one being removed makes a reader that comes wait for its batch.
    """
    done = Forgotten()
    views = list(plan)
    for at in range(0, len(views), BATCH_VIEWS):
        with contextlib.ExitStack() as stack:
            alone = [view for view in views[at : at + BATCH_VIEWS] if stack.enter_context(readers.excluding(view))]
            buried = catalog.bury_syncs({view: plan[view] for view in alone})
            for view, ids in buried.items():
                left = _remove_files(stores(view), view, ids)
                done.count += len(ids)
                done.views.add(view)
                if left:
                    done.left[view] = left
    return done


def _remove_files(store: ViewStore, view: str, ids: list[str]) -> set[str]:
    """Remove the files of the view's buried syncs `ids`: those whose version stays for now
    (a recent one) or whose removal failed, for a later sweep."""
    left = set()
    for sync_id in ids:
        try:
            if store.remove_sync(sync_id):
                left.add(sync_id)
        except OSError as exc:  # its tombstone stands: the files are swept again later
            log.warning("view %s: the files of removed sync %s stay for now: %s", view, sync_id, exc)
            left.add(sync_id)
    return left


@dataclass
class Forgotten:
    """What a round of removals did: how many syncs went, of which views, and the syncs whose
    versions it left (still among a view's recent ones; removed by a later round's sweep)."""

    count: int = 0
    views: set[str] = field(default_factory=set)
    left: dict[str, set[str]] = field(default_factory=dict)


class RetentionTask(Periodic):
    """Applies the policy every `interval_s` seconds, in a thread of its own, to the views that
    have syncs it lets go (Catalog.retention_candidates): the others are not looked at.

    Its first round also sweeps every view (the files of forgotten syncs that a crash, or a
    stop, left); later ones sweep only the views whose forgotten syncs left a version (one of
    the view's recent ones then) when they are candidates again: newer versions came since.
    """

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
        #: each view's forgotten syncs whose versions were left; None: not known (every view is swept)
        self._left: dict[str, set[str]] | None = None

    def run_once(self) -> int:
        """One round: how many syncs were removed."""
        needed = self.needed()
        now = dt.datetime.now(dt.UTC)
        candidates = self.catalog.retention_candidates(self.keep, now)
        plan = {}
        for view in candidates:
            current = self.stores(view).current()
            ids = removable(
                self.catalog.history(view), self.keep, now, current.sync_id if current else None, needed.get(view)
            )
            if ids:
                plan[view] = ids
        done = forget(self.catalog, self.stores, self.readers, plan)
        if self._left is None:  # the first round: whatever the last process left, everywhere
            sweep = {view: self.catalog.buried(view) for view in self.catalog.view_names()}
            self._left, pruned = {}, set(sweep) | done.views
        else:  # a version left goes once newer ones came: with a sync that made the view a candidate again
            sweep = {view: self._left.pop(view) for view in candidates if view in self._left}
            pruned = done.views  # tombstones grow by burials only
        for view, buried in sweep.items():
            buried = buried | done.left.pop(view, set())
            still = self.stores(view).sweep_removed(buried) if buried else set()
            if still:
                self._left[view] = still
        for view, still in done.left.items():
            self._left[view] = self._left.get(view, set()) | still
        for view in pruned:
            self.catalog.prune_tombstones(view, TOMBSTONES_KEPT)
        # the audit log follows the policy of sync records (service/audit.py)
        self.catalog.audit.prune(self.keep.seconds, self.keep.count, now)
        if done.count:
            log.info("retention removed %d sync(s) of %d view(s) (policy %s)", done.count, len(done.views), self.keep)
        return done.count
