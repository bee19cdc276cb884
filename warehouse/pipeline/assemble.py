"""The assemble step: the view's own exact delta from its sites' deltas, staged.

One keyed site: its fragment's delta is the view's. Several sites: the fragments' changes
joined by the delta rules (deltas/join_delta.py), or the view joined anew from the
fragments and compared with the stored one when the rules would cost more. A multiset
view: its lines with counts (multisets/multiset.py), paired into updates where the view
has `match` (multisets/matching.py). `assemble` → `ViewCounts`; the method and its
reasons go into the sync's metrics (`assembly`, `match`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F

from deltasieve_protocol.types import arrow_schema
from warehouse.deltas import join_delta
from warehouse.deltas.join_delta import JoinDelta
from warehouse.deltas.site_delta import counted, view_delta
from warehouse.multisets import combinations, matching, multiset
from warehouse.names import DELETE, INSERT, OP, UPDATE, spark_schema
from warehouse.pipeline.build import Built, Fragments
from warehouse.pipeline.start import Start
from warehouse.store import layers
from warehouse.strategies.sync_context import SyncContext
from warehouse.viewdef import ViewDef

#: Rows of a multiset's fragment delta turned into view delta lines at a time.
MULTISET_BATCH_ROWS = 65_536


class ViewCounts(NamedTuple):
    """What assemble staged: the view delta's rows by kind, and the view's new size."""

    inserted: int
    updated: int
    deleted: int
    rows: int


def assemble(ctx: SyncContext, view: ViewDef, start: Start, fragments: Fragments) -> ViewCounts:
    """Stage the view's delta (the store's staged delta of the sync) and, where the sites'
    fragments are not the view's rows, the view's rows in `fragments.staged`."""
    return _Assembly(ctx, view, start, fragments).view_delta()


@dataclass(frozen=True)
class _Assembly:
    """One assembly's inputs, shared by its ways."""

    ctx: SyncContext
    view: ViewDef
    start: Start
    fragments: Fragments

    def view_delta(self) -> ViewCounts:
        """The view's delta: the fragment's own for one site; for several, from the fragments'
        changes by the delta rules (join_delta.py), or by recomputing the join; for a
        multiset, its lines with counts (multiset.py)."""
        if self.view.multiset and self.view.assembly is None:
            counts = self._matched(*self._multiset_delta(self.fragments.results[0]))
        elif self.view.assembly is None:
            result = self.fragments.results[0]
            result.write_delta(self.ctx.store.staged_delta(self.ctx.sync_id), self.view.sites[0].columns)
            counts = (result.inserted, result.updated, result.deleted, result.inserted + result.updated + result.kept)
        else:
            # a multiset's rows are stored as combinations of its sites' grouped rows (combinations.py)
            stored = combinations.stored_view(self.view) if self.view.multiset else self.view
            joins = JoinDelta(self.ctx.spark, stored, self.ctx.sync_id[:12], self.start.staging, self.fragments.staged)
            try:
                counts = self._assemble(joins)
            finally:
                joins.release()
            if self.view.multiset:
                counts = self._matched(counts[0], counts[2])
        return ViewCounts(*counts)

    def _multiset_delta(self, result: Built) -> tuple[int, int]:
        """Stage the delta of a multiset view of one site: its fragment's changes as lines
        with counts. Returns the occurrences inserted and deleted."""
        site = self.view.sites[0]
        changes = self.start.staging / "fragment-delta"
        result.write_delta(changes, site.columns)

        current = self.start.current

        def old_counts(keys: pa.Table) -> pa.Table:
            assert current is not None, "a load updates no line"
            return layers.lookup(current, 0, site.columns, site.key, keys)

        target = self.ctx.store.staged_delta(self.ctx.sync_id)
        return multiset.write_lines(changes, old_counts, self.view, target, MULTISET_BATCH_ROWS)

    def _matched(self, inserted: int, deleted: int) -> tuple[int, int, int, int]:
        """A multiset view's staged delta with `match`: vanished and appeared rows paired into
        updates (matching.py). Returns the delta's counts and the view's new size."""
        target = self.ctx.store.staged_delta(self.ctx.sync_id)
        updated = 0
        match = self.ctx.options.view_options.match
        if match:
            (inserted, updated, deleted), self.ctx.metrics.match = matching.pair_delta(target, self.view, match)
        before = self.start.current.meta()["rows"] if self.start.current is not None else 0
        return inserted, updated, deleted, before + inserted - deleted

    def _assemble(self, joins: JoinDelta) -> tuple[int, int, int, int]:
        reason: str | None
        if self.start.current is None:
            reason = "first sync"
        elif self.ctx.options.verify:
            reason = "verify sync: the view is joined from the full reads"
        else:
            reason = join_delta.recompute_reason(
                [r.inserted + r.updated + r.deleted for r in self.fragments.results],
                [r.inserted + r.updated + r.kept for r in self.fragments.results],
            )
        if reason is None:
            t0 = time.monotonic()
            changes = [
                r.delta_table(site.columns) for r, site in zip(self.fragments.results, self.view.sites, strict=True)
            ]
            assert self.start.current is not None, "a first sync recomputes"
            try:
                old, new = joins.candidates(self.start.current, changes)
            except join_delta.TooLarge as exc:
                reason = str(exc)
            else:
                assembly = self.ctx.metrics.assembly = {
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
        self.ctx.metrics.assembly = {"method": "recompute", "reason": reason, "view_written": "whole"}
        return self._recompute(joins)

    def _recompute(self, joins: JoinDelta) -> tuple[int, int, int, int]:
        """Join the new fragments into the view and diff it with the stored one, by the view
        key (a multiset's combinations, by content)."""
        view = joins.view
        names = [c.name for c in view.columns]
        joins.join(joins.fragments, "all").write.parquet(str(self.fragments.staged.rows()))
        new = self.ctx.spark.read.schema(spark_schema(view.columns)).parquet(str(self.fragments.staged.rows()))
        target = str(self.ctx.store.staged_delta(self.ctx.sync_id))
        if self.view.multiset:
            old = (
                layers.view_frame(self.ctx.spark, self.start.current, view) if self.start.current is not None else None
            )
            combinations.spark_lines(old, new, self.view).write.parquet(target)
            totals = {
                r[OP]: r["n"]
                for r in self.ctx.spark.read.parquet(target).groupBy(OP).agg(F.sum(multiset.COUNT).alias("n")).collect()
            }
            inserted, deleted = totals.get(INSERT, 0), totals.get(DELETE, 0)
            before = self.start.current.meta()["rows"] if self.start.current is not None else 0
            return inserted, 0, deleted, before + inserted - deleted
        size = new.count()
        if self.start.current is None:  # a load: every row is new
            new.select(F.lit(INSERT).alias(OP), *names).write.parquet(target)
            return size, 0, 0, size
        delta = view_delta(layers.view_frame(self.ctx.spark, self.start.current, view), new, names, view.key)
        delta.write.parquet(target)
        inserted, updated, deleted = counted(self.ctx.spark.read.parquet(target))
        return inserted, updated, deleted, size

    def _maintained(
        self, view: ViewDef, delta: pa.Table, lines: pa.Table | None, assembly: dict
    ) -> tuple[int, int, int, int]:
        """Stage the delta the rules found, and the view's rows: the stored ones under a
        grown overlay, or written whole when the overlay would pass its share of the base
        (said in `assembly`). `view` is the one stored (a multiset's combinations, whose
        `lines` are the delta)."""
        current = self.start.current
        assert current is not None, "the rules maintain a stored view"
        ops = delta.column(OP)
        inserted, updated, deleted = (pc.sum(pc.equal(ops, op)).as_py() or 0 for op in (INSERT, UPDATE, DELETE))
        before = current.meta()["rows"]
        changed = self.ctx.store.staged_delta(self.ctx.sync_id)
        if lines is not None:
            changed = self.start.staging / "combination-delta"
            layers.write_part(lines, self.ctx.store.staged_delta(self.ctx.sync_id))
            total = lambda op: pc.sum(lines.filter(pc.equal(lines.column(OP), op)).column(multiset.COUNT)).as_py() or 0  # noqa: E731
            inserted, updated, deleted = total(INSERT), 0, total(DELETE)
        layers.write_part(delta, changed)
        schema = arrow_schema(view.columns)
        key_schema = view.key_schema()
        now = delta.filter(pc.is_in(ops, pa.array([INSERT, UPDATE]))).select(schema.names)
        replaced = delta.filter(pc.is_in(ops, pa.array([UPDATE, DELETE]))).select(key_schema.names)
        overlay = current.view_overlay()
        previous = layers.Layers.load(overlay) or layers.whole(before)
        upserts, removed = layers.grown(overlay, previous, schema, key_schema, replaced, now)
        grown = layers.Layers(previous.base_rows, upserts.num_rows, removed.num_rows, 0)
        if grown.room_for(0):
            layers.link_files(current.rows(), self.fragments.staged.rows())
            layers.write_overlay(self.fragments.staged.view_overlay(), upserts, removed, grown, view.key)
            assembly.update(view_written="overlay", overlay_rows=grown.overlay_rows())
        else:
            staged = self.ctx.spark.read.schema(f"{OP} string, {spark_schema(view.columns)}")
            changes = staged.parquet(str(changed))
            rows = layers.without_keys(
                layers.view_frame(self.ctx.spark, current, view), changes.select(*view.key), view.key
            )
            rows.unionByName(join_delta.upserted(changes)).write.parquet(str(self.fragments.staged.rows()))
            assembly["view_written"] = "whole"
        return inserted, updated, deleted, before + inserted - deleted
