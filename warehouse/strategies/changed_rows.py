"""What the timestamp and row_version strategies share: read what changed, reconcile the keys.

Both know from the source itself which rows may have changed since the last sync — rows
stamped since a watermark (timestamp.py), rows written since a snapshot (row_version.py) —
and differ only in that read and the state it leaves. A sync, per site:

1. the *changed read*: the site query narrowed to the candidate rows, with the new state
   (the subclass's `changed_read`);
2. the key reconciliation: the site query projected on its key columns, and nothing else
   (every key shipped, range checksums over the key-only query, or a sketch of the keys,
   whichever the statistics expect to move the fewest bytes; a key sketch that does not
   peel ships the keys). A snapshot key missing from them is a delete (a hard delete,
   a row whose delete flag was set, a row that left the WHERE clause); a key new to the
   warehouse that the changed read did not return has its row fetched;
3. the exact delta is built from the rows read (candidates that did not change give no
   delta row) and the deleted keys; every other key is vouched unchanged.

Every `reconcile_every` syncs, and whenever the state cannot serve (none kept, or the
subclass's `fallback_reason` after the read: e.g. a restored database), the site goes to the
differencing strategy auto would choose instead of steps 2 and 3; `rows_missed` counts the
inserted or updated rows a periodic reconciliation found that the changed read had not.

The state is kept beside the fragment (a JSON file in the site's directory of the version),
so it commits with it: a failed sync leaves the old one.
"""

from __future__ import annotations

import json
import time
from abc import abstractmethod
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame

from protocol.models import SiteSpec
from warehouse.deltas.site_delta import check_unique
from warehouse.deltas.touched_delta import check_unique as check_unique_arrow
from warehouse.formats import read_format
from warehouse.names import spark_schema
from warehouse.store.versions import Version
from warehouse.strategies.base import (
    Answer,
    Asks,
    Built,
    DeltaInputs,
    FragmentBuild,
    SiteContext,
    SiteEstimate,
    Snapshot,
    Strategy,
    extract_exchange,
    fetch_exchange,
    site_columns,
)
from warehouse.strategies.cheapest import choose
from warehouse.strategies.full_ship import FullShip
from warehouse.strategies.range_checksum import INITIAL_RANGES, RangeChecksum
from warehouse.strategies.sketch import keys as key_sketch
from warehouse.strategies.sketch import tables as sketches
from warehouse.strategies.sketch.keys import source_of
from warehouse.strategies.stamps import keys_sql
from warehouse.viewdef import SiteQuery

#: Share of the rows a sync is expected to read, for the cost estimate: the changed rows
#: plus those read again (within the lag, or written by transactions already seen).
READ_MARGIN = 1.5


class KeptState:
    """A strategy's state of one site, kept in a JSON file beside the fragment.

    Subclasses are frozen dataclasses with a `syncs` field (changed reads since the last
    full reconciliation) and say their file, format and how they read themselves.
    """

    FILE: ClassVar[str]
    FORMAT: ClassVar[int]
    syncs: int

    @abstractmethod
    def to_json(self) -> dict: ...

    @classmethod
    @abstractmethod
    def from_json(cls, data: dict) -> KeptState: ...

    def save(self, site_dir: Path) -> None:
        site_dir.mkdir(parents=True, exist_ok=True)
        (site_dir / self.FILE).write_text(json.dumps({"format": self.FORMAT, **self.to_json()}))

    @classmethod
    def load(cls, version: Version | None, site: int):
        """The state of a site of `version`; None when it keeps none (another strategy wrote it)."""
        if version is None:
            return None
        path = version.site_dir(site) / cls.FILE
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        read_format(data, cls.FORMAT, f"the {cls.FILE} state of site {site} ({path})")
        return cls.from_json(data)


def key_costs(estimate: SiteEstimate) -> dict[str, float]:
    """What each way of reconciling the keys is expected to move: every key shipped, range
    checksums over the key-only query (its first round's ranges counted in full), or a
    sketch of the keys (key_sketch.py). Only deletes and inserts change the set of keys.

    >>> from warehouse.planning.cost_model import CostModel
    >>> costs = key_costs(SiteEstimate(1_000_000, 0.01, 0.001, CostModel(60, 5, 16), 128, inserts=5000.0))
    >>> min(costs, key=costs.get), costs["ship"]
    ('sketch', 5000000.0)
    >>> costs = key_costs(SiteEstimate(200, 0.01, 0.1, CostModel(60, 5, 16), 128))
    >>> min(costs, key=costs.get)
    'ship'
    """
    cost = estimate.cost
    first_round = INITIAL_RANGES * (2 * cost.key_bytes + estimate.hash_bits / 8 + 9)  # bounds, hash, id, count
    return {
        "ship": estimate.rows * cost.key_bytes,
        "range_checksum": RangeChecksum.expected_bytes(key_sketch.keys_only(estimate)) + first_round,
        "sketch": key_sketch.expected_bytes(estimate),
    }


def key_reconciliation(estimate: SiteEstimate) -> str:
    """The way of reconciling the keys expected to move the fewest bytes (the simplest on a tie)."""
    costs = key_costs(estimate)
    return min(costs, key=costs.__getitem__)


class StateLoad(FullShip):
    """The load of such a view: the whole site query, with the state of the source read first."""

    name = "full_ship"

    def __init__(self, ctx: SiteContext, snapshot: Snapshot, owner: type[ChangedRows]):
        super().__init__(ctx, snapshot)
        self.owner = owner

    def exchange(self) -> Answer:
        answer = extract_exchange(self.ctx, asks=self.owner.STATE_REQUEST)
        self.state = self.owner.state_from(answer, 0)
        return answer

    def stage(self, staged: Version, built: Built) -> None:
        self.state.save(staged.site_dir(self.ctx.index))
        # the table of the loaded keys, so that the first sketch of the keys finds it kept
        key_sketch.build_table(self.ctx, staged, built.result.inserted)


class ChangedRows(Strategy):
    """The shared steps; a subclass reads the changed rows and keeps the state (see the module)."""

    #: The state's class, the extract request's options that read the source's state, and
    #: the key of the report in the sync's metrics.
    STATE: ClassVar[type[KeptState]]
    STATE_REQUEST: ClassVar[Asks]
    REPORT: ClassVar[str]

    @classmethod
    def create_load(cls, ctx: SiteContext, snapshot: Snapshot) -> Strategy:
        return StateLoad(ctx, snapshot, cls)

    @classmethod
    @abstractmethod
    def state_from(cls, answer: Answer, syncs: int) -> KeptState:
        """The new state, from the summary of a read that asked for it (`STATE_REQUEST`)."""

    @abstractmethod
    def changed_read(self) -> Answer:
        """Read the candidate rows (none without a state) and the source's new state;
        set `self.new_state` and fill `self.report`."""

    def fallback_reason(self) -> str | None:
        """After the changed read: why its rows cannot be trusted (a full reconciliation
        follows); None by default."""
        return None

    def plan(self) -> None:
        ctx = self.ctx
        self.settings = ctx.options.view_options.stamps
        self.state = self.STATE.load(ctx.current, ctx.index)
        self.full: Strategy | None = None
        #: the table of the snapshot's keys, when a key sketch used one
        self.key_table: sketches.SiteSketch | None = None
        self.report: dict = {"reconciled": False, "rows_missed": None}
        setattr(ctx.metrics, self.REPORT, self.report)
        if self.state is None:
            self._reconcile("no previous state")
        elif self.state.syncs + 1 >= self.settings.reconcile_every:
            self._reconcile(None)

    def _reconcile(self, fallback: str | None) -> Strategy:
        """Hand the site to the differencing strategy auto would choose (a fall-back when
        `fallback` says why); that strategy, planned."""

        # not resumed: the state this sync keeps is read with the changed read, after a failed attempt's part
        self.full = choose(self.snapshot.statistics).create(replace(self.ctx, resume=None), self.snapshot)
        self.report.update(reconciled=True, reconciliation=self.full.name)
        if fallback is not None:
            self.report["fallback"] = fallback
        self.full.plan()
        return self.full

    def spec(self, sql: str, columns: list | None = None) -> SiteSpec:
        site = self.ctx.site
        columns = columns if columns is not None else site.columns
        names = {c.name for c in columns}
        read_from = {k: v for k, v in site.read_from.items() if k in names}
        return SiteSpec(
            sql=sql, key=site.key, columns=site_columns(columns), dumps=self.ctx.dumps, read_from=read_from or None
        )

    def exchange(self) -> Answer:
        self.ranged = self.changed_read()
        self.traffic_rows = self.ctx.metrics.rows_scanned
        self.report["rows_read"] = self.ctx.metrics.rows_received
        reason = self.fallback_reason()
        if reason is not None and self.full is None:
            self._reconcile(reason)
        elif reason is not None:  # reconciled anyway: the read is not to be counted against
            self.report["fallback"] = reason
        if self.full is not None:
            return self.full.exchange()
        ctx = self.ctx
        keys_site = SiteQuery(ctx.site.source, keys_sql(ctx.site), ctx.key_columns(), ctx.site.key, ctx.site.dialect)
        method = key_reconciliation(self.snapshot.statistics)
        t0 = time.monotonic()
        change = None
        if method == "sketch":
            change = self._keys_by_sketch(keys_site)
        elif method == "range_checksum":
            change = self._keys_by_ranges(keys_site)
        if change is None:
            change = self._keys_shipped(keys_site)
        self.report["key_reconciliation_s"] = round(time.monotonic() - t0, 3)
        ctx.metrics.rows_scanned += self.traffic_rows
        return self._answer(self.ranged, *change)

    def _keys_shipped(self, keys_site: SiteQuery) -> tuple[pa.Table, pa.Table]:
        """Every current key of the site query, shipped."""
        ctx = self.ctx
        keys = extract_exchange(ctx, spec=self.spec(keys_site.sql, keys_site.columns), prefix="ts-keys-")
        self.report.update(key_reconciliation="ship", keys_reconciled=ctx.metrics.rows_received)
        return self._change_to(ctx.spark.read.schema(spark_schema(keys_site.columns)).parquet(str(keys.returned[0])))

    def _keys_by_sketch(self, keys_site: SiteQuery) -> tuple[pa.Table, pa.Table] | None:
        """The keys gained and lost, by a sketch of the key-only site query; None when no
        stage peeled (the keys are then shipped)."""
        try:
            new, gone, sketch = key_sketch.present_keys(self.ctx, self.snapshot, keys_site)
        except key_sketch.KeysUnresolved:
            self.report["key_sketch_peeled"] = False
            return None
        km = sketch.ctx.metrics
        self.key_table = sketch.stored
        self.report.update(
            key_reconciliation="sketch",
            keys_reconciled=km.rows_received,
            key_sketch_bytes=km.sketch_bytes,
            key_sketch_stages=km.sketch_stages,
            key_table="kept" if sketch.table_kept else "built",
            key_agent_seconds=km.agent_seconds,
        )
        self.traffic_rows += km.rows_scanned
        return new, gone

    def _keys_by_ranges(self, keys_site: SiteQuery) -> tuple[pa.Table, pa.Table]:
        """The keys gained and lost, by range checksums over the key-only site query: the
        keys of ranges found equal are the snapshot's, those of the ranges that differ are shipped."""
        ctx = self.ctx
        keys_ctx, keys_snapshot = key_sketch.key_only_context(ctx, self.snapshot, keys_site, "ts-key-ranges")
        ranges = RangeChecksum(keys_ctx, keys_snapshot)
        ranges.plan()
        answer = ranges.exchange()
        km = keys_ctx.metrics
        self.report.update(
            key_reconciliation="range_checksum",
            keys_reconciled=km.rows_received,
            key_ranges_sent=km.groups_sent,
            key_range_rounds=km.range_rounds,
            key_agent_seconds=km.agent_seconds,
        )
        self.traffic_rows += km.rows_scanned
        shipped = ctx.spark.read.schema(spark_schema(keys_site.columns)).parquet(*map(str, answer.returned))
        return self._change_to(ranges.verified_keys().unionByName(shipped))

    def _change_to(self, present: DataFrame) -> tuple[pa.Table, pa.Table]:
        """The keys gained and lost by the snapshot to become `present` (every key the site
        query holds now; a key it holds twice fails the sync), on the executors."""
        ctx, key = self.ctx, self.ctx.site.key
        check_unique(present, key, key_sketch.source_of(ctx))
        known = self.snapshot.stored.select(*key)
        key_schema = pa.schema([ctx.rows_schema().field(k) for k in key])
        new = present.join(known, key, "left_anti").toArrow().select(key).cast(key_schema)
        gone = known.join(present, key, "left_anti").toArrow().select(key).cast(key_schema)
        return new, gone

    def _answer(self, ranged: Answer, new: pa.Table, gone: pa.Table) -> Answer:
        """Rows read whose key is there now, the snapshot keys no longer there (`gone`),
        and the rows of keys new to the warehouse (`new`) that the changed read did not return.

        The stored rows of every key involved are read here, once (SiteContext.stored_rows),
        and the delta is built from them (the answer's `touched_rows`): a row read whose key the
        snapshot lacks and that is not new was inserted and deleted between the two reads.
        """
        ctx, key = self.ctx, self.ctx.site.key
        key_schema = pa.schema([ctx.rows_schema().field(k) for k in key])
        rows = pq.read_table(ranged.returned[0]).cast(ctx.rows_schema())
        read_keys = rows.select(key)
        t0 = time.monotonic()
        touched_rows = ctx.stored_rows(
            pa.concat_tables([read_keys, new, gone]).group_by(key).aggregate([]), self.snapshot.stored
        )
        ctx.metrics.phases["read_touched"] = round(time.monotonic() - t0, 3)
        stored = touched_rows.select(key).cast(key_schema)
        # a key the agent holds and the snapshot too comes back new only if the source holds it twice
        check_unique_arrow(pa.concat_tables([new, stored.join(new, key, join_type="left semi")]), key, source_of(ctx))
        there = pa.concat_tables([new, stored]).join(gone, key, join_type="left anti")
        kept = rows.join(there, key, join_type="left semi")
        returned = ctx.staging / "returned.parquet"
        pq.write_table(kept.select(ctx.rows_schema().names).cast(ctx.rows_schema()), returned)
        deleted = ctx.staging / "deleted.parquet"
        pq.write_table(gone, deleted)
        self.report["keys_deleted"] = gone.num_rows
        # keys new to the warehouse that the changed read did not return (e.g. an insert
        # committed with a stamp older than the bound): their rows are fetched now.
        unread = new.join(read_keys, key, join_type="left anti")
        found = [returned]
        if unread.num_rows:
            found.append(ctx.staging / "ts-fetched.parquet")
            self.report["rows_fetched"] = fetch_exchange(ctx, unread, found[-1])
        else:
            self.report["rows_fetched"] = 0
        ctx.metrics.rows_received = kept.num_rows + self.report["rows_fetched"]
        self.touched = [*found, deleted]
        return Answer(found, deleted, touched_rows=touched_rows)

    def follow_up(self, answer: Answer) -> Answer:
        if self.full is None:
            return answer
        answer = self.full.follow_up(answer)
        trusted = self.state is not None and "fallback" not in self.report
        self.report["rows_missed"] = self._missed(answer) if trusted else None
        return answer

    def _missed(self, answer: Answer) -> int:
        """Rows the reconciliation found inserted or updated that the changed read had not returned."""
        ctx, key = self.ctx, self.ctx.site.key
        names = [c.name for c in ctx.site.columns]
        schema = spark_schema(ctx.site.columns)
        found = ctx.spark.read.schema(schema).parquet(*[str(p) for p in answer.returned])
        read = ctx.spark.read.schema(schema).parquet(str(self.ranged.returned[0])).select(*key)
        return found.join(read, key, "left_anti").select(*names).exceptAll(self.snapshot.stored.select(*names)).count()

    def fragment_build(self) -> FragmentBuild:
        # the changed read and the keys vouch for the rest; a reconciliation says for itself
        return self.full.fragment_build() if self.full is not None else FragmentBuild.TOUCHED

    def unchanged_keys(self) -> DataFrame | None:
        """The snapshot keys neither read nor deleted: vouched unchanged by the changed read."""
        if self.full is not None:
            return self.full.unchanged_keys()
        ctx, key = self.ctx, self.ctx.site.key
        touched = ctx.spark.read.schema(spark_schema(ctx.key_columns())).parquet(*map(str, self.touched))
        return self.snapshot.stored.select(*key).join(touched, key, "left_anti")

    def delta_inputs(self, answer: Answer) -> DeltaInputs:
        return self.full.delta_inputs(answer) if self.full is not None else super().delta_inputs(answer)

    def stage(self, staged: Version, built: Built) -> None:
        if self.full is not None:
            self.full.stage(staged, built)
        syncs = 0 if self.full is not None else self.state.syncs + 1
        self.state_from(self.ranged, syncs).save(staged.site_dir(self.ctx.index))
        key_sketch.stage_table(self.ctx, self.key_table, staged, built.result)

    @classmethod
    def expected_bytes(cls, estimate: SiteEstimate) -> float:
        """The changed rows (with a margin for those read again) plus the cheapest key reconciliation.

        >>> from warehouse.planning.cost_model import CostModel
        >>> ChangedRows.expected_bytes(SiteEstimate(200, 0.01, 0.1, CostModel(50, 4, 16), 128))  # 3150 + every key
        3950.0
        """
        keys = min(key_costs(estimate).values())
        return READ_MARGIN * estimate.changes * estimate.cost.tuple_bytes + keys
