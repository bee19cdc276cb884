"""The build step: each extracted site's exact delta, and its next fragment staged.

`build` → `Fragments`, the staged version the fragments and their statistics went into and
each site's classified rows (which the caller releases). An audit sync (`verify`) reads
every site in full as well and keeps that result instead, with a report of where the
view's own method disagreed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from warehouse import faults
from warehouse.deltas.site_delta import DeltaResult
from warehouse.deltas.touched_delta import TouchedDelta
from warehouse.pipeline import verify
from warehouse.pipeline.extract import extract
from warehouse.pipeline.site_sync import SiteRun
from warehouse.pipeline.start import Start
from warehouse.store.versions import Version
from warehouse.strategies.sync_context import SyncContext
from warehouse.viewdef import ViewDef

log = logging.getLogger("warehouse.pipeline.build")

Built = DeltaResult | TouchedDelta


@dataclass(frozen=True)
class Fragments:
    """What `build` staged: the version its fragments went into, and each site's delta."""

    staged: Version
    #: each site's classified rows, in site order (held until `release`)
    results: tuple[Built, ...]

    def release(self) -> None:
        """Free what the deltas hold (cached Spark frames, Arrow tables)."""
        for result in self.results:
            result.release()


def build(ctx: SyncContext, view: ViewDef, start: Start, sites: tuple[SiteRun, ...]) -> Fragments:
    """Build each extracted site's delta into the version the sync stages."""
    staged = ctx.store.staged_version(ctx.sync_id, start.number)
    fragments = _built(staged, sites)
    if ctx.options.verify:
        try:
            fragments = _audited(ctx, view, start, fragments)
        except BaseException:
            fragments.release()
            raise
    faults.checkpoint("fragments_written")
    return fragments


def _built(staged: Version, sites: tuple[SiteRun, ...]) -> Fragments:
    """The sites' fragments built into `staged`; what was built is released if one fails."""
    results: list[Built] = []
    try:
        for site in sites:
            results.append(site.build_fragment(staged))
    except BaseException:
        Fragments(staged, tuple(results)).release()
        raise
    return Fragments(staged, tuple(results))


def _audited(ctx: SyncContext, view: ViewDef, start: Start, method: Fragments) -> Fragments:
    """Audit: read every site query in full as well, report where the view's own method
    disagrees with it (in the metrics), and keep the full read's result, exact by construction."""
    ctx.progress({"phase": "verify", **ctx.traffic()})
    full = ctx.with_options(replace(ctx.options, strategy="full_ship", verify=False))
    checks = extract(full, view, start, prefix="check", tokens=False)
    checked = _built(Version(start.number, ctx.sync_id, start.staging / "checked"), checks)
    try:
        report = verify.compared(ctx.spark, view, method.staged, checked.staged, list(checked.results))
    except BaseException:
        checked.release()
        raise
    method.release()
    if report["divergent_rows"]:
        what = f"verify sync {ctx.sync_id} of view {ctx.view_name}"
        log.warning("%s: %d row(s) differ from a full read", what, report["divergent_rows"])
    ctx.metrics.verify = report
    return checked
