"""The extract step: every site query of a view read from its agent, side by side.

Each site runs its own steps (site_sync.py); a transient failure (link, timeout, cut or
corrupt answer) is retried from the start after a growing pause, and every failed attempt
is kept in the sync's metrics with the bytes it cost. The first site that fails for good
fails the step.
"""

from __future__ import annotations

import logging
import shutil
import time
from concurrent.futures import ThreadPoolExecutor

from pyspark.util import inheritable_thread_target

from warehouse.errors import WarehouseError
from warehouse.metrics import Attempt
from warehouse.pipeline.failures import told
from warehouse.pipeline.site_sync import SiteRun
from warehouse.pipeline.start import Start
from warehouse.strategies.sync_context import SyncContext
from warehouse.viewdef import ViewDef

log = logging.getLogger("warehouse.pipeline.extract")


def extract(
    ctx: SyncContext, view: ViewDef, start: Start, prefix: str = "site", tokens: bool = True
) -> tuple[SiteRun, ...]:
    """Every site of `view` extracted from `start.current` (the runs, in site order, to build
    from); `prefix` names their staging folders ("check": an audit's full reads), and
    `tokens` says whether a site's change token may find it unchanged (not an audit's)."""
    count = len(view.sites)
    runs: list[SiteRun | None] = [None] * count

    def one(i: int) -> None:
        runs[i] = _extract_site(ctx, view, start, i, prefix, tokens)

    if count == 1:
        one(0)
    else:
        site = inheritable_thread_target(one)  # its Spark jobs in this thread's job group (a cancel ends it)
        with ThreadPoolExecutor(count, thread_name_prefix=f"{prefix}-{ctx.sync_id[:8]}") as pool:
            for future in [pool.submit(site, i) for i in range(count)]:
                future.result()  # the first failure fails the sync
    return tuple(run for run in runs if run is not None)  # every one, or `one` raised


def _extract_site(ctx: SyncContext, view: ViewDef, start: Start, i: int, prefix: str, tokens: bool) -> SiteRun:
    """One site's extraction, retried after transient failures up to `agent_retries` times."""
    site, options, m = view.sites[i], ctx.options, ctx.metrics
    staging = start.staging / f"{prefix}-{i}"
    #: a one-site keyed view's sample is its site's rows: its cost model is measured on them
    one_site = len(view.sites) == 1 and not view.multiset
    sample = start.sample[0] if start.sample is not None and one_site else None
    follows_table = view.left_out if view.table is not None else None
    for attempt in range(options.agent_retries + 1):
        shutil.rmtree(staging, ignore_errors=True)
        run = SiteRun(ctx, i, site, staging, start.current, sample, follows_table, tokens)
        ctx.link.opened(run)
        t0 = time.monotonic()
        try:
            run.extract()
            return run
        except WarehouseError as exc:
            ctx.link.closed(run)
            seconds = round(time.monotonic() - t0, 3)
            failed = Attempt(
                site=i, source=site.source, attempt=attempt + 1, error=exc.message, seconds=seconds, **run.traffic()
            )
            m.attempts.append(failed)
            if not exc.transient or attempt == options.agent_retries:
                exc.message = told(exc, site.source, attempt + 1, options.agent_retries)
                raise
            m.retries += 1
            pause = options.agent_retry_backoff_s * 2**attempt
            log.warning("sync %s, source %s: %s; retrying in %.1f s", ctx.sync_id, site.source, exc.message, pause)
            said = {"phase": "retry_wait", "site": i, "attempt": attempt + 1, "error": exc.message, "retry_in_s": pause}
            ctx.progress({**said, **ctx.traffic()})
            ctx.cancellation.wait(pause)
    raise AssertionError("unreachable")
