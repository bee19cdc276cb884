"""Which keys a site query holds now, by a sketch of the keys alone (the change-stamp strategies).

The timestamp strategy reads the rows changed since its watermark; a row deleted outright
leaves no stamp, so each sync also finds the keys that are gone. This module does it with
the sketch exchange (strategies/sketch.py) over the site query projected on its key: each
side's pairs are (key fingerprint, hash of the key), so the two sets differ only by the
keys deleted and the keys inserted since the snapshot, and the table sent is sized for
those alone — a few kilobytes where shipping every key costs megabytes. The agent answers
with the keys only it holds and names the keys only the warehouse holds.

The warehouse side builds its table from the snapshot's keys at each sync, on the
executors (one pass over the key columns; nothing is kept between syncs). When no stage
peels, the caller ships every key instead (`KeysUnresolved`): the group-hash fall-back of
a row sketch needs statistics a key-only snapshot does not carry.
"""

from __future__ import annotations

import time
from dataclasses import replace

from pyspark.sql import DataFrame

from .. import sketches
from ..delta import check_unique
from ..metrics import SiteMetrics
from ..planning import CostModel
from ..storage import Version
from ..viewdef import SiteQuery
from .base import SiteContext, SiteEstimate, spark_schema
from .sketch import Sketch


def key_only_context(ctx: SiteContext, keys_site: SiteQuery, staging: str, **changes) -> SiteContext:
    """The site's context for an exchange over its key-only query: the snapshot's keys, a
    staging directory of its own (made here) and metrics apart from the site's."""
    keys_ctx = replace(
        ctx,
        site=keys_site,
        staging=ctx.staging / staging,
        snapshot=ctx.snapshot.select(*keys_site.key),
        metrics=SiteMetrics(source=ctx.site.source, rows_before=ctx.metrics.rows_before),
        **changes,
    )
    keys_ctx.staging.mkdir(parents=True, exist_ok=True)
    return keys_ctx


def source_of(ctx: SiteContext) -> str:
    """The site's tables and source, for an error about its data."""
    return f"{ctx.site.where()} at source {ctx.site.source!r}"


class KeysUnresolved(Exception):
    """No stage of the key sketch peeled: the keys must be found another way."""


def keys_only(estimate: SiteEstimate) -> SiteEstimate:
    """The estimate of a sync of the key-only query: no key is updated, rows weigh a key.

    >>> e = keys_only(SiteEstimate(1000, 0.1, 0.01, CostModel(50, 4, 16), 128, inserts=5.0))
    >>> (e.updates, e.deletes, e.inserts, e.cost.tuple_bytes)
    (0.0, 10.0, 5.0, 4.0)
    """
    cost = estimate.cost
    return SiteEstimate(
        estimate.rows,
        0.0,
        estimate.p_delete,
        CostModel(cost.key_bytes, cost.key_bytes, cost.hash_bytes),
        estimate.hash_bits,
        updates=0.0,
        updates_variance=0.0,
        inserts=estimate.inserts,
    )


def expected_bytes(estimate: SiteEstimate) -> float:
    """What the key sketch is expected to move for a site with `estimate` (its rows whole).

    >>> est = SiteEstimate(1_000_000, 0.01, 0.0001, CostModel(60, 5, 16), 128)
    >>> expected_bytes(est) < 0.01 * est.rows * est.cost.key_bytes
    True
    """
    return Sketch.expected_bytes(keys_only(estimate))


class KeySketch(Sketch):
    """The sketch exchange over a key-only site query, with a table built from the snapshot's keys."""

    def _new_table(self) -> sketches.SiteSketch:
        ctx = self.ctx
        t0 = time.monotonic()
        table = sketches.build(ctx.snapshot, ctx.site.columns, ctx.key_columns(), ctx.estimate.rows)
        ctx.metrics.sketch_built_inline_s = round(time.monotonic() - t0, 3)
        return table

    def _fall_back(self) -> None:
        raise KeysUnresolved("no stage of the key sketch peeled")

    def stage(self, staged: Version) -> None:
        """Nothing is kept: the next sync builds its table from its own snapshot."""


def present_keys(ctx: SiteContext, keys_site: SiteQuery) -> tuple[DataFrame, SiteMetrics]:
    """The keys the site query holds now: the snapshot's, less those the agent named gone,
    plus those only the agent holds; and the exchange's own metrics.

    Raises:
        KeysUnresolved: no stage peeled (the bytes it cost are in the context's traffic).
        SourceDataError: a key occurs twice at the source.
    """
    key = keys_site.key
    # no stored table of the view's: this one is built from the keys
    keys_ctx = key_only_context(
        ctx, keys_site, "ts-key-sketch", current=None, sketches=None, estimate=keys_only(ctx.estimate)
    )
    sketch = KeySketch(keys_ctx)
    sketch.plan()
    answer = sketch.exchange()
    schema = spark_schema(keys_site.columns)
    new = ctx.spark.read.schema(schema).parquet(*map(str, answer.returned))
    gone = ctx.spark.read.schema(schema).parquet(str(answer.deleted))
    kept = keys_ctx.snapshot.join(gone, key, "left_anti")
    # A key's pair is the same on both sides, so a key the agent holds and the warehouse
    # keeps comes back only if the source holds it twice: its declared key is not unique.
    check_unique(
        new.unionByName(kept.join(new, key, "left_semi")), key, f"{ctx.site.where()} at source {ctx.site.source!r}"
    )
    return kept.unionByName(new), keys_ctx.metrics
