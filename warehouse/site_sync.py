"""The per-site part of a sync: one site query, its fragment, its statistics.

project snapshot → plan groups → exchange units (send units, receive changes) → regroup
run against the site's agent, each step handing over to the view's strategy
(`strategies/`); `build_fragment` then compares what came back with the stored fragment
and stages the next fragment with its ω± and ω−. A view over several sites runs one
`SiteRun` per site (their extractions side by side) before it assembles the view (see
`sync.py`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from . import costs, planning
from .agent_client import AgentClient
from .delta import DeltaResult, build_delta, check_unique
from .metrics import SiteMetrics
from .options import SyncOptions
from .storage import TNO, UNO, Version
from .strategies import LOAD, STRATEGIES, SiteContext, SiteEstimate, expected_bytes
from .strategies.base import Answer, spark_schema
from .viewdef import SiteQuery

SYNC_COLUMN = "__sync"
#: ω− per sync: tuples before, deleted, inserted (ino is absent, so NULL, in versions
#: written before it was kept).
DELETIONS_SCHEMA = f"{SYNC_COLUMN} string, tno bigint, dno bigint, ino bigint"


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
        )
        self.strategy = None
        self.answer: Answer | None = None
        #: ω− rows of the current version, read once while planning (none before the load).
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
        """Read the stored fragment (the snapshot φ' of the site query) with its ω± columns."""
        if self.current is not None:
            schema = spark_schema(self.site.columns) + f", {TNO} bigint, {UNO} bigint"
            self.ctx.snapshot = self.spark.read.schema(schema).parquet(str(self.current.fragment(self.index)))

    def plan_groups(self) -> None:
        """Measure the cost model and the statistics, then let the strategy plan what to send."""
        ctx = self.ctx
        ctx.cost = costs.measure(ctx.snapshot, self.site, self.options.hash_bits)
        self.metrics.cost_model = {
            "tuple_bytes": round(ctx.cost.tuple_bytes, 2),
            "key_bytes": round(ctx.cost.key_bytes, 2),
            "hash_bytes": round(ctx.cost.hash_bytes, 2),
        }
        if ctx.snapshot is None:
            self.strategy = LOAD(ctx)
        else:
            tno, upd = F.col(TNO).cast("double"), (F.col(UNO) - 1).cast("double")
            totals = ctx.snapshot.agg(
                F.count(F.lit(1)).alias("n"),
                F.sum(F.col(TNO) - 1).alias("obs"),
                F.sum(F.col(UNO) - 1).alias("upd"),
                # the moments of P(update t) = (uno - 1 + prior) / tno, whatever the prior
                F.sum(upd / tno).alias("a"),
                F.sum(1 / tno).alias("b"),
                F.sum(upd * upd / (tno * tno)).alias("c"),
                F.sum(upd / (tno * tno)).alias("e"),
                F.sum(1 / (tno * tno)).alias("f"),
            ).collect()[0]
            self.metrics.rows_before = totals["n"]
            ctx.observed = (totals["obs"] or 0, totals["upd"] or 0)
            history = self._deletions(self.current).collect()
            self.deletion_rows = [tuple(r) for r in history]
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

    def build_fragment(self, staged: Version) -> DeltaResult:
        """Compare returned rows with the snapshot tuple by tuple; stage the next fragment.

        Returns the classified tuples (persisted; the caller releases them) with counts.
        """
        inputs = self.strategy.delta_inputs(self.answer)
        check_unique(
            inputs.returned,
            self.site.key,
            f"{self.site.where()} at source {self.site.source!r} (site query of view {self.view_name!r})",
        )
        snapshot = (
            self.ctx.snapshot
            if self.ctx.snapshot is not None
            else self.spark.createDataFrame([], spark_schema(self.site.columns) + f", {TNO} bigint, {UNO} bigint")
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
            result.fragment(self.site.columns).write.parquet(str(staged.fragment(self.index)))
            row = (staged.sync_id, result.before, result.deleted, result.inserted)
            rows = self.spark.createDataFrame([*self.deletion_rows, row], DELETIONS_SCHEMA)
            rows.coalesce(1).write.parquet(str(staged.deletions(self.index)))
            self.strategy.stage(staged)
        except BaseException:
            result.release()
            raise
        m = self.metrics
        m.fragment_inserted, m.fragment_updated, m.fragment_deleted = result.inserted, result.updated, result.deleted
        m.rows_after = result.inserted + result.updated + result.kept
        m.full_ship_estimate_bytes = round(self.ctx.cost.tuple_bytes * m.rows_scanned)
        return result

    # -- helpers -----------------------------------------------------------------------
    def _estimate(self, totals, inserts: float | None) -> SiteEstimate:
        """The statistics' prediction for this sync: updates (Σ P(update t) and its spread),
        deletion probability, inserts per sync."""
        obs, upd = self.ctx.observed
        prior = planning.site_prior(obs, upd, self.options.default_prior)
        if self.options.prior_mode == "paper":
            prior = 1.0  # P = uno / tno = (uno - 1 + 1) / tno
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

    def _deletions(self, version: Version | None) -> DataFrame:
        if version is None or not version.deletions(self.index).exists():
            return self.spark.createDataFrame([], DELETIONS_SCHEMA)
        return self.spark.read.schema(DELETIONS_SCHEMA).parquet(str(version.deletions(self.index)))
