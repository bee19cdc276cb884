"""Which keys a site query gained and lost, by a sketch of the keys alone (the change-stamp strategies).

The timestamp strategy reads the rows changed since its watermark; a row deleted outright
leaves no stamp, so each sync also finds the keys that are gone. This module does it with
the sketch exchange (strategies/sketch.py) over the site query projected on its key: each
side's pairs are (key fingerprint, hash of the key), so the two sets differ only by the
keys deleted and the keys inserted since the snapshot, and the table sent is sized for
those alone — a few kilobytes where shipping every key costs megabytes. The agent answers
with the keys only it holds and names the keys only the warehouse holds.

The warehouse's table of the snapshot's keys is kept beside the fragment (`key-sketch/` in
the site's directory of the version, so it commits with it) and brought up to date in
O(changes) when each sync stages its version: less the keys its delta deleted, plus those
it inserted — whichever way the sync found them, a full reconciliation included. A table
is built with the load, from its keys, and from the fragment on the executors (one pass
over the key columns) only when none is kept (after another strategy), when its secret is
due for rotation, or when the fragment outgrew it. When no stage peels, the caller ships
every key instead (`KeysUnresolved`): the group-hash fall-back of a row sketch needs
statistics a key-only snapshot does not carry.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame

from warehouse.metrics import SiteMetrics
from warehouse.names import spark_schema
from warehouse.planning.cost_model import CostModel
from warehouse.store import layers
from warehouse.store.versions import Version
from warehouse.strategies.base import Built, SiteContext, SiteEstimate, Snapshot, Strategy
from warehouse.strategies.sketch import tables as sketch_tables
from warehouse.strategies.sketch.strategy import Sketch
from warehouse.viewdef import SiteQuery

if TYPE_CHECKING:
    from warehouse.strategies.base import ClassifiedTuples


def key_only_context(
    ctx: SiteContext, snapshot: Snapshot, keys_site: SiteQuery, staging: str, **changes
) -> tuple[SiteContext, Snapshot]:
    """The site's context for an exchange over its key-only query, with a staging
    directory of its own (made here) and metrics apart from the site's; and the snapshot's
    keys, with the statistics unchanged."""
    keys_ctx = replace(
        ctx,
        site=keys_site,
        staging=ctx.staging / staging,
        metrics=SiteMetrics(source=ctx.site.source, rows_before=ctx.metrics.rows_before),
        **changes,
    )
    keys_ctx.staging.mkdir(parents=True, exist_ok=True)
    keys = replace(snapshot, read=lambda: snapshot.stored.select(*keys_site.key))
    if snapshot.read_table is not None:
        keys = replace(keys, read_table=lambda: snapshot.table.select(keys_site.key))
    return keys_ctx, keys


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


def table_dir(version: Version, site: int) -> Path:
    """Where a version keeps the table of a site's keys (when it keeps one)."""
    return version.site_dir(site) / "key-sketch"


class KeySketch(Sketch):
    """The sketch exchange over a key-only site query, with the table of the snapshot's keys
    that the current version keeps (`kept_in`), or one built now."""

    def __init__(self, ctx: SiteContext, snapshot: Snapshot, kept_in: Version | None, site: int):
        super().__init__(ctx, snapshot)
        self.kept_in, self.site_index = kept_in, site
        self.table_kept = False

    def _new_table(self) -> sketch_tables.SiteSketch:
        ctx = self.ctx
        rows = self.snapshot.statistics.rows
        kept = sketch_tables.SiteSketch.load(table_dir(self.kept_in, self.site_index)) if self.kept_in else None
        if kept is not None and not sketch_tables.needs_new_table(
            kept.syncs, kept.table.width, rows, ctx.sync.options.sketch_seed_rotation
        ):
            self.table_kept = True
            return kept
        t0 = time.monotonic()
        table = sketch_tables.build(self._fragment(), ctx.site.columns, ctx.key_columns(), rows)
        ctx.metrics.sketch_built_inline_s = round(time.monotonic() - t0, 3)
        return table

    #: keys alone: nothing to ship whole instead, so every stage the agent's table allows is tried
    ships_whole = False

    def _fall_back(self, to: type[Strategy]) -> NoReturn:
        raise KeysUnresolved("no stage of the key sketch peeled")

    def stage(self, staged: Version, built: Built) -> None:
        """Nothing here: the caller stages the table with the sync's delta (`stage_table`)."""


def present_keys(ctx: SiteContext, snapshot: Snapshot, keys_site: SiteQuery) -> tuple[pa.Table, pa.Table, KeySketch]:
    """The keys the site query holds now and the `snapshot` does not (new), and those the
    snapshot holds and the site query no longer does (gone); and the exchange, whose
    table `stage_table` brings up to date and whose metrics tell what it cost.

    Raises:
        KeysUnresolved: no stage peeled (the bytes it cost are in the context's traffic).
    """
    keys_ctx, keys_snapshot = key_only_context(ctx, snapshot, keys_site, "ts-key-sketch", current=None)
    keys_snapshot = replace(keys_snapshot, estimate=keys_only(snapshot.statistics))
    sketch = KeySketch(keys_ctx, keys_snapshot, ctx.current, ctx.index)
    sketch.plan()
    answer = sketch.exchange()
    key_schema = pa.schema([ctx.rows_schema().field(k) for k in keys_site.key])
    new = pa.concat_tables([pq.read_table(p).select(keys_site.key).cast(key_schema) for p in answer.returned])
    gone = pq.read_table(answer.deleted).select(keys_site.key).cast(key_schema)
    return new, gone, sketch


def build_table(ctx: SiteContext, staged: Version, rows: int) -> None:
    """Stage the table of the keys of `staged`'s fragment (just written whole, `rows` rows),
    built from its key columns: read with Arrow where they fit the Arrow executor
    (warehouse/executor.py), else on the executors."""
    key = ctx.key_columns()
    if ctx.sync.arrow_fits(rows):
        keys: DataFrame | pa.Table = layers.table(staged, ctx.index, key, ctx.site.key)
    else:
        keys = ctx.sync.spark.read.schema(spark_schema(key)).parquet(str(staged.fragment(ctx.index)))
    sketch_tables.build(keys, key, key, rows).save(table_dir(staged, ctx.index))


def stage_table(
    ctx: SiteContext, used: sketch_tables.SiteSketch | None, staged: Version, result: ClassifiedTuples
) -> bool:
    """Stage the table of the new fragment's keys: the current fragment's (`used` by this
    sync, else the one the current version keeps) less the keys this sync's delta deleted,
    plus those it inserted (updates leave the keys as they are). Nothing is staged when
    there is no such table; the next key sketch then builds one. Whether one was staged.

    The table must hold exactly the fragment's keys (a key it lacks would come back as new
    and fail the sync as held twice), so it follows the delta that was applied, not what
    the agent reported.
    """
    if used is None and ctx.current is not None:
        used = sketch_tables.SiteSketch.load(table_dir(ctx.current, ctx.index))
    if used is None:
        return False
    key = ctx.key_columns()
    key_schema = pa.schema([ctx.rows_schema().field(c.name) for c in key])
    inserted, deleted = (k.cast(key_schema) for k in result.key_changes(key_schema.names))
    table = used.table.copy()
    table.add(*used.pairs(deleted, key, key), sign=-1)
    table.add(*used.pairs(inserted, key, key))
    sketch_tables.SiteSketch(table, used.syncs + 1).save(table_dir(staged, ctx.index))
    return True
