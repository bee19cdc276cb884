"""The per-site part of a sync: one site query, its fragment, its statistics.

project snapshot → plan groups → exchange units (send units, receive changes) → regroup
run against the site's agent; `build_fragment` then compares what came back with the
stored fragment and stages the next fragment with its ω± and ω−. A view over several
sites runs one `SiteRun` per site (their extractions side by side) before it assembles
the view (see `sync.py`).
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession, functions as F

from remote_agent.protocol import frames
from remote_agent.protocol.encoding import DEFAULT_HASH_BITS, combine, hash_from_bytes
from remote_agent.protocol.models import ExtractControl, FetchControl, SiteSpec
from remote_agent.protocol.types import Column, arrow_schema
from remote_agent.protocol.wire import COUNT, HASH, UID as WIRE_UID

from . import costs, planning
from . import faults
from .agent_client import DEADLINE_S, READ_TIMEOUT_S, AgentClient
from .delta import DeltaResult, build_delta, check_unique
from .errors import SourceDataError
from .grouping import BENEFIT, GROUP_HASH, GROUP_SIZE, ROW_HASH, UID, plan_groups
from .hashing import spark_row_hashes
from .range_checksum import bisect_ranges, keys_outside
from .storage import TNO, UNO, Version
from .viewdef import SiteQuery

STRATEGIES = ("group_hash", "tuple_hash", "range_checksum", "full_ship")
#: Width of the per-tuple hashes of the tuple_hash strategy (000's ⟨K, b⟩ with b = 64).
TUPLE_HASH_BITS = 64
#: Rows per Arrow frame sent to the agent.
SEND_BATCH_ROWS = 65_536
SYNC_COLUMN = "__sync"


@dataclass
class SyncOptions:
    strategy: str = "group_hash"
    hash_bits: int = DEFAULT_HASH_BITS
    #: "site": Beta prior at the site's observed update rate; "paper": uno/tno as published.
    prior_mode: str = "site"
    #: Update probability assumed before any update has been observed.
    default_prior: float = 0.05
    plan_partitions: int = 0  # 0: Spark's default parallelism
    grouping: str = planning.DEFAULT_GROUPING
    batch_rows: int = 16_384
    #: Seconds without a byte from the agent before a call fails.
    agent_read_timeout_s: float = READ_TIMEOUT_S
    #: Seconds one call to the agent may take in all.
    agent_deadline_s: float = DEADLINE_S
    #: Extra attempts at a site's extraction after a transient failure (link, timeout, cut answer).
    agent_retries: int = 2
    #: Wait before the first retry; doubled before each next one.
    agent_retry_backoff_s: float = 2.0
    #: Also read every site query in full and report where the result differs (audit mode).
    verify: bool = False


@dataclass
class Endpoint:
    """Where a source's agent answers."""

    name: str
    url: str
    token: str | None = None
    verify: object = True


def _utcnow() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def spark_schema(columns: list[Column]) -> str:
    return ", ".join(f"`{c.name}` {c.type.spark_ddl()}" for c in columns)


def new_site_metrics() -> dict:
    return {
        "bytes_to_agent": 0,
        "bytes_from_agent": 0,
        "round_trips": 0,
        "groups_sent": 0,
        "groups_identical": 0,
        "groups_changed": 0,
        "groups_regrouped": 0,
        "groups_regrouped_changed": 0,
        "tuples_grouped": 0,
        "tuples_ungrouped": 0,
        "rows_scanned": 0,
        "rows_received": 0,
        "rows_before": 0,
        "rows_after": 0,
        "phases": {},
    }


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
        self.metrics = new_site_metrics()
        self.metrics["source"] = self.site.source
        self.snapshot: DataFrame | None = None
        self.planned = False
        self.tuple_mode = False
        self.range_mode = False
        self.staging.mkdir(parents=True, exist_ok=True)
        self.client = AgentClient(self.endpoint.url, self.endpoint.token, verify=self.endpoint.verify, read_timeout_s=self.options.agent_read_timeout_s, deadline_s=self.options.agent_deadline_s)

    def extract(self) -> None:
        """Run the extraction steps against the site's agent, timing each."""
        self.metrics["extract_started_at"] = _utcnow()
        try:
            for step in self.EXTRACT_STEPS:
                self.progress({"phase": step, "site": self.index, **self.traffic()})
                t0 = time.monotonic()
                getattr(self, step)()
                self.metrics["phases"][step] = round(time.monotonic() - t0, 3)
        finally:
            self.client.close()
            self.metrics.update(self.traffic())
            self.metrics["extract_finished_at"] = _utcnow()

    def traffic(self) -> dict:
        c = self.client.counter
        return {"bytes_to_agent": c.sent, "bytes_from_agent": c.received, "round_trips": c.requests}

    # -- steps -------------------------------------------------------------------------
    def project_snapshot(self) -> None:
        """Read the stored fragment (the snapshot φ' of the site query) with its ω± columns."""
        if self.current is not None:
            schema = spark_schema(self.site.columns) + f", {TNO} bigint, {UNO} bigint"
            self.snapshot = self.spark.read.schema(schema).parquet(str(self.current.fragment(self.index)))

    def plan_groups(self) -> None:
        """Choose groups of stable tuples (Algorithm 1 corrected) and hash them on the executors."""
        self.cost = costs.measure(self.snapshot, self.site, self.options.hash_bits)
        self.metrics["cost_model"] = {"tuple_bytes": round(self.cost.tuple_bytes, 2), "key_bytes": round(self.cost.key_bytes, 2), "hash_bytes": round(self.cost.hash_bytes, 2)}
        if self.snapshot is None:
            return
        totals = self.snapshot.agg(F.count(F.lit(1)).alias("n"), F.sum(F.col(TNO) - 1).alias("obs"), F.sum(F.col(UNO) - 1).alias("upd")).collect()[0]
        self.metrics["rows_before"] = totals["n"]
        if self.options.strategy == "full_ship":
            self.metrics["tuples_ungrouped"] = totals["n"]
            return
        if self.options.strategy == "range_checksum":
            hashed = spark_row_hashes(self.snapshot, self.site.columns, self.site.key, self.seed, self.options.hash_bits)
            hashed.orderBy(*self.site.key).write.parquet(str(self.staging / "sorted"))
            self.range_mode = True
            return
        if self.options.strategy == "tuple_hash":
            hashed = spark_row_hashes(self.snapshot, self.site.columns, self.site.key, self.seed, TUPLE_HASH_BITS)
            hashed.write.parquet(str(self.staging / "tuples"))
            self.tuple_mode = True
            self.metrics["tuples_grouped"] = totals["n"]
            return
        prior = None if self.options.prior_mode == "paper" else planning.site_prior(totals["obs"] or 0, totals["upd"] or 0, self.options.default_prior)
        history = [(r["tno"], r["dno"]) for r in self._deletions(self.current).collect()]
        p_delete = planning.deletion_probability(history)
        self.metrics["planning"] = {"prior": prior, "p_delete": p_delete, "grouping": self.options.grouping}
        partitions = self.options.plan_partitions or self.spark.sparkContext.defaultParallelism
        plan = plan_groups(self.snapshot, self.site.columns, self.site.key, prior=prior, p_delete=p_delete, cost=self.cost, seed=self.seed, bits=self.options.hash_bits, partitions=partitions, criterion=self.options.grouping)
        plan.write.parquet(str(self.staging / "plan"))
        self.planned = True
        stored = self.spark.read.parquet(str(self.staging / "plan"))
        s = stored.agg(
            F.sum(F.when(F.col(GROUP_HASH).isNotNull(), 1).otherwise(0)).alias("units"),
            F.sum(F.when(F.col(GROUP_HASH).isNull() & F.col(UID).isNotNull(), 1).otherwise(0)).alias("grouped"),
            F.sum(F.when(F.col(GROUP_HASH).isNull() & F.col(UID).isNull(), 1).otherwise(0)).alias("ungrouped"),
            F.sum(F.col(BENEFIT)).alias("benefit"),
        ).collect()[0]
        self.metrics.update(groups_sent=s["units"] or 0, tuples_grouped=s["grouped"] or 0, tuples_ungrouped=s["ungrouped"] or 0, expected_benefit_bytes=round(s["benefit"] or 0.0, 1))

    def exchange_units(self) -> None:
        """Send the units; receive new and ungrouped rows, deleted keys, broken and changed groups."""
        if self.range_mode:
            return self._exchange_ranges()
        control = ExtractControl(site=self._site_spec(), seed=self.seed, hash_bits=self.options.hash_bits, batch_rows=self.options.batch_rows, tuple_hash_bits=TUPLE_HASH_BITS)
        body = self._request_body(control)
        rows_schema = arrow_schema(self.site.columns)
        key_schema = arrow_schema(self._key_columns())
        with _Sink(self.staging / "returned.parquet", rows_schema) as returned, \
             _Sink(self.staging / "deleted.parquet", pa.schema([pa.field(WIRE_UID, pa.int64()), *key_schema])) as deleted, \
             _Sink(self.staging / "broken.parquet", pa.schema([pa.field(WIRE_UID, pa.int64()), pa.field(HASH, pa.binary(self.options.hash_bits // 8)), pa.field(COUNT, pa.int64())])) as broken:
            sinks = {frames.UNGROUPED_ROWS: returned, frames.CHANGED_ROWS: returned, frames.DELETED_KEYS: deleted, frames.BROKEN_UNITS: broken}
            for frame in self.client.exchange("/v1/extract", body):
                if frame.kind == frames.SUMMARY:
                    self.summary = frame.json()
                    continue
                sink = sinks.get(frame.kind)
                if sink is None:
                    continue  # a newer agent's extra frame kinds are ignored
                sink.write(frame.batch())
                self.progress({"phase": "exchange_units", "site": self.index, "rows_received": returned.rows, **self.traffic()})
                faults.checkpoint("exchange_units")
        self.metrics.update(
            rows_scanned=self.summary.get("rows_scanned", 0),
            rows_received=returned.rows,
            groups_identical=self.summary.get("units_identical", 0),
            groups_changed=self.summary.get("units_changed", 0),
            groups_regrouped=self.summary.get("units_broken", 0),
            agent_seconds=self.summary.get("elapsed_s"),
        )

    def _exchange_ranges(self) -> None:
        """The range-checksum strategy: bisect differing key ranges, ship the small ones."""
        key_cols = self._key_columns()
        key_schema = arrow_schema(key_cols)
        with _Sink(self.staging / "returned.parquet", arrow_schema(self.site.columns)) as returned:
            outcome = bisect_ranges(
                self.client, self._site_spec(), self.staging / "sorted", key_cols, self.metrics["rows_before"],
                seed=self.seed, bits=self.options.hash_bits, batch_rows=self.options.batch_rows, on_rows=returned.write,
            )
        with _Sink(self.staging / "verified.parquet", key_schema) as verified:
            for batch in keys_outside(self.staging / "sorted", key_cols, outcome.shipped):
                verified.write(batch)
        with _Sink(self.staging / "deleted.parquet", pa.schema([pa.field(WIRE_UID, pa.int64()), *key_schema])):
            pass
        with _Sink(self.staging / "broken.parquet", pa.schema([pa.field(WIRE_UID, pa.int64()), pa.field(HASH, pa.binary(self.options.hash_bits // 8)), pa.field(COUNT, pa.int64())])):
            pass
        self.metrics.update(
            rows_scanned=outcome.rows_scanned,
            rows_received=returned.rows,
            groups_sent=outcome.ranges_sent,
            range_rounds=outcome.rounds,
            ranges_shipped=len(outcome.shipped),
            tuples_ungrouped=sum(r.count for r in outcome.shipped),
            tuples_grouped=verified.rows,
        )

    def regroup(self) -> None:
        """Check the surviving part of every unit that lost tuples; re-fetch only those that changed."""
        broken = pq.read_table(self.staging / "broken.parquet")
        if broken.num_rows == 0:
            return
        reported = {uid: (hash_from_bytes(h), n) for uid, h, n in zip(broken.column(WIRE_UID).to_pylist(), broken.column(HASH).to_pylist(), broken.column(COUNT).to_pylist())}
        gone_table = pq.read_table(self.staging / "deleted.parquet")
        gone = set(_keys(gone_table, self.site.key))
        plan = ds.dataset(self.staging / "plan", format="parquet")
        members = plan.to_table(columns=[*self.site.key, UID, ROW_HASH], filter=pc.field(UID).isin(pa.array(list(reported), pa.int64())) & pc.field(ROW_HASH).is_valid())
        survivors: dict[int, list] = {}
        sums: dict[int, int] = {}
        for k, uid, rh in zip(_keys(members, self.site.key), members.column(UID).to_pylist(), members.column(ROW_HASH).to_pylist()):
            if k in gone:
                continue
            survivors.setdefault(uid, []).append(k)
            sums[uid] = sums.get(uid, 0) + hash_from_bytes(rh)
        bits = self.options.hash_bits
        changed = [uid for uid, (h, n) in reported.items() if n and (combine([sums.get(uid, 0)], bits) != h or len(survivors.get(uid, ())) != n)]
        self.metrics["groups_regrouped_changed"] = len(changed)
        if not changed:
            return
        keys = [k for uid in changed for k in survivors.get(uid, [])]
        key_table = _key_table(keys, self._key_columns())
        control = FetchControl(site=self._site_spec(), batch_rows=self.options.batch_rows)

        def body() -> Iterator[bytes]:
            yield frames.json_frame(frames.CONTROL, control.model_dump())
            for batch in key_table.to_batches(max_chunksize=SEND_BATCH_ROWS):
                yield frames.arrow_frame(frames.FETCH_KEYS, batch)

        with _Sink(self.staging / "refetched.parquet", arrow_schema(self.site.columns)) as sink:
            for frame in self.client.exchange("/v1/fetch", body()):
                if frame.kind == frames.ROWS:
                    sink.write(frame.batch())
        self.metrics["rows_received"] += sink.rows

    def build_fragment(self, staged: Version) -> DeltaResult:
        """Compare returned rows with the snapshot tuple by tuple; stage the next fragment.

        Returns the classified tuples (persisted; the caller releases them) with counts.
        """
        schema = spark_schema(self.site.columns)
        paths = [str(self.staging / "returned.parquet")]
        if (self.staging / "refetched.parquet").exists():
            paths.append(str(self.staging / "refetched.parquet"))
        returned = self.spark.read.schema(schema).parquet(*paths)
        check_unique(returned, self.site.key, f"{self.site.where()} at source {self.site.source!r} (site query of view {self.view_name!r})")
        key_schema = spark_schema(self._key_columns())
        deleted = self.spark.read.schema(key_schema).parquet(str(self.staging / "deleted.parquet"))
        if self.planned:
            plan = self.spark.read.parquet(str(self.staging / "plan"))
            grouped = plan.filter(F.col(UID).isNotNull() & F.col(GROUP_HASH).isNull()).select(*self.site.key)
        elif self.tuple_mode:
            grouped = self.spark.read.parquet(str(self.staging / "tuples")).select(*self.site.key)
        elif self.range_mode:
            grouped = self.spark.read.schema(key_schema).parquet(str(self.staging / "verified.parquet"))
        else:
            grouped = deleted.limit(0)
        snapshot = self.snapshot if self.snapshot is not None else self.spark.createDataFrame([], spark_schema(self.site.columns) + f", {TNO} bigint, {UNO} bigint")
        result = build_delta(snapshot, self.site.columns, self.site.key, grouped_keys=grouped, returned=returned, deleted_keys=deleted)
        try:
            result.fragment(self.site.columns).write.parquet(str(staged.fragment(self.index)))
            history = self._deletions(self.current)
            row = self.spark.createDataFrame([(staged.sync_id, result.before, result.deleted)], f"{SYNC_COLUMN} string, tno bigint, dno bigint")
            history.unionByName(row).coalesce(1).write.parquet(str(staged.deletions(self.index)))
        except BaseException:
            result.release()
            raise
        self.metrics.update(fragment_inserted=result.inserted, fragment_updated=result.updated, fragment_deleted=result.deleted, rows_after=result.inserted + result.updated + result.kept)
        self.metrics["full_ship_estimate_bytes"] = round(self.cost.tuple_bytes * self.metrics["rows_scanned"])
        return result

    # -- helpers -----------------------------------------------------------------------
    def _site_spec(self) -> SiteSpec:
        return SiteSpec(sql=self.site.sql, key=self.site.key, columns=[c.to_json() for c in self.site.columns])

    def _key_columns(self) -> list[Column]:
        by_name = {c.name: c for c in self.site.columns}
        return [by_name[k] for k in self.site.key]

    def _deletions(self, version: Version | None) -> DataFrame:
        schema = f"{SYNC_COLUMN} string, tno bigint, dno bigint"
        if version is None or not version.deletions(self.index).exists():
            return self.spark.createDataFrame([], schema)
        return self.spark.read.schema(schema).parquet(str(version.deletions(self.index)))

    def _request_body(self, control: ExtractControl) -> Iterator[bytes]:
        yield frames.json_frame(frames.CONTROL, control.model_dump())
        key_types = {c.name: c.type.arrow() for c in self.site.columns}
        if self.tuple_mode:
            tuples = ds.dataset(self.staging / "tuples", format="parquet")
            for batch in tuples.to_batches(columns=[*self.site.key, ROW_HASH], batch_size=SEND_BATCH_ROWS):
                if batch.num_rows:
                    arrays = [batch.column(i).cast(key_types[k]) for i, k in enumerate(self.site.key)] + [batch.column(len(self.site.key)).cast(pa.binary(TUPLE_HASH_BITS // 8))]
                    yield frames.arrow_frame(frames.TUPLE_HASHES, pa.RecordBatch.from_arrays(arrays, names=[*self.site.key, HASH]))
            return
        if not self.planned:
            return
        plan = ds.dataset(self.staging / "plan", format="parquet")
        units = plan.scanner(columns=[UID, GROUP_HASH], filter=pc.field(GROUP_HASH).is_valid(), batch_size=SEND_BATCH_ROWS)
        width = self.options.hash_bits // 8
        for batch in units.to_batches():
            if batch.num_rows:
                out = pa.RecordBatch.from_arrays([batch.column(0), batch.column(1).cast(pa.binary(width))], names=[WIRE_UID, HASH])
                yield frames.delta_or_plain_frame(frames.UNITS, frames.UNITS_DELTA, out)  # uids ascend: their differences pack small
        keys = plan.scanner(columns=[UID, *self.site.key], filter=pc.field(UID).is_valid() & pc.field(GROUP_HASH).is_null(), batch_size=SEND_BATCH_ROWS)
        for batch in keys.to_batches():
            if batch.num_rows:
                arrays = [batch.column(0)] + [batch.column(i + 1).cast(key_types[k]) for i, k in enumerate(self.site.key)]
                names = [WIRE_UID, *self.site.key]
                plain = pa.Table.from_arrays(arrays, names=names).sort_by([(n, "ascending") for n in names]).combine_chunks().to_batches()[0]
                # A unit's keys come in key order and its uid repeats: as differences they
                # pack into a fraction of the bytes (the agent adds them back up).
                yield frames.delta_or_plain_frame(frames.UNIT_KEYS, frames.UNIT_KEYS_DELTA, plain)



class _Sink:
    """A Parquet file written batch by batch on the driver (bounded memory)."""

    def __init__(self, path: Path, schema: pa.Schema):
        self.path = path
        self.schema = schema
        self.rows = 0
        self._writer: pq.ParquetWriter | None = None

    def __enter__(self) -> "_Sink":
        self._writer = pq.ParquetWriter(self.path, self.schema, compression="zstd")
        return self

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.schema != self.schema:
            try:
                batch = batch.select(self.schema.names).cast(self.schema)
            except (KeyError, pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise SourceDataError(f"the agent's rows do not match the expected columns: {exc}") from None
        self._writer.write_batch(batch)
        self.rows += batch.num_rows

    def __exit__(self, *exc) -> None:
        self._writer.close()


def _keys(table: pa.Table, key: list[str]) -> list:
    if len(key) == 1:
        return table.column(key[0]).to_pylist()
    return list(zip(*(table.column(k).to_pylist() for k in key)))


def _key_table(keys: list, key_cols: list[Column]) -> pa.Table:
    if len(key_cols) == 1:
        return pa.table({key_cols[0].name: pa.array(keys, key_cols[0].type.arrow())})
    return pa.table({c.name: pa.array([k[i] for k in keys], c.type.arrow()) for i, c in enumerate(key_cols)})
