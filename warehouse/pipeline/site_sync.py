"""The per-site part of a sync: one site query, its fragment, its statistics.

project snapshot → plan groups → exchange units (send units, receive changes) → regroup
run against the site's agent, each step handing over to the view's strategy
(`strategies/`); `build_fragment` then compares what came back with the stored fragment
and stages the next fragment with its update and deletion statistics. A view over several sites runs one
`SiteRun` per site (their extractions side by side) before it assembles the view (see
`sync.py`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from functools import cached_property, partial
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame

from deltasieve_protocol.types import arrow_schema
from warehouse import faults
from warehouse.agent_client import AgentClient
from warehouse.deltas.site_delta import DeltaResult, build_delta
from warehouse.deltas.touched_delta import TouchedDelta, classify, stored_schema
from warehouse.deltas.unique_keys import check_unique
from warehouse.executor import ARROW, SPARK, ascending
from warehouse.metrics import SiteMetrics
from warehouse.names import OP, TNO
from warehouse.phases import timed_phase
from warehouse.pipeline import change_token, source_columns, table_follow
from warehouse.pipeline.change_token import Probe, Riding
from warehouse.planning import cost_model as planning
from warehouse.planning import update_counts
from warehouse.planning import wire_sizes as costs
from warehouse.planning.cost_model import CostModel
from warehouse.planning.deletions import DELETIONS_SCHEMA, read_deletions
from warehouse.store import carried, key_ranges, layers, parquet_files
from warehouse.store.read_so_far import ReadSoFar
from warehouse.store.versions import Version
from warehouse.strategies import LOAD, STRATEGIES, SiteContext, SiteEstimate, Snapshot, Strategy, expected_bytes
from warehouse.strategies.base import Answer, Built, FragmentBuild
from warehouse.strategies.sync_context import SyncContext
from warehouse.viewdef import SiteQuery

T = TypeVar("T")


def _utcnow() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class Projected:
    """What project_snapshot read of the current version: the site's fragment and its layers."""

    #: makes the snapshot with its update statistics columns as a Spark frame, when a step needs
    #: it (Snapshot.read); None before the load
    read: Callable[[], DataFrame] | None = None
    current_layers: layers.Layers | None = None  # the overlay (None: the fragment is whole or absent)


@dataclass(frozen=True)
class Planned:
    """What plan_groups gave: the planned strategy, the snapshot it was given, and what the
    fragment build carries on from the current version."""

    strategy: Strategy
    snapshot: Snapshot
    current_layers: layers.Layers | None = None  # the current version's overlay (None: its fragment is whole)
    update_hist: update_counts.Histogram | None = None  # the current version's update-statistics histogram
    #: deletion statistics rows of the current version, read once while planning (none before the load).
    deletion_rows: tuple[tuple, ...] = ()


@dataclass(frozen=True)
class Recorded:
    """What the current version keeps of a site's statistics: its update-statistics
    histogram and its deletion statistics rows (oldest first), read once for planning (and
    before the change token when the statistics decide how it is sent)."""

    hist: update_counts.Histogram
    deletions: list[dict]

    @cached_property
    def totals(self) -> update_counts.UpdateTotals:
        """The planner's sums over the histogram's tuples."""
        return update_counts.totals(self.hist)

    @property
    def history(self) -> tuple[tuple[int, int], ...]:
        """(tuples before, deleted) of each sync, oldest first."""
        return tuple((r["tno"], r["dno"]) for r in self.deletions)

    @property
    def inserts(self) -> float | None:
        """Rows inserted per sync, on average over the syncs after the load (None: none yet)."""
        seen = [r["ino"] for r in self.deletions if r["ino"] is not None and r["tno"]]  # not the load
        return sum(seen) / len(seen) if seen else None


@dataclass(frozen=True)
class Extracted:
    """What a site's extraction gave its fragment build: the plan and the agent's answer."""

    planned: Planned
    answer: Answer


@dataclass
class SiteRun:
    """Extraction and fragment maintenance of one site query within a sync."""

    sync: SyncContext
    index: int
    site: SiteQuery
    staging: Path
    #: the version the site syncs from (None: a load)
    current: Version | None
    #: the view's random sample (view_sample.py) when its rows are the site's (a one-site
    #: view): the cost model is measured on it, a uniform sample at hand, rather than on
    #: the first rows of the fragment (kept from when it was written, or read by Spark)
    sample: pa.Table | None = None
    #: the site is a table view's: a column added to or dropped from its table is news
    #: (table_follow.py), but for those the view leaves out (its exclude_columns, held
    #: here); None: the site is not a table view's
    follows_table: tuple[str, ...] | None = None
    #: whether the site may be found unchanged by its change token (pipeline/change_token.py);
    #: False for an audit's full reads
    tokens: bool = True

    def __post_init__(self) -> None:
        sync = self.sync
        self.spark, self.options, self.progress = sync.spark, sync.options, sync.progress
        self.cancellation = sync.cancellation  # checked at each step, and it closes the agent client
        self.metrics = SiteMetrics(source=self.site.source)
        self.staging.mkdir(parents=True, exist_ok=True)
        endpoint = sync.endpoints[self.site.source]
        self.client = AgentClient(
            endpoint.url,
            endpoint.token,
            verify=endpoint.verify,
            read_timeout_s=self.options.agent_read_timeout_s,
            deadline_s=self.options.agent_deadline_s,
            cancellation=self.cancellation,
        )
        self.ctx = SiteContext(
            sync,
            self.index,
            self.site,
            self.client,
            self.staging,
            self.current,
            self.metrics,
            resume=ReadSoFar.beside(self.staging),  # what the sync's failed attempts at this site kept
        )
        #: what extract gave, once it has run (build_fragment reads it); None when the
        #: change token found the site unchanged (`probe`)
        self.extracted: Extracted | None = None
        #: the agent's change token, read before the site's reads (None: not asked)
        self.probe: Probe | None = None
        #: the columns of the tables the site query reads, once extract has run (source_columns.py)
        self.columns: source_columns.Seen | None = None
        #: what built the site's fragment: the sync's executor unless the fragment outgrew Arrow
        self.built_on = sync.executor

    @property
    def strategy(self) -> Strategy | None:
        """The strategy that ran this site's extraction (None before it was planned)."""
        return self.extracted.planned.strategy if self.extracted is not None else None

    def extract(self) -> Extracted | None:
        """Run the extraction steps against the site's agent, in order, timing each; None
        when the change token finds the site unchanged."""
        self.metrics.extract_started_at = _utcnow()
        extracted = None
        try:
            self.probe, extracted = self._steps()
            kept = source_columns.load(self.current.site_dir(self.index) if self.current is not None else None)
            self.columns, noticed = source_columns.observe(self.client, self.site, kept)
            self.metrics.schema_changes = noticed or None
            if self.follows_table is not None and self.columns is not None:
                table_follow.check(self.site, self.columns, self.follows_table)
        finally:
            self.client.close()
            for name, value in self.traffic().items():
                setattr(self.metrics, name, value)
            calls = self.client.counter.calls
            self.metrics.calls = [c.to_json() for c in calls]
            self.metrics.body_bytes_to_agent = sum(c.body_to_agent for c in calls)
            self.metrics.body_bytes_from_agent = sum(c.body_from_agent for c in calls)
            self.metrics.extract_finished_at = _utcnow()
        self.extracted = extracted
        return extracted

    def _steps(self) -> tuple[Probe | None, Extracted | None]:
        """change token → project snapshot → plan groups → exchange units → regroup; the
        agent's answer to the token, and what the steps gave (None: the token proved that
        nothing changed, and the steps after it did not run).

        The token goes on its own first, unless the statistics expect changes
        (change_token.rides): then it rides on the exchange's first request. Where the chosen
        strategy's first request cannot carry it, it goes on its own once the strategy is
        chosen, before its plan (group_hash's plan is most of a small sync's work); where the
        plan itself hands the site to such an exchange (a sketch's fall-back), after it. Both
        before any read.
        """
        token, recorded = self._timed("change_token", self.change_token)
        if isinstance(token, Probe) and token.unchanged:
            return token, None
        projected = self._timed("project_snapshot", self.project_snapshot)
        planned = self._timed("plan_groups", self.plan_groups, projected, recorded)
        strategy = planned.strategy
        token = self._alone(token, strategy)  # where the chosen strategy cannot carry it
        if isinstance(token, Probe) and token.unchanged:
            return token, None
        self._timed("plan_groups", strategy.plan)  # the step's second part: its time adds to the first's
        token = self._alone(token, strategy)  # where the plan handed the site to an exchange that cannot
        if isinstance(token, Probe) and token.unchanged:
            return token, None
        if isinstance(token, Riding):
            answer, token = self._timed("exchange_units", self.exchange_carrying, strategy, token.since)
            if token.unchanged:
                return token, None
        else:
            answer = self._timed("exchange_units", self.exchange_units, strategy)
        answer = self._timed("regroup", self.regroup, strategy, answer)
        return token, Extracted(planned, answer)

    def _timed(self, step: str, run: Callable[..., T], *args: Any) -> T:
        """Run one step, reporting that it started and recording its wall time under its name."""

        def announce() -> None:
            self.progress({"phase": step, "site": self.index, **self.sync.traffic()})

        return timed_phase(
            step, run, args, check=self.cancellation.check, announce=announce, phases=self.metrics.phases
        )

    def traffic(self) -> dict:
        c = self.client.counter
        return {"bytes_to_agent": c.sent, "bytes_from_agent": c.received, "round_trips": c.requests}

    # -- steps -------------------------------------------------------------------------
    def change_token(self) -> tuple[Probe | Riding, Recorded | None]:
        """Ask the agent whether anything changed since the version synced from, by its change
        token (the one kept with that version, if read for this site query); or, where the
        statistics expect changes, keep the token for the exchange's first request (Riding).
        With the statistics, when they were read to decide it (planning takes them)."""
        spec = self.ctx.spec()
        kept = change_token.load(self.current.site_dir(self.index)) if self.current is not None else None
        probe = change_token.known_none(kept, spec, time.time())
        if probe is not None:
            return self._noted(probe), None
        since = change_token.since(kept, spec) if self.tokens else None
        if since is None:
            return self._ask(since), None
        recorded = self._recorded()
        # the cost model plays no part in the changes expected
        estimate = self._estimate(recorded, costs.FALLBACK) if recorded is not None else None
        if estimate is not None and change_token.rides(estimate.changes, estimate.observed):
            return Riding(since), recorded
        return self._ask(since), recorded

    def _alone(self, token: Probe | Riding, strategy: Strategy) -> Probe | Riding:
        """`token`, asked on its own now if it was to ride on a first request that, as
        `strategy` stands, cannot carry it."""
        if isinstance(token, Riding) and not strategy.carries_token():
            return self._timed("change_token", self._ask, token.since)
        return token

    def _ask(self, since: str | None) -> Probe:
        """The token asked on its own (POST /v1/change_token), whether it is `since`."""
        return self._noted(change_token.probe(self.client, self.ctx.spec(), since))

    def _noted(self, probe: Probe) -> Probe:
        """`probe`, its answer noted in the site's metrics."""
        self.metrics.unchanged_by_token = probe.unchanged if probe.token is not None else None
        self.metrics.change_token_reason = probe.reason
        return probe

    def _recorded(self) -> Recorded | None:
        """The statistics the current version keeps of the site (None: a load)."""
        if self.current is None:
            return None
        site_dir = self.current.site_dir(self.index)
        return Recorded(update_counts.load(site_dir), read_deletions(self.current, self.index))

    def project_snapshot(self) -> Projected:
        """The stored fragment (the snapshot of the site query) with its update statistics columns,
        as a Spark frame made when a step needs it, and its layers."""
        if self.current is None:
            return Projected()
        return Projected(
            partial(layers.frame, self.spark, self.current, self.index, self.site.columns, self.site.key),
            layers.Layers.load(self.current.site_dir(self.index)),
        )

    def plan_groups(self, projected: Projected, recorded: Recorded | None = None) -> Planned:
        """Measure the cost model and the statistics (`recorded`, if read already), and
        choose the strategy; its plan of what to send (`Strategy.plan`) is the step's second
        part, which the change token may precede (`_steps`)."""
        faults.checkpoint(faults.PLANNING)
        cost = self._cost_model(projected)
        if projected.read is None or self.current is None:
            snapshot = Snapshot(cost=cost)
            strategy = STRATEGIES[self.options.strategy].create_load(self.ctx, snapshot) or LOAD(self.ctx, snapshot)
            planned = Planned(strategy, snapshot)
        else:
            recorded = recorded if recorded is not None else self._recorded()
            assert recorded is not None, "a current version keeps statistics"
            snapshot, deletion_rows = self._statistics(projected.read, cost, recorded, self.current)
            self.metrics.expected_bytes = expected_bytes(snapshot.statistics, self.ctx)
            strategy = STRATEGIES[self.options.strategy].create(self.ctx, snapshot)
            planned = Planned(strategy, snapshot, projected.current_layers, recorded.hist, deletion_rows)
        return planned

    def exchange_units(self, strategy: Strategy) -> Answer:
        """Send what the strategy planned; file the agent's answer."""
        return strategy.exchange()

    def exchange_carrying(self, strategy: Strategy, since: str) -> tuple[Answer, Probe]:
        """Send what the strategy planned, its first request carrying the change token kept
        (`since`); file the agent's answer, and say its answer to the token."""
        asked_at = time.time()
        self.metrics.token_rode = True
        answer = strategy.exchange_carrying(since)
        return answer, self._noted(change_token.answered(answer.change_token, asked_at))

    def regroup(self, strategy: Strategy, answer: Answer) -> Answer:
        """Any further round the answer calls for (the group-hash method's regroup)."""
        return strategy.follow_up(answer)

    # -- planning's parts ----------------------------------------------------------------
    def _cost_model(self, projected: Projected) -> CostModel:
        """The bytes of a tuple, a key and a group hash as encoded, of this site's rows: measured on the view's sample, kept
        with the current base, or measured on the fragment (assumed before a load)."""
        # the sizes measured for the base, still current
        kept = projected.current_layers.cost if projected.current_layers is not None else None
        if self.sample is not None and self.sample.num_rows >= costs.MIN_SAMPLE_ROWS and projected.read is not None:
            # uniform, where the kept figures were measured on the first rows of a fragment
            cost, measured_on = costs.measure_sample(self.sample, self.site, self.options.hash_bits), "sample"
        elif kept:
            cost, measured_on = CostModel(**kept), "kept"
        elif projected.read is not None and self.sync.executor == ARROW:  # read with Arrow (warehouse/executor.py)
            assert self.current is not None, "a stored fragment follows the load"
            cost = self._measured(layers.table(self.current, self.index, self.site.columns, self.site.key))
            measured_on = "fragment"
        elif projected.read is not None:
            cost, measured_on = self._measured(projected.read()), "fragment"
        else:
            cost, measured_on = costs.FALLBACK, "assumed"
        self.metrics.cost_model = {
            "tuple_bytes": round(cost.tuple_bytes, 2),
            "key_bytes": round(cost.key_bytes, 2),
            "hash_bytes": round(cost.hash_bytes, 2),
            "measured_on": measured_on,
        }
        return cost

    def _measured(self, fragment: DataFrame | pa.Table) -> CostModel:
        """The sizes measured on a fragment's first rows in key order (wire_sizes.py), the
        same rows on either executor (they size group_hash's groups, which reach the wire):
        an Arrow table's sorted here, a Spark frame's taken in order on the executors."""
        key, bits = self.site.key, self.options.hash_bits
        if isinstance(fragment, pa.Table):
            first = fragment.take(pc.sort_indices(fragment, sort_keys=ascending(key))[: costs.SAMPLE_ROWS])
            return costs.measure_sample(first, self.site, bits)
        return costs.measure(fragment.orderBy(*key), self.site, bits)

    def _statistics(
        self, read: Callable[[], DataFrame], cost: CostModel, recorded: Recorded, current: Version
    ) -> tuple[Snapshot, tuple[tuple, ...]]:
        """The snapshot a strategy plans from, with update statistics and the deletion statistics' prediction for this sync;
        and the deletion statistics' rows, which the next version keeps."""
        estimate = self._estimate(recorded, cost)
        self.metrics.rows_before = estimate.rows
        observed = (recorded.totals.observations, recorded.totals.updates)
        table = partial(layers.table, current, self.index, self.site.columns, self.site.key)
        snapshot = Snapshot(cost, read, estimate, observed, recorded.history, table)
        return snapshot, tuple(tuple(r.values()) for r in recorded.deletions)

    def build_fragment(self, staged: Version) -> DeltaResult | TouchedDelta:
        """Compare returned rows with the snapshot tuple by tuple; stage the next fragment.

        When the strategy vouches for every key it did not touch, only the touched tuples
        are compared and, if the overlay keeps room for the ones that changed, the fragment
        grows an overlay (layers.py); otherwise every tuple is, and the fragment is written
        whole.
        Returns the classified tuples (the caller releases them) with counts.
        """
        if self.extracted is None:
            return self._build_unchanged(staged)
        planned, answer = self.extracted.planned, self.extracted.answer
        build = planned.strategy.fragment_build()
        what = f"{self.site.where()} at source {self.site.source!r} (site query of view {self.sync.view_name!r})"
        m = self.metrics
        t0 = time.monotonic()
        touched_rows = answer.touched_rows
        result: DeltaResult | TouchedDelta | None = None
        if build is FragmentBuild.TOUCHED and self._touched_only(planned, answer):
            returned, deleted = self._answer_tables(answer, what)
            if touched_rows is None:  # unless the strategy read them already
                touched_rows = self._read_touched(planned.snapshot, returned, deleted)
            result = self._build_overlay(staged, planned, returned, deleted, touched_rows)
        if result is not None:
            m.fragment_written = "overlay"
        else:
            if self._on_driver(build, answer):
                result = self._build_on_driver(staged, build, self._answer_tables(answer, what))
            else:  # outgrew the Arrow executor, if it was on it: the rest of the sync is Spark's
                self.built_on = SPARK
                result = self._build_whole(staged, planned, answer, what)
            m.fragment_written, m.overlay_rows = "whole", 0
        try:
            self._stage_common(staged, planned, Built(result, touched_rows))
            if self.columns is not None:
                source_columns.save(staged.site_dir(self.index), self.columns)
        except BaseException:
            result.release()
            raise
        self._keep_token(staged)
        m.phases["build_fragment"] = round(time.monotonic() - t0, 3)
        m.fragment_inserted, m.fragment_updated, m.fragment_deleted = result.inserted, result.updated, result.deleted
        m.rows_after = result.inserted + result.updated + result.kept
        m.full_ship_estimate_bytes = round(planned.snapshot.cost.tuple_bytes * m.rows_scanned)
        return result

    def _build_unchanged(self, staged: Version) -> TouchedDelta:
        """The change token found nothing changed: the fragment and all the strategies keep
        carried over as after an empty delta (store/carried.py), and the token kept again."""
        assert self.current is not None and self.probe is not None and self.probe.unchanged, "a token follows a version"
        m = self.metrics
        t0 = time.monotonic()
        result = carried.carry(self.current, staged, self.index, self.site.columns, self.site.key)
        self._keep_token(staged)
        m.phases["build_fragment"] = round(time.monotonic() - t0, 3)
        m.rows_before = m.rows_after = result.before
        m.fragment_inserted = m.fragment_updated = m.fragment_deleted = 0
        now = layers.Layers.load(staged.site_dir(self.index))
        m.fragment_written, m.overlay_rows = "carried", now.overlay_rows() if now is not None else 0
        if now is not None and now.cost:
            m.full_ship_estimate_bytes = round(now.cost["tuple_bytes"] * result.before)
        return result

    def _keep_token(self, staged: Version) -> None:
        """Keep the token read before this sync's reads with the new version, unless a read
        resumed from rows received before it (a failed attempt's); or the agent's answer that
        it gives none, with the time it gave it."""
        probe = self.probe
        if probe is None or (probe.token is not None and self.metrics.resumed_from_rows):
            return
        kept = change_token.keep(probe, self.ctx.spec())
        if kept is not None:
            change_token.save(staged.site_dir(self.index), kept)

    def _touched_only(self, planned: Planned, answer: Answer) -> bool:
        """Whether this sync may compare the touched tuples only (and perhaps write an overlay).

        The touched tuples are compared on the driver, so no more of them than the base holds;
        a strategy that ships unchanged rows too (group_hash's changed units) may touch many
        more tuples than change, so the room in the overlay is checked on what did change."""
        if self.current is None:
            return False
        touched = _returned_rows(answer)
        touched += pq.read_metadata(answer.deleted).num_rows if answer.deleted is not None else 0
        return touched <= self._current_layers(planned).base_rows

    def _answer_tables(self, answer: Answer, what: str) -> tuple[pa.Table, pa.Table]:
        """The answer's rows (site columns, their key unique) and deleted keys, in Arrow."""
        columns, key = self.site.columns, self.site.key
        rows_schema = arrow_schema(columns)
        returned = pa.concat_tables(
            [parquet_files.read(p).select(rows_schema.names).cast(rows_schema) for p in answer.returned]
            or [rows_schema.empty_table()]
        )
        check_unique(returned, key, what)
        key_schema = self.site.key_schema()
        if answer.deleted is None:
            return returned, key_schema.empty_table()
        return returned, parquet_files.read(answer.deleted).select(key).cast(key_schema)

    def _current_layers(self, planned: Planned) -> layers.Layers:
        """The current version's layers (a fragment written whole has a base and no overlay)."""
        return planned.current_layers or layers.whole(self.metrics.rows_before)

    def _on_driver(self, build: FragmentBuild, answer: Answer) -> bool:
        """Whether the whole fragment may be compared and written with Arrow: the sync's
        executor is Arrow, its old and new rows together fit under small_sync_rows
        (warehouse/executor.py), and the answer says what became of every key it left out."""
        if self.current is not None and build is FragmentBuild.WHOLE:
            return False
        return self.sync.arrow_fits((self.metrics.rows_before or 0) + _returned_rows(answer))

    def on_arrow(self) -> bool:
        """Whether every step of this site ran on Arrow (its fragment, if built whole, fit under
        small_sync_rows)."""
        return self.sync.executor == ARROW and self.built_on == ARROW

    def _build_on_driver(
        self, staged: Version, build: FragmentBuild, answer_tables: tuple[pa.Table, pa.Table]
    ) -> TouchedDelta:
        """The whole-fragment build in Arrow: every stored row is a touched one. Untouched
        keys are unchanged when the strategy vouches for them, else gone (a full read)."""
        key, i = self.site.key, self.index
        stored = stored_schema(self.site.columns)
        returned, deleted = answer_tables
        key_schema = deleted.schema
        old = (
            layers.table(self.current, i, self.site.columns, key) if self.current is not None else stored.empty_table()
        )
        if self.current is not None and build is FragmentBuild.UNTOUCHED_GONE:
            unseen = old.select(key).join(returned.select(key), key, join_type="left anti")
            deleted = pa.concat_tables([deleted, unseen.cast(key_schema)])
        result = classify(old, returned, deleted, self.site.columns, key, self.metrics.rows_before or 0)
        kept = old.join(result.left.select(key).cast(key_schema), key, join_type="left anti").select(stored.names)
        kept = kept.set_column(kept.schema.get_field_index(TNO), TNO, pc.add(kept.column(TNO), 1))
        fragment = pa.concat_tables([kept, result.changed.drop_columns([OP]).cast(stored)])
        site_dir = staged.site_dir(i)
        layers.write_part(fragment, staged.fragment(i), key)
        # a whole fragment is a base without an overlay: its sizes, measured here, serve until it is rewritten
        cost = self._measured(fragment) if fragment.num_rows else None
        layers.Layers(fragment.num_rows, 0, 0, 0, asdict(cost) if cost else None).save(site_dir)
        update_counts.save(update_counts.of_table(fragment), site_dir)
        return result

    def _build_whole(self, staged: Version, planned: Planned, answer: Answer, what: str) -> DeltaResult:
        """The whole-fragment build by Spark: the answer compared with every stored tuple."""
        inputs = planned.strategy.delta_inputs(answer)
        check_unique(inputs.returned, self.site.key, what)
        snapshot = (
            planned.snapshot.frame
            if planned.snapshot.frame is not None
            else self.spark.createDataFrame([], layers.stored_ddl(self.site.columns))
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
            key_ranges.write_frame(fragment, self.site.key, staged.fragment(self.index))
            site_dir = staged.site_dir(self.index)
            update_counts.save(update_counts.of_frame(fragment), site_dir)
            # as the Arrow build does: the sizes of the fragment written, kept until it is rewritten
            written = self.spark.read.schema(layers.stored_ddl(self.site.columns)).parquet(
                str(staged.fragment(self.index))
            )
            rows = result.inserted + result.updated + result.kept
            cost = self._measured(written) if rows else None
            layers.Layers(rows, 0, 0, 0, asdict(cost) if cost else None).save(site_dir)
        except BaseException:
            result.release()
            raise
        return result

    def _read_touched(self, snapshot: Snapshot, returned: pa.Table, deleted: pa.Table) -> pa.Table:
        """The stored rows (with update statistics) of the keys the answer returned or deleted, timed as `read_touched`."""
        key = self.site.key
        t0 = time.monotonic()
        if not returned.num_rows and not deleted.num_rows:  # a compare that found nothing reads nothing
            return stored_schema(self.site.columns).empty_table()
        keys = pa.concat_tables([returned.select(key), deleted])
        rows = self.ctx.stored_rows(keys.group_by(key).aggregate([]), snapshot)
        self.metrics.phases["read_touched"] = round(time.monotonic() - t0, 3)
        return rows

    def _build_overlay(
        self, staged: Version, planned: Planned, returned: pa.Table, deleted: pa.Table, touched_rows: pa.Table
    ) -> TouchedDelta | None:
        """The delta from the touched tuples; the next fragment as the current base with a
        grown overlay (and the offset of syncs seen one further). None, with nothing staged, when the
        overlay would pass its share of the base: the fragment is then written whole."""
        key, i = self.site.key, self.index
        assert self.current is not None and planned.update_hist is not None, "an overlay grows on a current version"
        key_schema = deleted.schema
        result = classify(touched_rows, returned, deleted, self.site.columns, key, self.metrics.rows_before)
        current = self._current_layers(planned)
        offset = current.tno_offset + 1
        stored = stored_schema(self.site.columns)
        now = result.changed.drop_columns([OP])
        now = now.set_column(now.schema.get_field_index(TNO), TNO, pc.subtract(now.column(TNO), offset))
        site_dir = staged.site_dir(i)
        if not result.left.num_rows and not now.num_rows:  # nothing changed: the overlay is the current one
            grown = layers.Layers(
                current.base_rows, current.upsert_rows, current.removed_rows, offset, asdict(planned.snapshot.cost)
            )
            layers.link_files(self.current.fragment(i), staged.fragment(i))
            layers.link_overlay(self.current.site_dir(i), site_dir, grown)
        else:
            upserts, removed = layers.grown(self.current.site_dir(i), current, stored, key_schema, result.left, now)
            grown = layers.Layers(
                current.base_rows, upserts.num_rows, removed.num_rows, offset, asdict(planned.snapshot.cost)
            )
            if not grown.room_for(0):
                result.release()
                return None
            layers.link_files(self.current.fragment(i), staged.fragment(i))
            layers.write_overlay(site_dir, upserts, removed, grown, key)
        self.metrics.overlay_rows = grown.overlay_rows()
        hist_next = update_counts.advanced(
            planned.update_hist, update_counts.pairs(result.left), update_counts.pairs(result.changed)
        )
        update_counts.save(hist_next, site_dir)
        return result

    def _stage_common(self, staged: Version, planned: Planned, built: Built) -> None:
        """What every new version of a site holds besides its fragment: deletion statistics and the
        strategy's own state."""
        result = built.result
        rows = [*planned.deletion_rows, (staged.sync_id, result.before, result.deleted, result.inserted)]
        table = pa.table(list(map(list, zip(*rows, strict=True))), schema=DELETIONS_SCHEMA)
        layers.write_part(table, staged.deletions(self.index))
        planned.strategy.stage(staged, built)

    # -- helpers -----------------------------------------------------------------------
    def _estimate(self, recorded: Recorded, cost: CostModel) -> SiteEstimate:
        """The statistics' prediction for this sync: updates (Σ P(update t) and its spread),
        deletion probability, inserts per sync."""
        totals = recorded.totals
        obs, upd = totals.observations, totals.updates
        prior = planning.site_prior(obs, upd, self.options.default_prior)
        if self.options.prior_mode == "paper":
            prior = 1.0  # updates seen / syncs seen = (updates seen - 1 + 1) / syncs seen
        updates, squares = totals.expected_updates(prior)
        n = totals.tuples
        inserts = recorded.inserts
        p_delete = planning.deletion_probability(recorded.history)
        return SiteEstimate(
            n,
            updates / n if n else 0.0,
            p_delete,
            cost,
            self.options.hash_bits,
            updates=updates,
            updates_variance=max(0.0, updates - squares),
            inserts=math.nan if inserts is None else inserts,
            observed=obs > 0,
        )


def _returned_rows(answer: Answer) -> int:
    """Rows the answer returned (from the files' footers)."""
    return sum(pq.read_metadata(p).num_rows for p in answer.returned)
