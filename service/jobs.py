"""Background sync jobs: one at a time per view, a few views at once."""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from service import eta
from service.catalog import Catalog, now
from service.engine import ENGINE_LOST, SparkEngine
from service.metrics import ServiceMetrics
from service.records import SyncRecord, ViewRecord
from service.redefinitions import redefine_within
from service.settings import ServiceSettings
from warehouse.errors import WarehouseError
from warehouse.options import SyncOptions
from warehouse.pipeline.schema_policy import PolicedSync, adopted_definition
from warehouse.pipeline.sync import Endpoint, SyncRun
from warehouse.spark import executor_import_error
from warehouse.store.versions import Version, ViewStore
from warehouse.strategies.sketch.prep import Preparations
from warehouse.viewdef import ViewDef

log = logging.getLogger("service.jobs")

#: Smallest interval between two progress writes of one sync to the catalog.
PROGRESS_INTERVAL_S = 0.5


class SyncRunner:
    def __init__(
        self,
        settings: ServiceSettings,
        catalog: Catalog,
        engine: SparkEngine | None,
        metrics: ServiceMetrics | None = None,
        committed: Callable[[], None] | None = None,
    ):
        self.settings = settings
        #: told after each sync that succeeded: the destinations may have something to apply
        self.committed = committed or (lambda: None)
        self.catalog = catalog
        self.engine = engine
        self.metrics = metrics or ServiceMetrics()
        self.pool = ThreadPoolExecutor(settings.max_concurrent_syncs, thread_name_prefix="sync")
        self.futures: dict[str, Future] = {}
        #: sketch tables built after a commit for the next sync (warehouse/strategies/sketch/prep.py)
        self.sketches = Preparations(settings.sketch_prepare_wait_s)
        self._lock = threading.Lock()

    def _engine_lost(self, generation: int | None) -> bool:
        """Whether the sync failed because Spark's JVM died under it (it is restarted then)."""
        return generation is not None and self.engine is not None and self.engine.lost(generation)

    def store(self, view: str) -> ViewStore:
        return ViewStore(self.settings.data_dir, view)

    def recover(self) -> None:
        """Settle syncs a previous process left queued or running, and clean their files."""
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
                if "definition" in current.meta():  # a redefinition it applied is applied
                    self.catalog.redefinition_applied(sync.view, current.meta()["definition"])
            else:
                self.catalog.update_sync(
                    sync.id,
                    status="failed",
                    finished_at=now(),
                    error="interrupted: the service stopped before this sync finished; the view is unchanged",
                    progress=None,
                )
                self.store(sync.view).forget(sync.id)
        for view in self.catalog.views():
            removed = self.store(view.name).cleanup()
            if removed:
                log.info("view %s: removed %d leftover path(s)", view.name, len(removed))

    def submit(self, view: str, *, verify: bool = False, trigger: str = "api") -> SyncRecord:
        """Queue a sync of the view (Conflict if one is under way); `trigger` says what started it."""
        record = self.catalog.queue_sync(view, trigger)
        with self._lock:
            self.futures[record.id] = self.pool.submit(self._run, view, record.id, verify)
        return record

    def wait(self, sync_id: str) -> None:
        future = self.futures.get(sync_id)
        if future is not None:
            future.result()

    def shutdown(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.sketches.shutdown()

    def _options(self, view: ViewRecord, verify: bool) -> SyncOptions:
        options = view.options
        return SyncOptions.from_settings(self.settings, strategy=options.strategy, verify=verify, view_options=options)

    def _endpoints(self, definition: ViewDef) -> dict[str, Endpoint]:
        verify = self.settings.agent_verify()
        out = {}
        for site in definition.sites:
            source = self.catalog.source(site.source)
            out[site.source] = Endpoint(source.name, source.url, source.token, verify)
        return out

    def _run(self, view_name: str, sync_id: str, verify: bool = False) -> None:
        self.catalog.update_sync(sync_id, status="running", started_at=now())
        self.metrics.started(view_name)
        t0 = time.monotonic()
        progress = _Progress(self.catalog, sync_id, eta.expected_seconds(self.catalog.syncs(view_name, 20), verify))

        run: PolicedSync | None = None
        generation = None
        try:
            view = self.catalog.view(view_name)
            definition = ViewDef.from_json(view.definition)
            if self.engine is None:
                raise RuntimeError("the service was started without Spark (start_spark=False)")
            spark, generation = self.engine.current()
            spark.sparkContext.setJobGroup(sync_id, f"sync {sync_id} of view {view_name}", interruptOnCancel=True)
            store = self.store(view_name)
            sync = SyncRun(
                spark,
                store,
                view_name,
                definition,
                self._endpoints(definition),
                sync_id,
                self._options(view, verify),
                progress,
                self.sketches,
                ViewDef.from_json(view.applied) if view.applied is not None else None,
            )
            options = view.options

            def follow(sql: str, definition: ViewDef) -> None:  # a table view takes its table's columns
                redefine_within(self.catalog, store, view_name, sync_id, sql, definition)

            run = PolicedSync(
                sync, view.sql, options.on_schema_change, options.stamps, options.strategy, options.column_types, follow
            )
            metrics = run().to_json()
            self._adopt(view_name, store.current())
            progress.close()
        except WarehouseError as exc:
            progress.close()
            lost = self._engine_lost(generation)
            error = ENGINE_LOST if lost else exc.message
            log.warning("sync %s of view %s failed: %s", sync_id, view_name, error)
            self._failed(view_name, sync_id, error, run, t0, None if lost else exc.code)
        except Exception as exc:  # an unexpected failure still ends the sync cleanly
            progress.close()
            log.error("sync %s of view %s failed:\n%s", sync_id, view_name, traceback.format_exc())
            error = (
                ENGINE_LOST
                if self._engine_lost(generation)
                else executor_import_error(str(exc)) or f"internal error: {type(exc).__name__}: {exc}"
            )
            self._failed(view_name, sync_id, error, run, t0)
        else:
            self.catalog.update_sync(sync_id, status="succeeded", finished_at=now(), metrics=metrics, progress=None)
            applied = run.run.view.to_json() if run is not None else view.definition
            self.catalog.redefinition_applied(view_name, applied)  # its rows follow it now
            self.metrics.finished(view_name, "succeeded", metrics, time.monotonic() - t0)
            self.committed()
        finally:
            with self._lock:
                self.futures.pop(sync_id, None)

    def _failed(
        self, view: str, sync_id: str, error: str, run: PolicedSync | None, t0: float, code: str | None = None
    ) -> None:
        """Record a failed sync with what it measured before it failed, and its error's code."""
        metrics = run.run.metrics.to_json() if run else {}
        self.catalog.update_sync(
            sync_id, status="failed", finished_at=now(), error=error, error_code=code, progress=None, metrics=metrics
        )
        self.metrics.finished(view, "failed", metrics, time.monotonic() - t0)

    def _adopt(self, view: str, current: Version | None) -> None:
        """Store the definition the view's current version was committed with, when the sync
        that committed it took a widening (pipeline/schema_policy.py)."""
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
        self.catalog.update_sync(
            self.sync_id, progress={**info, **eta.remaining(self.expected_s, time.monotonic() - self.started)}
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
