"""One sync of a view, as a pipeline of steps that take values and return records.

    begin (start.py)        → Start        the versions it starts from, a redefinition to apply
    extract (extract.py)    → SiteRuns     every site query read from its agent, side by side
    build (build.py)        → Fragments    each site's exact delta; its next fragment staged
    assemble (assemble.py)  → ViewCounts   the view's own exact delta, staged
    keep_sample             → SampleState  the view's random sample kept from the delta
    redefine_rows           → counts       a redefinition read in full: the old rows to the new
    commit                  → Version      the staged version made current, in one step

Every step reads one frozen `SyncContext` (strategies/sync_context.py) and writes only to its
sinks: the metrics and the link's tally. Each records its wall time and reports itself to
`progress`.
Nothing is visible to readers of the view until `commit` replaces the CURRENT pointer; a
failure anywhere discards the staged files and leaves the previous version as it was.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from warehouse import executor, faults
from warehouse.deltas import changed_columns
from warehouse.executor import SPARK, ExecutorName
from warehouse.metrics import SyncMetrics
from warehouse.pipeline import redefine
from warehouse.pipeline.assemble import MULTISET_BATCH_ROWS, ViewCounts, assemble
from warehouse.pipeline.build import Fragments, build
from warehouse.pipeline.extract import extract
from warehouse.pipeline.site_sync import SiteRun
from warehouse.pipeline.start import Start, begin
from warehouse.reading import rows as view_rows
from warehouse.sample import view_sample
from warehouse.store.versions import Version
from warehouse.strategies.auto import Auto
from warehouse.strategies.sketch.strategy import Sketch
from warehouse.strategies.sync_context import SyncContext
from warehouse.viewdef import ViewDef

__all__ = ["SyncRun", "commit", "keep_sample", "redefine_rows"]

log = logging.getLogger("warehouse.pipeline.sync")


@dataclass(frozen=True)
class SyncRun:
    """One sync of `view` in `ctx`: the steps in order.

    `base`: the version to start from instead of the current one (its copy widened to the
    types of `view`: schema_policy.py), and `meta`, what else the committed version's meta keeps.
    """

    ctx: SyncContext
    view: ViewDef
    base: Version | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def metrics(self) -> SyncMetrics:
        return self.ctx.metrics

    def run(self) -> SyncMetrics:
        """Run the steps in order, timing each; the sync's metrics."""
        ctx, view, m = self.ctx, self.view, self.ctx.metrics
        m.strategy, m.hash_bits = ctx.options.strategy, ctx.options.hash_bits
        m.mode = "verify" if ctx.options.verify else None
        started = time.monotonic()
        fragments: Fragments | None = None
        try:
            start = begin(ctx, view, self.base, self.meta)
            ctx = ctx.on(choose_executor(ctx, view, start))
            m.executor = ctx.executor
            sites = ctx.timed("extract_sites", extract, ctx, view, start)
            fragments = ctx.timed("build_fragments", build, ctx, view, start, sites)
            counts = ctx.timed("assemble_view", assemble, ctx, view, start, fragments)
            m.rows_inserted, m.rows_updated, m.rows_deleted, m.rows_in_view = counts
            faults.checkpoint("delta_written")
            ctx.timed("maintain_sample", keep_sample, ctx, view, start, fragments, counts)
            if start.old is not None:  # the delta is from the old definition's rows to the new ones
                m.rows_inserted, m.rows_updated, m.rows_deleted = ctx.timed(
                    "redefine_delta", redefine_rows, ctx, view, start, fragments
                )
                faults.checkpoint("delta_written")
            if start.projected is not None:
                m.redefinition = redefine.projected(ctx.store, ctx.sync_id, start.projected, view)
            if not all(site.on_arrow() for site in sites):
                m.executor = SPARK  # a fragment that outgrew Arrow
            committed = ctx.timed("commit", commit, ctx, view, start, fragments, sites, self.meta)
            queue_sketches(ctx, view, sites, committed)
        except BaseException:
            _count_traffic(ctx)  # a failed sync still reports what crossed the link
            raise
        finally:
            if fragments is not None:
                fragments.release()
            ctx.store.discard(ctx.sync_id)
            m.spark_jobs = _spark_jobs(ctx)
            m.wall_seconds = round(time.monotonic() - started, 3)
        return m


def choose_executor(ctx: SyncContext, view: ViewDef, start: Start) -> ExecutorName:
    """What runs the sync's steps (warehouse/executor.py): Arrow for a view of one site, read
    the usual way (no redefinition read in full or projected, no audit), whose stored rows
    fit under small_sync_rows; Spark otherwise. A view over several sites is assembled by
    Spark. Every strategy's steps have both forms; a fragment that outgrows Arrow while it is
    built is built by Spark, and the sync's metrics then say "spark" (SiteRun.on_arrow)."""
    usual = start.old is None and start.projected is None and not ctx.options.verify
    one_site = view.assembly is None and len(view.sites) == 1
    rows = start.current.meta().get("rows") if start.current is not None else 0
    runs_on_arrow = usual and one_site and rows is not None  # a version that does not say its size: Spark
    return executor.choose(
        rows or 0, ctx.options.small_sync_rows, local_master=ctx.local_master, runs_on_arrow=runs_on_arrow
    )


def keep_sample(
    ctx: SyncContext, view: ViewDef, start: Start, fragments: Fragments, counts: ViewCounts
) -> view_sample.SampleState | None:
    """Keep the view's random sample, if it has one, from the staged delta (which `counts`
    counts), into the staged version (view_sample.py): committed with it."""
    target = ctx.options.view_options.sample_size
    if not target:
        return None
    t0 = time.monotonic()
    current, staged = start.current, fragments.staged

    def stored_counts(contents: pa.Table) -> dict[tuple, int]:
        """The current version's counts of the view rows `contents` (view_sample.stored_counts)."""
        assert current is not None, "a load's sample is drawn from its delta alone"
        return view_sample.stored_counts(current, view, contents)

    result = view_sample.from_delta(
        start.sample,
        target,
        view,
        ctx.store.staged_delta(ctx.sync_id),
        current.meta()["rows"] if current is not None else 0,
        counts.rows,
        counts.deleted,
        lambda: view_rows.view_batches(staged, view, MULTISET_BATCH_ROWS),
        np.random.default_rng(ctx.seed),
        counts=stored_counts,
    )
    view_sample.save(staged, result)
    ctx.metrics.sample = {**asdict(result.state), "seconds": round(time.monotonic() - t0, 3)}
    return result.state


def redefine_rows(ctx: SyncContext, view: ViewDef, start: Start, fragments: Fragments) -> tuple[int, int, int]:
    """Apply a redefinition read in full: stage the delta from the old view's rows to the new
    ones (statistics of the keys that survive kept). Its rows inserted, updated and deleted,
    which are the sync's."""
    assert start.stored is not None and start.old is not None, "a redefinition changes stored rows"
    counts, ctx.metrics.redefinition = redefine.compared(
        ctx.spark, ctx.store, start.stored, fragments.staged, start.old, view
    )
    return counts


def commit(
    ctx: SyncContext,
    view: ViewDef,
    start: Start,
    fragments: Fragments,
    sites: tuple[SiteRun, ...],
    meta: Mapping[str, Any],
) -> Version:
    """Make the staged version current in one atomic step, its meta holding the sync's
    metrics and the definition its rows follow; the version committed."""
    ctx.cancellation.point_of_no_return()
    m = ctx.metrics
    m.add_sites([s.metrics for s in sites])
    _count_traffic(ctx)  # verify reads and failed attempts count too
    m.realized_benefit_bytes = (m.full_ship_estimate_bytes or 0) - m.bytes_to_agent - m.bytes_from_agent
    m.rows_after = m.rows_in_view
    m.columns_changed = changed_columns.of_view(view, ctx.store.staged_delta(ctx.sync_id), start.stored)
    kept = {**meta, "version": fragments.staged.number, "sync_id": ctx.sync_id, "rows": m.rows_in_view}
    kept["metrics"] = m.to_json()
    kept["definition"] = view.to_json()  # what its rows follow: a redefinition waits for a sync
    committed = ctx.store.commit(fragments.staged, kept)
    faults.checkpoint("after_visible")
    return committed


def queue_sketches(ctx: SyncContext, view: ViewDef, sites: tuple[SiteRun, ...], committed: Version) -> None:
    """Queue background builds of the sketch tables the next sync would build (sketch/prep.py)
    for `sketch`, and for `auto` where this sync loaded the site or chose sketch for it (a
    site handed to another strategy likely goes there again: its table would go unused)."""
    strategy = ctx.options.strategy
    if ctx.sketches is None or strategy not in (Sketch.name, Auto.name):
        return
    chosen = [
        (i, view.sites[i])
        for i, run in enumerate(sites)
        if strategy == Sketch.name or run.current is None or isinstance(run.strategy, Sketch)
    ]
    try:
        arrow = ctx.executor == executor.ARROW
        ctx.sketches.after_commit(ctx.spark, committed, chosen, ctx.options.sketch_seed_rotation, arrow)
    except Exception:  # the sync committed: a missing table is built by the next one
        log.exception("sync %s of view %s: could not queue its sketch tables", ctx.sync_id, ctx.view_name)


def _spark_jobs(ctx: SyncContext) -> int:
    """The Spark jobs run so far under the sync's job group (service/jobs.py sets it)."""
    return len(ctx.spark.sparkContext.statusTracker().getJobIdsForGroup(ctx.sync_id))


def _count_traffic(ctx: SyncContext) -> None:
    for name, value in ctx.traffic().items():
        setattr(ctx.metrics, name, value)
