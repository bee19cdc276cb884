"""timestamp: read only the rows stamped since the last sync, and reconcile the keys.

Each table of the site query has a last-modified column (the view's `timestamps`). A sync:

1. reads the site query narrowed to the rows whose timestamp (any stamped table's, for a
   join) is at or after the previous watermark minus `timestamp_lag_s`, or NULL (a NULL
   timestamp counts as changed at every sync); the agent reads its database's clock first,
   and that clock, not the warehouse's, is the next watermark;
2. reads the site query's keys, and nothing else (every key, or by range checksums over
   the key-only query when the statistics expect that to move fewer bytes): a snapshot key missing from them is a
   delete (a hard delete, a row whose delete flag was set, a row that left the WHERE clause),
   and a key new to the warehouse that the ranged read did not return (an insert committed
   with an older stamp) has its row fetched;
3. the exact delta is built from the rows read (those re-read because of the lag and
   unchanged give no delta row) and the deleted keys; every other key is vouched unchanged.

What a timestamp cannot see, a row committed after the watermark minus the lag with an
older stamp, the full reconciliation catches: every `reconcile_every` syncs (and the first
sync after a load without a watermark) the site goes to the differencing strategy auto
would choose, after the ranged read, and `rows_missed` counts the inserted or updated rows
it found that the ranged read had not returned.

The watermark and the syncs since the last reconciliation are kept beside the fragment
(`timestamp.json` in the site's directory of the version), so they commit with it: a failed
sync leaves the old watermark.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame

from remote_agent.protocol.models import SiteSpec

from ..errors import ProtocolError
from ..formats import read_format
from ..metrics import SiteMetrics
from ..planning import CostModel
from ..stamps import StampSettings, keys_sql, not_null_aliases, ranged_sql, since, site_stamps, site_tables
from ..storage import Version
from ..viewdef import SiteQuery
from .base import (
    Answer,
    DeltaInputs,
    SiteContext,
    SiteEstimate,
    Strategy,
    extract_exchange,
    fetch_exchange,
    spark_schema,
)
from .full_ship import FullShip
from .range_checksum import INITIAL_RANGES, RangeChecksum

#: The state file in a version's site directory, and the format it is written in.
STATE_FILE = "timestamp.json"
STATE_FORMAT = 1
#: Share of the rows a sync is expected to read, for the cost estimate: the changed rows
#: plus those within the lag.
READ_MARGIN = 1.5


@dataclass(frozen=True)
class Watermark:
    """The timestamp strategy's state of one site, kept with the fragment."""

    watermark: str  # the source's clock at the start of the last read
    syncs: int  # ranged syncs since the last full reconciliation

    def save(self, site_dir: Path) -> None:
        site_dir.mkdir(parents=True, exist_ok=True)
        (site_dir / STATE_FILE).write_text(json.dumps({"format": STATE_FORMAT, **asdict(self)}))

    @classmethod
    def load(cls, version: Version | None, site: int) -> Watermark | None:
        """The state of a site of `version`; None when it keeps none (another strategy wrote it)."""
        if version is None:
            return None
        path = version.site_dir(site) / STATE_FILE
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        read_format(data, STATE_FORMAT, f"the timestamp state of site {site} ({path})")
        return cls(data["watermark"], int(data["syncs"]))


def index_serves(plan: list[str], columns: set[str]) -> bool:
    """Whether a query plan (SQLite's EXPLAIN QUERY PLAN details, PostgreSQL's EXPLAIN lines)
    reads one of the timestamp `columns` through an index.

    >>> index_serves(["SEARCH l USING INDEX lines_at (updated_at>?)"], {"updated_at"})
    True
    >>> index_serves(["SCAN l", "SEARCH o USING INTEGER PRIMARY KEY (rowid=?)"], {"updated_at"})
    False
    >>> index_serves(["Bitmap Index Scan on lines_at", "  Index Cond: (updated_at >= '2026-01-01')"], {"updated_at"})
    True
    """
    markers = ("USING INDEX", "USING COVERING INDEX", "INDEX COND")
    return any(c in line and any(m in line.upper() for m in markers) for line in plan for c in columns)


def key_ranges_cheaper(estimate: SiteEstimate) -> bool:
    """Whether range checksums over the keys are expected to move fewer bytes than every key.

    >>> from warehouse.planning import CostModel
    >>> key_ranges_cheaper(SiteEstimate(500, 0.1, 0.01, CostModel(50, 4, 16), 128))
    False
    >>> key_ranges_cheaper(SiteEstimate(3000, 0.1, 0.005, CostModel(50, 4, 16), 128))
    True
    >>> key_ranges_cheaper(SiteEstimate(1_000_000, 0.1, 0.0001, CostModel(50, 4, 16), 128))
    True
    """
    return key_ranges_bytes(estimate) < estimate.rows * estimate.cost.key_bytes


def key_ranges_bytes(estimate: SiteEstimate) -> float:
    """What range checksums over the keys are expected to move.

    Only deletes and inserts change the set of keys; range_checksum's estimate, with rows as
    wide as keys and its first round's ranges counted in full.
    """
    cost = estimate.cost
    keys_only = SiteEstimate(
        estimate.rows,
        0.0,
        estimate.p_delete,
        CostModel(cost.key_bytes, cost.key_bytes, cost.hash_bytes),
        estimate.hash_bits,
        updates=0.0,
        updates_variance=0.0,
        inserts=estimate.inserts,
    )
    first_round = INITIAL_RANGES * (2 * cost.key_bytes + estimate.hash_bits / 8 + 9)  # bounds, hash, id, count
    return RangeChecksum.expected_bytes(keys_only) + first_round


def _clock(answer: Answer) -> str:
    clock = answer.summary.get("source_clock")
    if not clock:
        raise ProtocolError("the agent reported no source clock: the timestamp strategy needs an agent that reads it")
    return clock


class TimestampLoad(FullShip):
    """The load of a timestamp view: the whole site query, the source's clock read first."""

    name = "full_ship"

    def exchange(self) -> Answer:
        answer = extract_exchange(self.ctx, source_clock=True)
        self.watermark = _clock(answer)
        return answer

    def stage(self, staged: Version) -> None:
        Watermark(self.watermark, 0).save(staged.site_dir(self.ctx.index))


class Timestamp(Strategy):
    name = "timestamp"

    @classmethod
    def applies(cls, ctx: SiteContext) -> bool:
        """Whether the view is keyed and has a timestamp for every table of the site query."""
        if not ctx.site.key:
            return False
        stamps = site_stamps(ctx.site, StampSettings.from_options(ctx.options.view_options))
        return all(alias in stamps for _, alias in site_tables(ctx.site))

    @classmethod
    def create_load(cls, ctx: SiteContext) -> Strategy:
        return TimestampLoad(ctx)

    def plan(self) -> None:
        ctx = self.ctx
        self.settings = StampSettings.from_options(ctx.options.view_options)
        self.state = Watermark.load(ctx.current, ctx.index)
        self.stamps = site_stamps(ctx.site, self.settings)
        due = self.state is None or self.state.syncs + 1 >= self.settings.reconcile_every
        self.full: Strategy | None = None
        self.report: dict = {"lag_s": self.settings.lag_s, "reconciled": due, "rows_missed": None}
        ctx.metrics.timestamp = self.report
        if due:
            from .auto import choose  # auto's candidates import nothing of this module

            self.full = choose(ctx.estimate).create(ctx)
            self.report["reconciliation"] = self.full.name
            self.full.plan()

    def _spec(self, sql: str, columns: list | None = None, key: list[str] | None = None) -> SiteSpec:
        site = self.ctx.site
        columns = columns if columns is not None else site.columns
        return SiteSpec(sql=sql, key=key or site.key, columns=[c.to_json() for c in columns])

    def _ranged_read(self) -> Answer:
        """The rows stamped since the watermark minus the lag (none without a watermark), and the clock."""
        ctx, m = self.ctx, self.ctx.metrics
        if self.state is not None:
            bound = since(self.state.watermark, self.settings.lag_s)
            sql = ranged_sql(ctx.site, self.stamps, bound, not_null_aliases(ctx.site, self.settings))
        else:  # nothing to read from: just the clock
            bound, sql = None, ranged_sql(ctx.site, {}, None)
        answer = extract_exchange(
            ctx, spec=self._spec(sql), prefix="ts-", source_clock=True, query_plan=self.state is not None
        )
        self.watermark = _clock(answer)
        plan = answer.summary.get("query_plan")
        if plan is not None:
            self.report["index_used"] = index_serves(plan, set(self.stamps.values()))
            self.report["query_plan"] = plan
        self.report.update(
            previous_watermark=self.state.watermark if self.state else None,
            read_from=bound,
            watermark=self.watermark,
            rows_read=m.rows_received,
        )
        self.traffic_rows = m.rows_scanned
        return answer

    def exchange(self) -> Answer:
        ranged = self._ranged_read()
        self.ranged = ranged
        if self.full is not None:
            return self.full.exchange()
        ctx = self.ctx
        keys_site = SiteQuery(ctx.site.source, keys_sql(ctx.site), ctx.key_columns(), ctx.site.key)
        if key_ranges_cheaper(ctx.estimate):
            present = self._keys_by_ranges(keys_site)
        else:
            present = self._keys_shipped(keys_site)
        ctx.metrics.rows_scanned += self.traffic_rows
        return self._answer(ranged, present)

    def _keys_shipped(self, keys_site: SiteQuery) -> DataFrame:
        """Every current key of the site query, shipped."""
        ctx = self.ctx
        keys = extract_exchange(ctx, spec=self._spec(keys_site.sql, keys_site.columns), prefix="ts-keys-")
        self.report.update(key_reconciliation="ship", keys_reconciled=ctx.metrics.rows_received)
        return ctx.spark.read.schema(spark_schema(keys_site.columns)).parquet(str(keys.returned[0]))

    def _keys_by_ranges(self, keys_site: SiteQuery) -> DataFrame:
        """The current keys by range checksums over the key-only site query: the keys of
        ranges found equal are the snapshot's, those of the ranges that differ are shipped."""
        ctx = self.ctx
        keys_ctx = replace(
            ctx,
            site=keys_site,
            staging=ctx.staging / "ts-key-ranges",
            snapshot=ctx.snapshot.select(*keys_site.key),
            metrics=SiteMetrics(source=ctx.site.source, rows_before=ctx.metrics.rows_before),
        )
        keys_ctx.staging.mkdir(parents=True, exist_ok=True)
        ranges = RangeChecksum(keys_ctx)
        ranges.plan()
        answer = ranges.exchange()
        km = keys_ctx.metrics
        self.report.update(
            key_reconciliation="range_checksum",
            keys_reconciled=km.rows_received,
            key_ranges_sent=km.groups_sent,
            key_range_rounds=km.range_rounds,
        )
        self.traffic_rows += km.rows_scanned
        shipped = ctx.spark.read.schema(spark_schema(keys_site.columns)).parquet(*map(str, answer.returned))
        return ranges.unchanged_keys().unionByName(shipped)

    def _answer(self, ranged: Answer, present: DataFrame) -> Answer:
        """Rows read whose key is still there (a row deleted between the two reads is a
        delete), and the snapshot keys no longer there."""
        ctx, key = self.ctx, self.ctx.site.key
        rows = ctx.spark.read.schema(spark_schema(ctx.site.columns)).parquet(str(ranged.returned[0]))
        kept = rows.join(present, key, "left_semi").toArrow()
        returned = ctx.staging / "returned.parquet"
        pq.write_table(kept.select(ctx.rows_schema().names).cast(ctx.rows_schema()), returned)
        gone = ctx.snapshot.select(*key).join(present, key, "left_anti").toArrow()
        key_schema = pa.schema([ctx.rows_schema().field(k) for k in key])
        deleted = ctx.staging / "deleted.parquet"
        pq.write_table(gone.select(key).cast(key_schema), deleted)
        self.report["keys_deleted"] = gone.num_rows
        # keys new to the warehouse that the ranged read did not return: rows committed
        # with a stamp older than the bound (an insert; a late update only the
        # reconciliation sees). Their rows are fetched now.
        read = ctx.spark.read.schema(spark_schema(ctx.key_columns())).parquet(str(returned))
        unread = present.join(ctx.snapshot.select(*key).unionByName(read), key, "left_anti").toArrow()
        found = [returned]
        if unread.num_rows:
            found.append(ctx.staging / "ts-fetched.parquet")
            self.report["rows_fetched"] = fetch_exchange(ctx, unread.select(key).cast(key_schema), found[-1])
        else:
            self.report["rows_fetched"] = 0
        ctx.metrics.rows_received = kept.num_rows + self.report["rows_fetched"]
        self.touched = [*found, deleted]
        return Answer(found, deleted)

    def follow_up(self, answer: Answer) -> Answer:
        if self.full is None:
            return answer
        answer = self.full.follow_up(answer)
        self.report["rows_missed"] = self._missed(answer) if self.state is not None else None
        return answer

    def _missed(self, answer: Answer) -> int:
        """Rows the reconciliation found inserted or updated that the ranged read had not returned."""
        ctx, key = self.ctx, self.ctx.site.key
        names = [c.name for c in ctx.site.columns]
        schema = spark_schema(ctx.site.columns)
        found = ctx.spark.read.schema(schema).parquet(*[str(p) for p in answer.returned])
        read = ctx.spark.read.schema(schema).parquet(str(self.ranged.returned[0])).select(*key)
        return found.join(read, key, "left_anti").select(*names).exceptAll(ctx.snapshot.select(*names)).count()

    def vouches_for_untouched(self) -> bool:
        return self.full.vouches_for_untouched() if self.full is not None else True

    def unchanged_keys(self) -> DataFrame | None:
        """The snapshot keys neither read nor deleted: vouched unchanged by their stamps."""
        if self.full is not None:
            return self.full.unchanged_keys()
        ctx, key = self.ctx, self.ctx.site.key
        touched = ctx.spark.read.schema(spark_schema(ctx.key_columns())).parquet(*map(str, self.touched))
        return ctx.snapshot.select(*key).join(touched, key, "left_anti")

    def delta_inputs(self, answer: Answer) -> DeltaInputs:
        return self.full.delta_inputs(answer) if self.full is not None else super().delta_inputs(answer)

    def stage(self, staged: Version) -> None:
        if self.full is not None:
            self.full.stage(staged)
        syncs = 0 if self.full is not None else self.state.syncs + 1
        Watermark(self.watermark, syncs).save(staged.site_dir(self.ctx.index))

    @classmethod
    def expected_bytes(cls, estimate: SiteEstimate) -> float:
        """The changed rows (with a margin for the lag) plus the key reconciliation (every key
        or range checksums over them, whichever is expected to move less).

        >>> from warehouse.planning import CostModel
        >>> Timestamp.expected_bytes(SiteEstimate(1000, 0.01, 0.0, CostModel(50, 4, 16), 128))  # 750 + ranges
        2862.0
        >>> Timestamp.expected_bytes(SiteEstimate(200, 0.01, 0.1, CostModel(50, 4, 16), 128))  # 3150 + every key
        3950.0
        """
        keys = min(estimate.rows * estimate.cost.key_bytes, key_ranges_bytes(estimate))
        return READ_MARGIN * estimate.changes * estimate.cost.tuple_bytes + keys
