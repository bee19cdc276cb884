"""The per-site part of a sync: one site query, its fragment, its statistics.

project snapshot → plan groups → exchange units (send units, receive changes) → regroup
run against the site's agent, each step handing over to the view's strategy
(`strategies/`); `build_fragment` then compares what came back with the stored fragment
and stages the next fragment with its update and deletion statistics. A view over several sites runs one
`SiteRun` per site (their extractions side by side) before it assembles the view (see
`sync.py`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from protocol.types import arrow_schema
from warehouse import faults
from warehouse.agent_client import AgentClient
from warehouse.deltas.site_delta import DeltaResult, build_delta, check_unique
from warehouse.deltas.touched_delta import TouchedDelta, classify, omega_schema
from warehouse.deltas.touched_delta import check_unique as check_unique_arrow
from warehouse.metrics import SiteMetrics
from warehouse.names import OP, TNO
from warehouse.options import SyncOptions
from warehouse.planning import cost_model as planning
from warehouse.planning import update_counts
from warehouse.planning import wire_sizes as costs
from warehouse.planning.cost_model import CostModel
from warehouse.planning.deletions import DELETIONS_SCHEMA, read_deletions
from warehouse.store import layers
from warehouse.store.versions import Version
from warehouse.strategies import LOAD, STRATEGIES, SiteContext, SiteEstimate, expected_bytes
from warehouse.strategies.base import Answer
from warehouse.strategies.sketch.prep import Preparations
from warehouse.viewdef import SiteQuery

#: A fragment whose old and new rows together number at most this is compared and written
#: with Arrow on the driver of a local master (a fraction of a second) instead of by Spark
#: jobs (seconds each, whatever the size); larger ones, and every one on a cluster, by Spark.
DRIVER_BUILD_ROWS = 250_000


@dataclass
class Endpoint:
    """Where a source's agent answers."""

    name: str
    url: str
    token: str | None = None
    verify: object = True


def _utcnow() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass
class SiteRun:
    """Extraction and fragment maintenance of one site query within a sync."""

    spark: SparkSession
    index: int
    site: SiteQuery
    endpoint: Endpoint
    staging: Path
    seed: int
    current: Version | None
    view_name: str
    options: SyncOptions = field(default_factory=SyncOptions)
    progress: Callable[[dict], None] = lambda info: None
    sketches: Preparations | None = None
    #: the view's random sample (view_sample.py) when its rows are the site's (a one-site
    #: view): the cost model is measured on it, a uniform sample at hand, rather than on
    #: the first rows of the fragment (kept from when it was written, or read by Spark)
    sample: pa.Table | None = None

    EXTRACT_STEPS = ("project_snapshot", "plan_groups", "exchange_units", "regroup")

    def __post_init__(self) -> None:
        self.metrics = SiteMetrics(source=self.site.source)
        self.staging.mkdir(parents=True, exist_ok=True)
        self.client = AgentClient(
            self.endpoint.url,
            self.endpoint.token,
            verify=self.endpoint.verify,
            read_timeout_s=self.options.agent_read_timeout_s,
            deadline_s=self.options.agent_deadline_s,
        )
        self.ctx = SiteContext(
            self.spark,
            self.index,
            self.site,
            self.client,
            self.staging,
            self.seed,
            self.current,
            self.options,
            self.metrics,
            self.progress,
            self.traffic,
            sketches=self.sketches,
        )
        self.strategy = None
        self.answer: Answer | None = None
        #: the current version's overlay (None: its fragment is whole) and update-statistics histogram
        self.layers: layers.Layers | None = None
        self.omega: update_counts.Histogram | None = None
        #: Deletion statistics rows of the current version, read once while planning (none before the load).
        self.deletion_rows: list[tuple] = []

    def extract(self) -> None:
        """Run the extraction steps against the site's agent, timing each."""
        self.metrics.extract_started_at = _utcnow()
        try:
            for step in self.EXTRACT_STEPS:
                self.progress({"phase": step, "site": self.index, **self.traffic()})
                t0 = time.monotonic()
                getattr(self, step)()
                self.metrics.phases[step] = round(time.monotonic() - t0, 3)
        finally:
            self.client.close()
            for name, value in self.traffic().items():
                setattr(self.metrics, name, value)
            self.metrics.extract_finished_at = _utcnow()

    def traffic(self) -> dict:
        c = self.client.counter
        return {"bytes_to_agent": c.sent, "bytes_from_agent": c.received, "round_trips": c.requests}

    # -- steps -------------------------------------------------------------------------
    def project_snapshot(self) -> None:
        """Read the stored fragment (the snapshot of the site query the view last saw) with its update statistics."""
        if self.current is not None:
            self.layers = layers.Layers.load(self.current.site_dir(self.index))
            self.ctx.snapshot = layers.frame(self.spark, self.current, self.index, self.site.columns, self.site.key)

    def plan_groups(self) -> None:
        """Measure the cost model and the statistics, then let the strategy plan what to send."""
        faults.checkpoint(faults.PLANNING)
        ctx = self.ctx
        kept = self.layers.cost if self.layers is not None else None  # measured for the base, still current
        if self.sample is not None and self.sample.num_rows >= costs.MIN_SAMPLE_ROWS and ctx.snapshot is not None:
            # uniform, where the kept figures were measured on the first rows of a fragment
            ctx.cost, measured_on = costs.measure_sample(self.sample, self.site, self.options.hash_bits), "sample"
        elif kept:
            ctx.cost, measured_on = CostModel(**kept), "kept"
        else:
            ctx.cost = costs.measure(ctx.snapshot, self.site, self.options.hash_bits)
            measured_on = "fragment" if ctx.snapshot is not None else "assumed"
        self.metrics.cost_model = {
            "tuple_bytes": round(ctx.cost.tuple_bytes, 2),
            "key_bytes": round(ctx.cost.key_bytes, 2),
            "hash_bytes": round(ctx.cost.hash_bytes, 2),
            "measured_on": measured_on,
        }
        if ctx.snapshot is None:
            self.strategy = STRATEGIES[self.options.strategy].create_load(ctx) or LOAD(ctx)
        else:
            self.omega = update_counts.load(self.current.site_dir(self.index))
            if self.omega is None:  # a version written before the histogram was kept
                self.omega = update_counts.of_frame(ctx.snapshot)
            totals = update_counts.totals(self.omega)
            self.metrics.rows_before = totals["n"]
            ctx.observed = (totals["obs"] or 0, totals["upd"] or 0)
            history = read_deletions(self.current, self.index)
            self.deletion_rows = [tuple(r.values()) for r in history]
            ctx.history = [(r["tno"], r["dno"]) for r in history]
            inserts = [r["ino"] for r in history if r["ino"] is not None and r["tno"]]  # not the load
            ctx.estimate = self._estimate(totals, sum(inserts) / len(inserts) if inserts else None)
            self.metrics.expected_bytes = expected_bytes(ctx.estimate)
            self.strategy = STRATEGIES[self.options.strategy].create(ctx)
        self.strategy.plan()

    def exchange_units(self) -> None:
        """Send what the strategy planned; file the agent's answer."""
        self.answer = self.strategy.exchange()

    def regroup(self) -> None:
        """Any further round the answer calls for (the group-hash method's regroup)."""
        self.answer = self.strategy.follow_up(self.answer)

    def build_fragment(self, staged: Version) -> DeltaResult | TouchedDelta:
        """Compare returned rows with the snapshot tuple by tuple; stage the next fragment.

        When the strategy vouches for every key it did not touch, only the touched tuples
        are compared and, if the overlay keeps room for the ones that changed, the fragment
        grows an overlay (layers.py); otherwise every tuple is, and the fragment is written
        whole.
        Returns the classified tuples (the caller releases them) with counts.
        """
        what = f"{self.site.where()} at source {self.site.source!r} (site query of view {self.view_name!r})"
        m = self.metrics
        t0 = time.monotonic()
        result = self._build_overlay(staged, what) if self._touched_only() else None
        if result is not None:
            m.fragment_written = "overlay"
        else:
            result = self._build_on_driver(staged, what) if self._on_driver() else None
            if result is None:
                result = self._build_whole(staged, what)
            m.fragment_written, m.overlay_rows = "whole", 0
        m.phases["build_fragment"] = round(time.monotonic() - t0, 3)
        m.fragment_inserted, m.fragment_updated, m.fragment_deleted = result.inserted, result.updated, result.deleted
        m.rows_after = result.inserted + result.updated + result.kept
        m.full_ship_estimate_bytes = round(self.ctx.cost.tuple_bytes * m.rows_scanned)
        return result

    def _touched_only(self) -> bool:
        """Whether this sync may compare the touched tuples only (and perhaps write an overlay).

        The touched tuples are compared on the driver, so no more of them than the base holds;
        a strategy that ships unchanged rows too (group_hash's changed units) may touch many
        more tuples than change, so the room in the overlay is checked on what did change."""
        if self.current is None or not self.strategy.vouches_for_untouched():
            return False
        answer = self.answer
        touched = self._returned_rows()
        touched += pq.read_metadata(answer.deleted).num_rows if answer.deleted is not None else 0
        return touched <= self._current_layers().base_rows

    def _returned_rows(self) -> int:
        """Rows the answer returned (from the files' footers)."""
        return sum(pq.read_metadata(p).num_rows for p in self.answer.returned)

    def _answer_tables(self, what: str) -> tuple[pa.Table, pa.Table]:
        """The answer's rows (site columns, their key unique) and deleted keys, in Arrow."""
        columns, key = self.site.columns, self.site.key
        rows_schema = arrow_schema(columns)
        returned = pa.concat_tables(
            [pq.read_table(p).select(rows_schema.names).cast(rows_schema) for p in self.answer.returned]
            or [rows_schema.empty_table()]
        )
        check_unique_arrow(returned, key, what)
        key_schema = pa.schema([rows_schema.field(k) for k in key])
        if self.answer.deleted is None:
            return returned, key_schema.empty_table()
        return returned, pq.read_table(self.answer.deleted).select(key).cast(key_schema)

    def _current_layers(self) -> layers.Layers:
        """The current version's layers (a fragment written whole has a base and no overlay)."""
        return self.layers or layers.whole(self.metrics.rows_before)

    def _on_driver(self) -> bool:
        """Whether the whole fragment may be compared and written on the driver: a local
        master, few rows, and an answer that says what became of every key it left out."""
        if not self.ctx.local_master:
            return False
        if self.current is not None and not (
            self.strategy.vouches_for_untouched() or self.strategy.untouched_are_gone()
        ):
            return False
        return (self.metrics.rows_before or 0) + self._returned_rows() <= DRIVER_BUILD_ROWS

    def _build_on_driver(self, staged: Version, what: str) -> TouchedDelta:
        """The whole-fragment build in Arrow: every stored row is a touched one. Untouched
        keys are unchanged when the strategy vouches for them, else gone (a full read)."""
        key, i = self.site.key, self.index
        omega = omega_schema(self.site.columns)
        returned, deleted = self._answer_tables(what)
        key_schema = deleted.schema
        old = layers.table(self.current, i, self.site.columns, key) if self.current is not None else omega.empty_table()
        if self.current is not None and self.strategy.untouched_are_gone():
            unseen = old.select(key).join(returned.select(key), key, join_type="left anti")
            deleted = pa.concat_tables([deleted, unseen.cast(key_schema)])
        result = classify(old, returned, deleted, self.site.columns, key, self.metrics.rows_before or 0)
        kept = old.join(result.left.select(key).cast(key_schema), key, join_type="left anti").select(omega.names)
        kept = kept.set_column(kept.schema.get_field_index(TNO), TNO, pc.add(kept.column(TNO), 1))
        fragment = pa.concat_tables([kept, result.changed.drop_columns([OP]).cast(omega)])
        site_dir = staged.site_dir(i)
        layers.write_part(fragment, staged.fragment(i))
        # a whole fragment is a base without an overlay: its sizes, measured here, serve until it is rewritten
        cost = costs.measure_sample(fragment, self.site, self.options.hash_bits) if fragment.num_rows else None
        layers.Layers(fragment.num_rows, 0, 0, 0, asdict(cost) if cost else None).save(site_dir)
        update_counts.save(update_counts.of_table(fragment), site_dir)
        self._stage_common(staged, result)
        return result

    def _build_whole(self, staged: Version, what: str) -> DeltaResult:
        inputs = self.strategy.delta_inputs(self.answer)
        check_unique(inputs.returned, self.site.key, what)
        snapshot = (
            self.ctx.snapshot
            if self.ctx.snapshot is not None
            else self.spark.createDataFrame([], layers.omega_ddl(self.site.columns))
        )
        result = build_delta(
            snapshot,
            self.site.columns,
            self.site.key,
            grouped_keys=inputs.unchanged_keys,
            returned=inputs.returned,
            deleted_keys=inputs.deleted_keys,
        )
        try:
            fragment = result.fragment(self.site.columns)
            fragment.write.parquet(str(staged.fragment(self.index)))
            update_counts.save(update_counts.of_frame(fragment), staged.site_dir(self.index))
            self._stage_common(staged, result)
        except BaseException:
            result.release()
            raise
        return result

    def _build_overlay(self, staged: Version, what: str) -> TouchedDelta | None:
        """The delta from the touched tuples; the next fragment as the current base with a
        grown overlay (and the offset of syncs seen one further). None, with nothing staged, when the
        overlay would pass its share of the base: the fragment is then written whole."""
        ctx, key, i = self.ctx, self.site.key, self.index
        returned, deleted = self._answer_tables(what)
        key_schema = deleted.schema
        if ctx.touched_rows is None:  # unless the strategy read them already
            t0 = time.monotonic()
            keys = pa.concat_tables([returned.select(key), deleted])
            ctx.touched_rows = ctx.stored_rows(keys.group_by(key).aggregate([]))
            self.metrics.phases["read_touched"] = round(time.monotonic() - t0, 3)
        result = classify(ctx.touched_rows, returned, deleted, self.site.columns, key, self.metrics.rows_before)
        current = self._current_layers()
        offset = current.tno_offset + 1
        omega = omega_schema(self.site.columns)
        now = result.changed.drop_columns([OP])
        now = now.set_column(now.schema.get_field_index(TNO), TNO, pc.subtract(now.column(TNO), offset))
        site_dir = staged.site_dir(i)
        upserts, removed = layers.grown(self.current.site_dir(i), current, omega, key_schema, result.left, now)
        grown = layers.Layers(current.base_rows, upserts.num_rows, removed.num_rows, offset, asdict(ctx.cost))
        if not grown.room_for(0):
            result.release()
            return None
        layers.link_files(self.current.fragment(i), staged.fragment(i))
        layers.write_overlay(site_dir, upserts, removed, grown)
        self.metrics.overlay_rows = upserts.num_rows + removed.num_rows
        omega_next = update_counts.advanced(
            self.omega, update_counts.pairs(result.left), update_counts.pairs(result.changed)
        )
        update_counts.save(omega_next, site_dir)
        self._stage_common(staged, result)
        return result

    def _stage_common(self, staged: Version, result: DeltaResult | TouchedDelta) -> None:
        """What every new version of a site holds besides its fragment: deletion statistics and the
        strategy's own state."""
        rows = [*self.deletion_rows, (staged.sync_id, result.before, result.deleted, result.inserted)]
        table = pa.table(list(map(list, zip(*rows, strict=True))), schema=DELETIONS_SCHEMA)
        layers.write_part(table, staged.deletions(self.index))
        self.ctx.result = result
        self.strategy.stage(staged)

    # -- helpers -----------------------------------------------------------------------
    def _estimate(self, totals, inserts: float | None) -> SiteEstimate:
        """The statistics' prediction for this sync: updates (Σ P(update t) and its spread),
        deletion probability, inserts per sync."""
        obs, upd = self.ctx.observed
        prior = planning.site_prior(obs, upd, self.options.default_prior)
        if self.options.prior_mode == "paper":
            prior = 1.0  # updates seen / syncs seen = (updates seen - 1 + 1) / syncs seen
        updates = (totals["a"] or 0.0) + prior * (totals["b"] or 0.0)
        squares = (totals["c"] or 0.0) + 2 * prior * (totals["e"] or 0.0) + prior * prior * (totals["f"] or 0.0)
        n = self.metrics.rows_before
        p_delete = planning.deletion_probability(self.ctx.history)
        return SiteEstimate(
            n,
            updates / n if n else 0.0,
            p_delete,
            self.ctx.cost,
            self.options.hash_bits,
            updates=updates,
            updates_variance=max(0.0, updates - squares),
            inserts=inserts,
        )
