"""Scheduled syncs: a thread that queues each scheduled view's sync when it is due.

A view with a schedule of `every_s` N is due N seconds after its latest sync ended,
whatever started that sync (a manual one too), and at once when it was never synced. Due
times come from the sync records in the catalog, so a restarted service finds a view
whose runs were missed due at once, runs it once, and goes on from there: no burst. A
view whose sync is queued or running is not due (its next run counts from that sync's
end), so syncs of one view never overlap, and a failed sync is retried a period later.
A due sync joins the runner's queue at its due time (jobs.py, slots.py): views due longest
ago run first, whatever source they read, so none starves behind a busy source.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time

from service.catalog import ACTIVE, Catalog, Scheduled
from service.jobs import SyncRunner
from service.records import SyncRecord, ViewRecord

log = logging.getLogger("service.scheduler")

#: Longest sleep between two looks at the catalog: a sync that ends is noticed within it
#: (a schedule changed through the API wakes the thread at once).
MAX_SLEEP_S = 1.0
#: Shortest sleep, so that a clock read just before a due time does not spin.
MIN_SLEEP_S = 0.05
#: The scheduler sleeps at least this many times as long as its last look took (within
#: MAX_SLEEP_S): with thousands of views due a few milliseconds apart, a look every
#: MIN_SLEEP_S would read every schedule twenty times a second (a tenth of the service's
#: time in the 5,000-table soak).
SLEEP_OVER_TICK = 9
#: Due syncs queued with the runner at once: the runner's lock, which a sync's end waits
#: for, is held for one batch at a time, never for all the views due after a start.
DUE_BATCH = 100


def next_run_at(every_s: int, latest: SyncRecord | Scheduled | None, since: str) -> dt.datetime | None:
    """When the view's next scheduled sync is due; None while one of its syncs is under way.

    Args:
        every_s: the schedule's period.
        latest: the view's newest sync record, or what Catalog.schedules says of it (None: never synced).
        since: when the view was (re)defined: a view never synced is due then.

    >>> from types import SimpleNamespace as Sync
    >>> next_run_at(60, Sync(status="failed", finished_at="2026-01-01T00:00:00.000+00:00"), "")
    datetime.datetime(2026, 1, 1, 0, 1, tzinfo=datetime.timezone.utc)
    >>> next_run_at(60, None, "2026-01-01T00:00:00.000+00:00").isoformat()
    '2026-01-01T00:00:00+00:00'
    >>> next_run_at(60, Sync(status="running", finished_at=None), "") is None
    True
    """
    if latest is None:
        return dt.datetime.fromisoformat(since)
    if latest.status in ACTIVE or latest.finished_at is None:
        return None
    return dt.datetime.fromisoformat(latest.finished_at) + dt.timedelta(seconds=every_s)


def schedule_fields(view: ViewRecord, catalog: Catalog | None, running: bool) -> dict:
    """The view's `schedule` and `next_run_at` as the API shows them (`running`: the scheduler is on;
    without the catalog, next_run_at is left out)."""
    schedule = view.options.schedule
    shown = schedule.model_dump() if schedule else None
    if catalog is None:
        return {"schedule": shown}
    due = None
    if schedule and running:
        due = next_run_at(schedule.every_s, catalog.latest_sync(view.name), view.created_at)
    return {"schedule": shown, "next_run_at": due.isoformat(timespec="milliseconds") if due else None}


class Scheduler:
    """Queues due syncs with the runner (trigger "schedule") until stopped."""

    def __init__(self, catalog: Catalog, runner: SyncRunner):
        self.catalog = catalog
        self.runner = runner
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="scheduler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=10)

    def wake(self) -> None:
        """Look at the schedules now (one was set or changed)."""
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                delay = max(self.tick(), min(MAX_SLEEP_S, SLEEP_OVER_TICK * (time.monotonic() - started)))
            except Exception:  # the catalog closing under it at shutdown, or a bug: keep going
                log.exception("scheduler: looking for due syncs failed")
                delay = MAX_SLEEP_S
            self._wake.wait(delay)
            self._wake.clear()

    def tick(self, now: dt.datetime | None = None) -> float:
        """Queue every due sync; the seconds until the next look."""
        now = now or dt.datetime.now(dt.UTC)
        soonest = MAX_SLEEP_S
        batch: list[tuple[str, dt.datetime]] = []
        for view in self.catalog.schedules():
            if self._stop.is_set():
                break
            due = next_run_at(view.every_s, view if view.status is not None else None, view.created_at)
            if due is None:  # a sync under way; the next counts from its end
                continue
            wait = (due - now).total_seconds()
            if wait > 0:
                soonest = min(soonest, wait)
                continue
            batch.append((view.view, due))
            if len(batch) == DUE_BATCH:
                self._queue(batch)
                batch = []
        if batch and not self._stop.is_set():
            self._queue(batch)
        return max(MIN_SLEEP_S, soonest)

    def _queue(self, due: list[tuple[str, dt.datetime]]) -> None:
        """Queue the syncs of views due (view, due time) with the runner: together, so it
        decides what starts once for them, not once for each."""
        for record in self.runner.submit_due(due):
            log.info("view %s: scheduled sync %s queued", record.view, record.id)
