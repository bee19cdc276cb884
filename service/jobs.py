"""Background sync jobs: one at a time per view, a bounded pool, a few per source.

Every sync, whether the API or a schedule started it, joins one queue and waits there for
a slot of the pool (SERVICE_MAX_CONCURRENT_SYNCS) and one on each source its view reads
(SERVICE_MAX_SYNCS_PER_SOURCE), and a large view's sync one of the few slots large syncs
may hold (SERVICE_LARGE_SYNC_ROWS, SERVICE_LARGE_SYNC_SHARE); slots.py decides which start,
sources in turn and oldest due first within each (fair_share.py). So an
agent never sees more syncs at once than its source's limit, and a queued sync waits
for a slot rather than being turned away by the agent's 429. All syncs share the one
Spark session: each runs its jobs in a job group of its own (its id), which a cancel ends.
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import sqlite3
import threading
import time
import traceback
from collections.abc import Callable, Collection
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from service import eta, remedies
from service.catalog import Catalog, now
from service.engine import ENGINE_LOST, SparkEngine
from service.errors import Conflict, NotFound
from service.fair_share import FairQueue, large_limit
from service.lineage_sender import Lineage
from service.metrics import ServiceMetrics
from service.records import SyncRecord, ViewRecord
from service.redefinitions import pending_redefinition, redefine_within
from service.secrets import source_token
from service.settings import ServiceSettings
from service.slots import Waiting, startable
from service.source_health import SourceHealth, failed_agent
from warehouse.cancellation import Cancellation
from warehouse.errors import StorageError, WarehouseError
from warehouse.options import SyncOptions
from warehouse.pipeline.schema_policy import PolicedSync, adopted_definition
from warehouse.pipeline.sync import SyncRun
from warehouse.spark import executor_import_error
from warehouse.store.versions import Version, ViewStore
from warehouse.strategies.sketch.prep import Preparations
from warehouse.strategies.sync_context import Endpoint, SyncContext
from warehouse.viewdef import ViewDef

log = logging.getLogger("service.jobs")

#: Smallest interval between two progress writes of one sync to the catalog.
PROGRESS_INTERVAL_S = 0.5
#: Seconds a stopping service gives its running syncs to end and say so in the catalog.
SHUTDOWN_GRACE_S = 20.0
#: Sync records looked back on for the view's size: its latest that left a count of rows.
LARGE_LOOKBACK = 5
#: A sync the service's stop (or death) ended; nothing of it was committed.
INTERRUPTED = "interrupted: the service stopped before this sync finished; the view is unchanged"


@dataclass(frozen=True)
class _Queued:
    """A sync in the queue: what the decision sees, and what running it needs."""

    waiting: Waiting
    view: str
    verify: bool
    trigger: str


@dataclass(frozen=True)
class _Running:
    waiting: Waiting
    cancellation: Cancellation


class SyncRunner:
    """Queues syncs, starts them as slots free (slots.py), runs them and cancels them."""

    def __init__(
        self,
        settings: ServiceSettings,
        catalog: Catalog,
        engine: SparkEngine | None,
        metrics: ServiceMetrics | None = None,
        health: SourceHealth | None = None,
        committed: Callable[[str], None] | None = None,
        lineage: Lineage | None = None,
    ):
        self.settings = settings
        #: told the view's name after each sync that succeeded: its destinations may have something to apply
        self.committed = committed or (lambda view: None)
        self.catalog = catalog
        self.engine = engine
        self.metrics = metrics or ServiceMetrics()
        #: each sync's OpenLineage events (off unless configured)
        self.lineage = lineage or Lineage(settings, catalog, self.metrics)
        # never more syncs are handed to the pool than it has threads: the queue is ours
        #: each source's health, which a sync's contact with its agents updates
        self.health = health or SourceHealth()
        self.pool = ThreadPoolExecutor(settings.max_concurrent_syncs, thread_name_prefix="sync")
        self.futures: dict[str, Future] = {}  # every queued or running sync: done when it ends
        self.queue: dict[str, _Queued] = {}
        #: the same queued syncs, kept in the fair order's lanes (a sync's end looks at their heads)
        self.fair: FairQueue[Waiting] = FairQueue()
        self.running: dict[str, _Running] = {}
        self._arrivals = itertools.count()
        #: sketch tables built after a commit for the next sync (warehouse/strategies/sketch/prep.py)
        self.sketches = Preparations(settings.sketch_prepare_wait_s)
        self._lock = threading.Lock()
        #: set by shutdown(): a sync stopped from now on was interrupted, not cancelled
        self._stopping = threading.Event()

    def _engine_lost(self, generation: int | None) -> bool:
        """Whether the sync failed because Spark's JVM died under it (it is restarted then)."""
        return generation is not None and self.engine is not None and self.engine.lost(generation)

    def store(self, view: str) -> ViewStore:
        return ViewStore(self.settings.data_dir, view)

    def recover(self) -> None:
        """Settle syncs a previous process left running, queue again those it left queued, and clean their files.

        A sync whose version is the view's current one committed, and is settled as succeeded
        (the process died before the catalog heard of its end; or the machine stopped, and the
        catalog lost its end and its start: Catalog.set_running). A queued sync committed
        nothing otherwise (what a start it lost may have left is removed), so it takes its
        place in the queue again, with what it was asked (verify) and in the order it was
        queued. Without Spark (an app built for the OpenAPI export) it is settled as interrupted.
        A sync that was running and did not commit is settled as interrupted, and retried once
        (as is one the stop interrupted: its retry was queued then) by a new sync (`retry_of` naming it; trigger "retry", or "redefine" when it applies a
        redefinition) in its place in the queue.
        """
        requeued = []
        retried: list[tuple[SyncRecord, SyncRecord]] = []
        for sync in self.catalog.active_syncs():
            current = self.store(sync.view).current()
            if current is not None and current.sync_id == sync.id:
                # It committed, but the process died before the catalog heard of it.
                self._adopt(sync.view, current)
                self.catalog.update_sync(
                    sync.id,
                    status="succeeded",
                    finished_at=now(),
                    metrics=current.meta().get("metrics", {}),
                    progress=None,
                )
            elif sync.status == "queued" and self.engine is not None:
                self.store(sync.view).forget(sync.id)
                requeued.append(sync)
            else:
                self.catalog.update_sync(
                    sync.id,
                    status="failed",
                    finished_at=now(),
                    error=INTERRUPTED,
                    error_code="interrupted",
                    progress=None,
                )
                self.store(sync.view).forget(sync.id)
                retry = self._retry(sync)
                if retry is not None:
                    retried.append((retry, sync))
        for view in self.catalog.views():
            removed = self.store(view.name).cleanup()
            if removed:
                log.info("view %s: removed %d leftover path(s)", view.name, len(removed))
        with self._lock:
            for sync in sorted(requeued, key=lambda r: r.created_at):
                self._enqueue(sync, sync.created_at)
                log.info(
                    "sync %s of view %s: queued again (it was queued when the service stopped)", sync.id, sync.view
                )
            for retry, interrupted in retried:  # in the place the interrupted sync had in the queue
                self._enqueue(retry, interrupted.created_at)
                log.info("sync %s of view %s: retries sync %s, interrupted", retry.id, retry.view, interrupted.id)
            self._dispatch()

    def _retry(self, interrupted: SyncRecord) -> SyncRecord | None:
        """Queue in the catalog the retry of a sync the stop interrupted (run after the restart):
        once, with an engine to run it, unless SERVICE_RETRY_INTERRUPTED is off; None if not."""
        if not (self.settings.retry_interrupted and self.engine is not None and interrupted.retry_of is None):
            return None
        return self.catalog.queue_sync(
            interrupted.view, "retry", interrupted.verify, self._redefines, retry_of=interrupted.id
        )

    def submit(
        self, view: str, *, verify: bool = False, trigger: str = "api", due: dt.datetime | None = None
    ) -> SyncRecord:
        """Queue a sync of the view (Conflict if one is under way); `trigger` says what started it.

        `due`: when a scheduled sync became due (its place in the queue); else it queues as of now.
        """
        with self._lock:  # queued in the catalog and here at once: a cancel finds it in one or the other
            record = self.catalog.queue_sync(view, trigger, verify, self._redefines)
            at = due.isoformat(timespec="milliseconds") if due is not None else record.created_at
            self._enqueue(record, min(at, record.created_at))
            self._dispatch()
        return record

    def submit_due(self, due: list[tuple[str, dt.datetime]]) -> list[SyncRecord]:
        """Queue the scheduled syncs of views that became due (view, when it became due), as
        submit() does one at a time, and start what has slots once: the scheduler's look after
        a start finds thousands due. A view whose sync came first, or that went, is left out;
        the records queued."""
        records = []
        with self._lock:
            for view, at in due:
                try:
                    record = self.catalog.queue_sync(view, "schedule", False, self._redefines)
                except (Conflict, NotFound, sqlite3.IntegrityError):
                    continue  # a manual sync came first, or the view was deleted meanwhile
                self._enqueue(record, min(at.isoformat(timespec="milliseconds"), record.created_at))
                records.append(record)
            self._dispatch()
        return records

    def _redefines(self, view: ViewRecord) -> bool:
        """Whether a sync of `view` applies a redefinition (its trigger is "redefine"). A store it
        cannot read says no: the sync fails on it at its start, with its code."""
        try:
            return pending_redefinition(self.catalog, self.store(view.name), view) is not None
        except StorageError:
            return False

    def _enqueue(self, record: SyncRecord, due: str) -> None:
        """Put a sync the catalog holds as queued into the queue (call with the lock held)."""
        sources = _sources(self.catalog.view(record.view).definition)
        self.futures[record.id] = Future()
        large = _rows(self.catalog.syncs(record.view, LARGE_LOOKBACK)) >= self.settings.large_sync_rows
        waiting = Waiting(record.id, sources, due, next(self._arrivals), large)
        self.queue[record.id] = _Queued(waiting, record.view, record.verify, record.trigger)
        self.fair.add(waiting)

    def _dispatch(self) -> None:
        """Start the queued syncs that have slots now (call with the lock held)."""
        s = self.settings
        running = [r.waiting for r in self.running.values()]
        large = large_limit(s.max_concurrent_syncs, s.large_sync_share)
        for sync_id in startable(self.fair, running, s.max_concurrent_syncs, s.max_syncs_per_source, large):
            queued = self._dequeue(sync_id)
            self.running[sync_id] = _Running(queued.waiting, Cancellation())
            self.pool.submit(self._slot, queued, self.running[sync_id].cancellation)
        self.metrics.queued.set(len(self.queue))

    def _dequeue(self, sync_id: str) -> _Queued:
        """Take a sync out of the queue (call with the lock held)."""
        queued = self.queue.pop(sync_id)
        self.fair.remove(queued.waiting)
        return queued

    def _slot(self, queued: _Queued, stop: Cancellation) -> None:
        """Run a sync in its slots, then give them to the next ones."""
        sync_id = queued.waiting.id
        try:
            self._run(queued.view, sync_id, queued.verify, queued.trigger, stop)
        finally:
            with self._lock:
                self.running.pop(sync_id, None)
                self._ended(sync_id)
                self._dispatch()

    def _ended(self, sync_id: str) -> None:
        future = self.futures.pop(sync_id, None)
        if future is not None:
            future.set_result(None)

    def cancel(self, view: str, sync_id: str) -> SyncRecord:
        """Stop a queued sync (it never runs) or a running one (it ends at once, its view
        unchanged); Conflict once it has finished or is committing. The record as it is now."""
        record = self.catalog.sync(view, sync_id)  # NotFound for another view's sync
        with self._lock:
            queued = self._dequeue(sync_id) if sync_id in self.queue else None
            if queued is not None:
                self.catalog.update_sync(
                    sync_id,
                    status="failed",
                    finished_at=now(),
                    error=remedies.CANCELLED.format(view=view, id=sync_id),
                    error_code="cancelled",
                )
                self.metrics.cancelled(view)
                self._ended(sync_id)
                self.metrics.queued.set(len(self.queue))
                return self.catalog.sync(view, sync_id)
            running = self.running.get(sync_id)
        if running is None:
            raise Conflict(
                f"sync {sync_id} of view {view!r} is {record.status}; only a queued or running sync can be cancelled"
            )
        if not running.cancellation.request():
            raise Conflict(f"sync {sync_id} of view {view!r} is committing its result; it can no longer be cancelled")
        log.info("sync %s of view %s: cancel requested", sync_id, view)
        return self.catalog.sync(view, sync_id)

    def cancel_queued(self, views: Collection[str] | None = None) -> int:
        """Cancel every queued sync (of `views` only, when given) in one catalog transaction; how
        many. Running syncs go on: each is cancelled on its own (cancel)."""
        with self._lock:
            ids = [sync_id for sync_id, q in self.queue.items() if views is None or q.view in views]
            gone = [self._dequeue(sync_id) for sync_id in ids]
            self.catalog.cancel_queued(
                [(q.waiting.id, remedies.CANCELLED_QUEUED.format(view=q.view, id=q.waiting.id)) for q in gone],
                now(),
            )
            for q in gone:
                self.metrics.cancelled(q.view)
                self._ended(q.waiting.id)
            self.metrics.queued.set(len(self.queue))
        if gone:
            log.info("cancelled %d queued sync(s)", len(gone))
        return len(gone)

    def wait(self, sync_id: str) -> None:
        future = self.futures.get(sync_id)
        if future is not None:
            future.result()

    def shutdown(self, grace_s: float = SHUTDOWN_GRACE_S) -> None:
        """Stop: queued syncs stay queued in the catalog (recover() queues them again at the
        next start); running ones are asked to stop and given `grace_s` to record how they ended
        (one past its commit finishes) before the catalog they write to is closed."""
        self._stopping.set()
        with self._lock:
            for sync_id in list(self.queue):
                self._ended(sync_id)
            self.queue.clear()
            self.fair.clear()
            running = list(self.running.values())
        for r in running:
            r.cancellation.request()
        self.pool.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            with self._lock:
                if not self.running:
                    break
            time.sleep(0.05)
        else:
            log.warning("stopping with %d sync(s) still running: the next start settles them", len(self.running))
        self.sketches.shutdown()

    def _options(self, view: ViewRecord, verify: bool) -> SyncOptions:
        return self.settings.sync_options(view.options, verify=verify)

    def _endpoints(self, definition: ViewDef) -> dict[str, Endpoint]:
        verify, secrets = self.settings.agent_verify(), self.settings.secrets()
        out = {}
        for site in definition.sites:
            source = self.catalog.source(site.source)
            token = source_token(secrets, source.name, source.token)  # SecretUnavailable fails the sync
            out[site.source] = Endpoint(source.name, source.url, token, verify)
        return out

    def _run(self, view_name: str, sync_id: str, verify: bool, trigger: str, stop: Cancellation) -> None:
        started = now()
        queued_s = _seconds_between(self.catalog.sync(view_name, sync_id).created_at, started)
        self.catalog.set_running(sync_id, started, queued_s)
        self.metrics.started(view_name, trigger, queued_s)
        self.lineage.started(view_name, sync_id)
        t0 = time.monotonic()
        progress = _Progress(self.catalog, sync_id, eta.expected_seconds(self.catalog.syncs(view_name, 20), verify))

        run: PolicedSync | None = None
        generation = None
        sources: list[str] = []  # the sources the view reads, whose agents it contacts
        try:
            view = self.catalog.view(view_name)
            definition = ViewDef.from_json(view.definition)
            sources = sorted({site.source for site in definition.sites})
            if self.engine is None:
                raise RuntimeError("the service was started without Spark (start_spark=False)")
            spark, generation = self.engine.current()
            spark.sparkContext.setJobGroup(sync_id, f"sync {sync_id} of view {view_name}", interruptOnCancel=True)
            stop.on_request(lambda: spark.sparkContext.cancelJobGroup(sync_id))
            store = self.store(view_name)
            endpoints = self._endpoints(definition)
            sync_options = self._options(view, verify)
            ctx = SyncContext(spark, store, view_name, sync_id, endpoints, sync_options, progress, self.sketches, stop)
            sync = SyncRun(ctx, definition)
            options = view.options

            def follow(sql: str, definition: ViewDef) -> None:  # a table view takes its table's columns
                redefine_within(self.catalog, view_name, sync_id, sql, definition)

            run = PolicedSync(
                sync, view.sql, options.on_schema_change, options.stamps, options.strategy, options.column_types, follow
            )
            metrics = run().to_json()
            self._adopt(view_name, store.current())
            progress.close()
        except Exception as exc:  # a failure, expected or not, still ends the sync cleanly
            progress.close()
            error, code = self._failure(exc, view_name, sync_id, generation, stop)
            if isinstance(exc, WarehouseError) and not stop.requested:
                failed = failed_agent(exc, sources)
                if failed is not None:  # its agent did not answer, or refused
                    self.health.report(failed, exc)
            self._failed(view_name, sync_id, error, run, t0, code)
            self.lineage.failed(view_name, sync_id, error, code)
            if code == "interrupted":  # queued for the next start, which queues it again (recover)
                self._retry(self.catalog.sync(view_name, sync_id))
        else:
            self.catalog.update_sync(sync_id, status="succeeded", finished_at=now(), metrics=metrics, progress=None)
            self.metrics.finished(view_name, "succeeded", metrics, time.monotonic() - t0)
            self.lineage.succeeded(view_name, sync_id, metrics)
            for source in sources:
                self.health.report(source, None)  # every agent of the view answered
            self.committed(view_name)

    def _failure(
        self, exc: Exception, view: str, sync_id: str, generation: int | None, stop: Cancellation
    ) -> tuple[str, str | None]:
        """What a failed sync's record says: its error and its code."""
        if stop.requested:  # whatever the stop broke (an agent call, a Spark job), it was the stop
            if self._stopping.is_set():
                log.info("sync %s of view %s: interrupted by the service's stop", sync_id, view)
                return INTERRUPTED, "interrupted"
            log.info("sync %s of view %s: cancelled (%s)", sync_id, view, type(exc).__name__)
            return remedies.CANCELLED.format(view=view, id=sync_id), "cancelled"
        lost = self._engine_lost(generation)
        if isinstance(exc, WarehouseError):
            error = ENGINE_LOST if lost else remedies.worded(exc, view)
            log.warning("sync %s of view %s failed: %s", sync_id, view, error)
            return error, "engine_lost" if lost else exc.code
        log.error("sync %s of view %s failed:\n%s", sync_id, view, traceback.format_exc())
        if lost:
            return ENGINE_LOST, "engine_lost"
        return executor_import_error(str(exc)) or f"internal error: {type(exc).__name__}: {exc}", None

    def _failed(
        self, view: str, sync_id: str, error: str, run: PolicedSync | None, t0: float, code: str | None = None
    ) -> None:
        """Record a failed sync with what it measured before it failed, and its error's code."""
        metrics = run.last_run.metrics.to_json() if run else {}
        self.catalog.update_sync(
            sync_id, status="failed", finished_at=now(), error=error, error_code=code, progress=None, metrics=metrics
        )
        self.metrics.finished(view, "failed", metrics, time.monotonic() - t0)

    def _adopt(self, view: str, current: Version | None) -> None:
        """Store the definition the view's current version was committed with, when the sync
        that committed it took a widening (pipeline/schema_policy.py). Called before that sync
        is recorded as finished: until then, service/redefinitions.py pending_redefinition
        knows the version for no redefinition."""
        stored = self.catalog.view(view).definition
        definition = adopted_definition(current, stored)
        if definition is not None and self.catalog.adopt_definition(view, stored, definition):
            log.info("view %s: took the widened column types of version %s", view, current and current.number)


class _Progress:
    """Writes a running sync's phase and counters to the catalog, at most every interval.

    An update that comes too soon after the last write is kept and written when the
    interval is over, so the record never lags behind a stalled sync's last news.
    """

    def __init__(self, catalog: Catalog, sync_id: str, expected_s: float | None = None):
        self.catalog = catalog
        self.sync_id = sync_id
        #: what the view's recent syncs took (eta.py): the ETA of this one
        self.expected_s = expected_s
        self.started = time.monotonic()
        self.phase: str | None = None
        self.last = 0.0
        self.pending: dict | None = None
        self.closed = False
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()

    def __call__(self, info: dict) -> None:
        with self._lock:
            if self.closed:
                return
            t = time.monotonic()
            if info.get("phase") != self.phase or t - self.last >= PROGRESS_INTERVAL_S:
                self._write(info, t)
            else:
                self.pending = info
                if self._timer is None:
                    self._timer = threading.Timer(PROGRESS_INTERVAL_S - (t - self.last), self._flush)
                    self._timer.daemon = True
                    self._timer.start()

    def _write(self, info: dict, t: float) -> None:
        self.phase = info.get("phase")
        self.last = t
        self.pending = None
        self.catalog.set_progress(
            self.sync_id, {**info, **eta.remaining(self.expected_s, time.monotonic() - self.started)}
        )

    def _flush(self) -> None:
        with self._lock:
            self._timer = None
            if self.pending is not None and not self.closed:
                self._write(self.pending, time.monotonic())

    def close(self) -> None:
        """No more writes: the sync's final record replaces the progress."""
        with self._lock:
            self.closed = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None


def _sources(definition: dict) -> frozenset[str]:
    """The sources a view definition (ViewDef's JSON) reads: those a sync of it contacts (a
    redefinition's old rows are read from the store, never from the sources they came from).

    >>> sorted(_sources({"sites": [{"source": "crm"}, {"source": "erp"}, {"source": "crm"}]}))
    ['crm', 'erp']
    """
    return frozenset(site["source"] for site in definition.get("sites", []))


def _rows(history: list[SyncRecord]) -> int:
    """The rows the view's latest sync that counted them left (0: none did yet, as before its load).

    >>> from types import SimpleNamespace as Sync
    >>> _rows([Sync(metrics={}), Sync(metrics={"rows_after": 1200}), Sync(metrics={"rows_after": 9})])
    1200
    >>> _rows([])
    0
    """
    for sync in history:
        rows = (sync.metrics or {}).get("rows_after")
        if rows is not None:
            return rows
    return 0


def _seconds_between(earlier: str, later: str) -> float:
    """Seconds from one catalog timestamp to a later one (never below 0: clocks step back).

    >>> _seconds_between("2026-01-01T00:00:00.000+00:00", "2026-01-01T00:00:01.250+00:00")
    1.25
    """
    delta = dt.datetime.fromisoformat(later) - dt.datetime.fromisoformat(earlier)
    return max(0.0, round(delta.total_seconds(), 3))
