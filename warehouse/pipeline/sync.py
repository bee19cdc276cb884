"""One sync of a view, as an ordered list of named steps.

extract sites (for each site, side by side: project snapshot → plan groups → exchange
units → regroup) → build fragments (the exact delta of each site query) → assemble view
(the view's own exact delta) → commit. The run records the wall time of every step and
calls `progress` so a caller can show how far it got. Nothing is visible to readers of
the view until `commit` replaces the CURRENT pointer; a failure anywhere discards the
staged files and leaves the previous version as it was.
"""

from __future__ import annotations

import logging
import secrets
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import Any, NamedTuple, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.util import inheritable_thread_target

from protocol.types import arrow_schema
from warehouse import faults
from warehouse.cancellation import Cancellation
from warehouse.deltas import changed_columns, join_delta
from warehouse.deltas.join_delta import JoinDelta
from warehouse.deltas.site_delta import DeltaResult, counted, view_delta
from warehouse.deltas.touched_delta import TouchedDelta
from warehouse.errors import WarehouseError
from warehouse.metrics import Attempt, SyncMetrics
from warehouse.multisets import combinations, matching, multiset
from warehouse.names import DELETE, INSERT, OP, UPDATE, spark_schema
from warehouse.options import SyncOptions
from warehouse.pipeline import redefine, verify
from warehouse.pipeline.failures import told
from warehouse.pipeline.phases import timed_phase
from warehouse.pipeline.site_sync import Endpoint, SiteRun
from warehouse.reading import rows as view_rows
from warehouse.sample import view_sample
from warehouse.store import layers
from warehouse.store.versions import Version, ViewStore
from warehouse.strategies.auto import Auto
from warehouse.strategies.sketch.prep import Preparations
from warehouse.strategies.sketch.strategy import Sketch
from warehouse.viewdef import ViewDef
from warehouse.viewdef.redefinition import projection

__all__ = ["Endpoint", "SyncOptions", "SyncRun"]

log = logging.getLogger("warehouse.pipeline.sync")

#: Rows of a multiset's fragment delta turned into view delta lines at a time.
MULTISET_BATCH_ROWS = 65_536

T = TypeVar("T")


class ViewCounts(NamedTuple):
    """What assemble_view staged: the view delta's rows by kind, and the view's new size."""

    inserted: int
    updated: int
    deleted: int
    rows: int


@dataclass
class SyncRun:
    spark: SparkSession
    store: ViewStore
    view_name: str
    view: ViewDef
    endpoints: dict[str, Endpoint]
    sync_id: str
    options: SyncOptions = field(default_factory=SyncOptions)
    progress: Callable[[dict], None] = lambda info: None
    #: Background builds of sketch tables: queued after the commit, taken by the next sync.
    sketches: Preparations | None = None
    #: What the stored rows follow if not `view` and their version does not say (stored before versions did).
    follows: ViewDef | None = None
    #: The version to start from instead of the current one (its copy widened to the types of
    #: `view`: pipeline/schema_policy.py), and what else to store in the committed version's meta.
    base: Version | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    cancellation: Cancellation = field(default_factory=Cancellation)  # honoured up to the commit

    def __post_init__(self) -> None:
        self.seed = secrets.randbits(64)
        self.metrics = SyncMetrics(
            strategy=self.options.strategy,
            hash_bits=self.options.hash_bits,
            mode="verify" if self.options.verify else None,
        )
        self.sites: list[SiteRun] = []
        self.checks: list[SiteRun] = []  # verify mode: the full reads
        self.results: list[DeltaResult | TouchedDelta] = []
        self._lock = threading.Lock()

    def run(self) -> SyncMetrics:
        """Run the sync's steps in order, timing each; the sync's metrics."""
        started = time.monotonic()
        try:
            self.stored: Version | None = self.store.current()
            self.old = redefine.pending(self.stored, self.follows, self.view)  # a redefinition to apply
            if self.old is not None and self.old.to_json() == self.meta.get("definition_before"):
                self.old = None  # not a redefinition: a widening in place, from `base` (schema_policy.py)
            projected = self.old if self.old is not None and projection(self.old, self.view) is not None else None
            if projected is not None:  # columns left out: synced as usual from the stored rows projected
                self.old, self.base = None, self._timed("project_rows", self.project_rows, projected)
            sites = self._timed("extract_sites", self.extract_sites)
            self._timed("build_fragments", self.build_fragments, sites)
            counts = self._timed("assemble_view", self.assemble_view)
            self._timed("maintain_sample", self.maintain_sample, counts)
            if self.old is not None:
                self._timed("redefine_delta", self.redefine_delta)
            if projected is not None:
                self.metrics.redefinition = redefine.projected(self.store, self.sync_id, projected, self.view)
            self._timed("commit", self.commit)
        except BaseException:
            self._count_traffic()  # a failed sync still reports what crossed the link
            raise
        finally:
            for result in self.results:
                result.release()
            self.store.discard(self.sync_id)
            self.metrics.wall_seconds = round(time.monotonic() - started, 3)
        return self.metrics

    def _timed(self, step: str, run: Callable[..., T], *args: Any) -> T:
        """Run one step, reporting that it started and recording its wall time under its name."""

        def announce() -> None:
            self.progress({"phase": step, **self._traffic()})

        return timed_phase(
            step, run, args, check=self.cancellation.check, announce=announce, phases=self.metrics.phases
        )

    def _traffic(self) -> dict:
        """Bytes and calls so far, failed attempts included."""
        runs, failed = [*self.sites, *self.checks], self.metrics.attempts
        keys = ("bytes_to_agent", "bytes_from_agent", "round_trips")
        return {k: sum(s.traffic()[k] for s in runs) + sum(getattr(a, k) for a in failed) for k in keys}

    def _count_traffic(self) -> None:
        for name, value in self._traffic().items():
            setattr(self.metrics, name, value)

    # -- steps -------------------------------------------------------------------------
    def project_rows(self, old: ViewDef) -> Version:
        """The stored rows projected to a redefinition's fewer columns: the version to sync from."""
        assert self.stored is not None, "a projection redefines stored rows"
        return redefine.projected_base(self.spark, self.store, self.stored, old, self.view, self.sync_id)

    def redefine_delta(self) -> None:
        """Apply a redefinition read in full: the delta from the old view to the new one (and statistics kept)."""
        assert self.stored is not None and self.old is not None, "a redefinition changes stored rows"
        m = self.metrics
        (m.rows_inserted, m.rows_updated, m.rows_deleted), m.redefinition = redefine.compared(
            self.spark, self.store, self.stored, self.staged, self.old, self.view
        )
        faults.checkpoint("delta_written")

    def extract_sites(self) -> list[SiteRun]:
        """Extract every site query from its agent, side by side (a redefinition: read in full)."""
        self.staging = self.store.staging(self.sync_id)
        self.current: Version | None = None if self.old is not None else (self.base or self.stored)
        #: the current version's random sample, read once: kept by maintain_sample, and for
        #: a one-site keyed view the rows its cost model is measured on (site_sync.py)
        self.sample = view_sample.load(self.current)
        one_site = len(self.view.sites) == 1 and not self.view.multiset
        self._cost_sample = self.sample[0] if self.sample is not None and one_site else None
        self.sites = self._extract_all("site", self.options)
        return self.sites

    def _extract_all(self, prefix: str, options: SyncOptions) -> list[SiteRun]:
        """Extract every site with `options`, each retried after transient failures."""
        count = len(self.view.sites)
        runs: list[SiteRun | None] = [None] * count
        target = self.checks if prefix == "check" else self.sites
        target.clear()

        def one(i: int) -> None:
            runs[i] = self._extract_site(i, prefix, options, target)

        if count == 1:
            one(0)
        else:
            site = inheritable_thread_target(one)  # its Spark jobs in this thread's job group (a cancel ends it)
            with ThreadPoolExecutor(count, thread_name_prefix=f"{prefix}-{self.sync_id[:8]}") as pool:
                for future in [pool.submit(site, i) for i in range(count)]:
                    future.result()  # the first failure fails the sync
        return [run for run in runs if run is not None]  # every one, or `one` raised

    def _extract_site(self, i: int, prefix: str, options: SyncOptions, live: list[SiteRun]) -> SiteRun:
        """One site's extraction; a transient failure (link, timeout, cut or corrupt answer)
        is retried from the start after a growing pause, up to `agent_retries` times."""
        site = self.view.sites[i]
        staging = self.staging / f"{prefix}-{i}"
        for attempt in range(self.options.agent_retries + 1):
            shutil.rmtree(staging, ignore_errors=True)
            run = SiteRun(
                self.spark,
                i,
                site,
                self.endpoints[site.source],
                staging,
                self.seed,
                self.current,
                self.view_name,
                options,
                self.progress,
                self.sketches,
                self._cost_sample,
                follows_table=self.view.left_out if self.view.table is not None else None,
                cancellation=self.cancellation,
            )
            with self._lock:
                live.append(run)
            t0 = time.monotonic()
            try:
                run.extract()
                return run
            except WarehouseError as exc:
                with self._lock:
                    live.remove(run)
                    self.metrics.attempts.append(
                        Attempt(
                            site=i,
                            source=site.source,
                            attempt=attempt + 1,
                            error=exc.message,
                            seconds=round(time.monotonic() - t0, 3),
                            **run.traffic(),
                        )
                    )
                if not exc.transient or attempt == self.options.agent_retries:
                    exc.message = told(exc, site.source, attempt + 1, self.options.agent_retries)
                    raise
                self.metrics.retries += 1
                pause = self.options.agent_retry_backoff_s * 2**attempt
                log.warning("sync %s, source %s: %s; retrying in %.1f s", self.sync_id, site.source, exc.message, pause)
                self.progress(
                    {
                        "phase": "retry_wait",
                        "site": i,
                        "attempt": attempt + 1,
                        "error": exc.message,
                        "retry_in_s": pause,
                        **self._traffic(),
                    }
                )
                self.cancellation.wait(pause)
        raise AssertionError("unreachable")

    def build_fragments(self, sites: list[SiteRun]) -> None:
        """Build each extracted site's exact delta and stage its next fragment and statistics."""
        number = (self.stored.number + 1) if self.stored else 1
        self.staged = self.store.staged_version(self.sync_id, number)
        for site in sites:
            self.results.append(site.build_fragment(self.staged))
        if self.options.verify:
            self._verify(number)
        faults.checkpoint("fragments_written")

    def _verify(self, number: int) -> None:
        """Audit: read every site query in full as well, report where the view's own method
        disagrees with it, and keep the full read's result (exact by construction)."""
        self.progress({"phase": "verify", **self._traffic()})
        self._extract_all("check", replace(self.options, strategy="full_ship", verify=False))
        checked = Version(number, self.sync_id, self.staging / "checked")
        results = [site.build_fragment(checked) for site in self.checks]
        report = verify.compared(self.spark, self.view, self.staged, checked, results)
        for result in self.results:
            result.release()
        self.results, self.staged = results, checked
        if report["divergent_rows"]:
            what = f"verify sync {self.sync_id} of view {self.view_name}"
            log.warning("%s: %d row(s) differ from a full read", what, report["divergent_rows"])
        self.metrics.verify = report

    def assemble_view(self) -> ViewCounts:
        """The view's delta: the fragment's own for one site; for several, from the fragments'
        changes by the delta rules (join_delta.py), or by recomputing the join; for a
        multiset, its lines with counts (multiset.py)."""
        if self.view.multiset and self.view.assembly is None:
            counts = self._matched(*self._multiset_delta(self.results[0]))
        elif self.view.assembly is None:
            result = self.results[0]
            result.write_delta(self.store.staged_delta(self.sync_id), self.view.sites[0].columns)
            counts = (result.inserted, result.updated, result.deleted, result.inserted + result.updated + result.kept)
        else:
            # a multiset's rows are stored as combinations of its sites' grouped rows (combinations.py)
            stored = combinations.stored_view(self.view) if self.view.multiset else self.view
            joins = JoinDelta(self.spark, stored, self.sync_id[:12], self.staging, self.staged)
            try:
                counts = self._assemble(joins)
            finally:
                joins.release()
            if self.view.multiset:
                counts = self._matched(counts[0], counts[2])
        m = self.metrics
        m.rows_inserted, m.rows_updated, m.rows_deleted, m.rows_in_view = counts
        faults.checkpoint("delta_written")
        return ViewCounts(*counts)

    def _multiset_delta(self, result: DeltaResult | TouchedDelta) -> tuple[int, int]:
        """Stage the delta of a multiset view of one site: its fragment's changes as lines
        with counts. Returns the occurrences inserted and deleted."""
        site = self.view.sites[0]
        changes = self.staging / "fragment-delta"
        result.write_delta(changes, site.columns)

        current = self.current

        def old_counts(keys: pa.Table) -> pa.Table:
            assert current is not None, "a load updates no line"
            return layers.lookup(current, 0, site.columns, site.key, keys)

        target = self.store.staged_delta(self.sync_id)
        return multiset.write_lines(changes, old_counts, self.view, target, MULTISET_BATCH_ROWS)

    def _matched(self, inserted: int, deleted: int) -> tuple[int, int, int, int]:
        """A multiset view's staged delta with `match`: vanished and appeared rows paired into
        updates (matching.py). Returns the delta's counts and the view's new size."""
        target = self.store.staged_delta(self.sync_id)
        updated = 0
        match = self.options.view_options.match
        if match:
            (inserted, updated, deleted), self.metrics.match = matching.pair_delta(target, self.view, match)
        before = self.current.meta()["rows"] if self.current is not None else 0
        return inserted, updated, deleted, before + inserted - deleted

    def _assemble(self, joins: JoinDelta) -> tuple[int, int, int, int]:
        reason: str | None
        if self.current is None:
            reason = "first sync"
        elif self.options.verify:
            reason = "verify sync: the view is joined from the full reads"
        else:
            reason = join_delta.recompute_reason(
                [r.inserted + r.updated + r.deleted for r in self.results],
                [r.inserted + r.updated + r.kept for r in self.results],
            )
        if reason is None:
            t0 = time.monotonic()
            changes = [r.delta_table(site.columns) for r, site in zip(self.results, self.view.sites, strict=True)]
            assert self.current is not None, "a first sync recomputes"
            try:
                old, new = joins.candidates(self.current, changes)
            except join_delta.TooLarge as exc:
                reason = str(exc)
            else:
                assembly = self.metrics.assembly = {
                    "method": "delta_rules",
                    "joined_on": "driver" if joins.equi is not None else "spark",
                    "delta_s": round(time.monotonic() - t0, 3),
                }
                t0 = time.monotonic()
                delta = join_delta.view_changes(old, new, joins.view.key)
                lines = combinations.net_lines(old, new, self.view) if self.view.multiset else None
                counts = self._maintained(joins.view, delta, lines, assembly)
                assembly["write_s"] = round(time.monotonic() - t0, 3)
                return counts
        self.metrics.assembly = {"method": "recompute", "reason": reason, "view_written": "whole"}
        return self._recompute(joins)

    def _recompute(self, joins: JoinDelta) -> tuple[int, int, int, int]:
        """Join the new fragments into the view and diff it with the stored one, by the view
        key (a multiset's combinations, by content)."""
        view = joins.view
        names = [c.name for c in view.columns]
        joins.join(joins.fragments, "all").write.parquet(str(self.staged.rows()))
        new = self.spark.read.schema(spark_schema(view.columns)).parquet(str(self.staged.rows()))
        target = str(self.store.staged_delta(self.sync_id))
        if self.view.multiset:
            old = layers.view_frame(self.spark, self.current, view) if self.current is not None else None
            combinations.spark_lines(old, new, self.view).write.parquet(target)
            totals = {
                r[OP]: r["n"]
                for r in self.spark.read.parquet(target).groupBy(OP).agg(F.sum(multiset.COUNT).alias("n")).collect()
            }
            inserted, deleted = totals.get(INSERT, 0), totals.get(DELETE, 0)
            before = self.current.meta()["rows"] if self.current is not None else 0
            return inserted, 0, deleted, before + inserted - deleted
        size = new.count()
        if self.current is None:  # a load: every row is new
            new.select(F.lit(INSERT).alias(OP), *names).write.parquet(target)
            return size, 0, 0, size
        delta = view_delta(layers.view_frame(self.spark, self.current, view), new, names, view.key)
        delta.write.parquet(target)
        inserted, updated, deleted = counted(self.spark.read.parquet(target))
        return inserted, updated, deleted, size

    def _maintained(
        self, view: ViewDef, delta: pa.Table, lines: pa.Table | None, assembly: dict
    ) -> tuple[int, int, int, int]:
        """Stage the delta the rules found, and the view's rows: the stored ones under a
        grown overlay, or written whole when the overlay would pass its share of the base
        (said in `assembly`). `view` is the one stored (a multiset's combinations, whose
        `lines` are the delta)."""
        current = self.current
        assert current is not None, "the rules maintain a stored view"
        ops = delta.column(OP)
        inserted, updated, deleted = (pc.sum(pc.equal(ops, op)).as_py() or 0 for op in (INSERT, UPDATE, DELETE))
        before = current.meta()["rows"]
        changed = self.store.staged_delta(self.sync_id)
        if lines is not None:
            changed = self.staging / "combination-delta"
            layers.write_part(lines, self.store.staged_delta(self.sync_id))
            total = lambda op: pc.sum(lines.filter(pc.equal(lines.column(OP), op)).column(multiset.COUNT)).as_py() or 0  # noqa: E731
            inserted, updated, deleted = total(INSERT), 0, total(DELETE)
        layers.write_part(delta, changed)
        schema = arrow_schema(view.columns)
        key_schema = pa.schema([schema.field(k) for k in view.key])
        now = delta.filter(pc.is_in(ops, pa.array([INSERT, UPDATE]))).select(schema.names)
        replaced = delta.filter(pc.is_in(ops, pa.array([UPDATE, DELETE]))).select(key_schema.names)
        overlay = current.view_overlay()
        previous = layers.Layers.load(overlay) or layers.whole(before)
        upserts, removed = layers.grown(overlay, previous, schema, key_schema, replaced, now)
        grown = layers.Layers(previous.base_rows, upserts.num_rows, removed.num_rows, 0)
        if grown.room_for(0):
            layers.link_files(current.rows(), self.staged.rows())
            layers.write_overlay(self.staged.view_overlay(), upserts, removed, grown)
            assembly.update(view_written="overlay", overlay_rows=grown.overlay_rows())
        else:
            staged = self.spark.read.schema(f"{OP} string, {spark_schema(view.columns)}")
            changes = staged.parquet(str(changed))
            rows = layers.without_keys(
                layers.view_frame(self.spark, current, view), changes.select(*view.key), view.key
            )
            rows.unionByName(join_delta.upserted(changes)).write.parquet(str(self.staged.rows()))
            assembly["view_written"] = "whole"
        return inserted, updated, deleted, before + inserted - deleted

    def maintain_sample(self, counts: ViewCounts) -> None:
        """Keep the view's random sample, if it has one, from the staged delta (which
        `counts` counts), into the staged version (view_sample.py): committed with it."""
        target = self.options.view_options.sample_size
        if not target:
            return
        t0 = time.monotonic()
        m = self.metrics
        result = view_sample.from_delta(
            self.sample,
            target,
            self.view,
            self.store.staged_delta(self.sync_id),
            self.current.meta()["rows"] if self.current is not None else 0,
            counts.rows,
            counts.deleted,
            lambda: view_rows.view_batches(self.staged, self.view, MULTISET_BATCH_ROWS),
            np.random.default_rng(self.seed),
            counts=self._stored_counts,
        )
        view_sample.save(self.staged, result)
        m.sample = {**asdict(result.state), "seconds": round(time.monotonic() - t0, 3)}

    def _stored_counts(self, contents: pa.Table) -> dict[tuple, int]:
        """The current version's counts of the view rows `contents` (view_sample.stored_counts)."""
        assert self.current is not None, "a load's sample is drawn from its delta alone"
        return view_sample.stored_counts(self.current, self.view, contents)

    def commit(self) -> None:
        """Make the staged version current in one atomic step."""
        self.cancellation.point_of_no_return()
        m = self.metrics
        m.add_sites([s.metrics for s in self.sites])
        self._count_traffic()  # verify reads and failed attempts count too
        m.realized_benefit_bytes = (m.full_ship_estimate_bytes or 0) - m.bytes_to_agent - m.bytes_from_agent
        m.rows_after = m.rows_in_view
        m.columns_changed = changed_columns.of_view(self.view, self.store.staged_delta(self.sync_id), self.stored)
        meta = {**self.meta, "version": self.staged.number, "sync_id": self.sync_id, "rows": m.rows_in_view}
        meta["metrics"] = m.to_json()
        meta["definition"] = self.view.to_json()  # what its rows follow: a redefinition waits for a sync
        committed = self.store.commit(self.staged, meta)
        faults.checkpoint("after_visible")
        self._prepare_sketches(committed)

    def _prepare_sketches(self, committed: Version) -> None:
        """Queue background builds of the sketch tables the next sync would build (sketch/prep.py)
        for `sketch`, and for `auto` where this sync loaded the site or chose sketch for it (a
        site handed to another strategy likely goes there again: its table would go unused)."""
        if self.sketches is None or self.options.strategy not in (Sketch.name, Auto.name):
            return
        sites = [
            (i, self.view.sites[i])
            for i, run in enumerate(self.sites)
            if self.options.strategy == Sketch.name or run.current is None or isinstance(run.strategy, Sketch)
        ]
        try:
            self.sketches.after_commit(self.spark, committed, sites, self.options.sketch_seed_rotation)
        except Exception:  # the sync committed: a missing table is built by the next one
            log.exception("sync %s of view %s: could not queue its sketch tables", self.sync_id, self.view_name)
