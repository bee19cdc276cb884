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
   warehouse that the changed read did not return has its row fetched. It needs nothing of
   the changed read, so it runs beside it, on a connection of its own
   (key_reconciliation.py): a sync takes about as long as the slower of the two reads;
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

from deltasieve_protocol.models import SiteSpec
from warehouse import null_keys
from warehouse.deltas.unique_keys import check_unique
from warehouse.errors import AgentBusy
from warehouse.executor import ARROW
from warehouse.formats import check_format
from warehouse.names import spark_schema
from warehouse.store.read_ahead import ReadAhead
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
from warehouse.strategies.key_reconciliation import Beside, add_agent_time, cheapest, key_costs
from warehouse.strategies.sketch import keys as key_sketch
from warehouse.strategies.sketch import tables as sketch_tables
from warehouse.strategies.sketch.keys import source_of
from warehouse.view_options import ReconcileSettings, ViewOptions

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
        check_format(data, cls.FORMAT, f"the {cls.FILE} state of site {site} ({path})")
        return cls.from_json(data)


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
    #: The view's settings of the strategy (`settings_of`), from `plan` on.
    settings: ReconcileSettings

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

    @classmethod
    @abstractmethod
    def settings_of(cls, options: ViewOptions) -> ReconcileSettings | None:
        """The strategy's settings in a view's options: its family's; None where the view's
        strategy reads none (auto never chooses the strategy there: `applies`)."""

    def plan(self) -> None:
        ctx = self.ctx
        settings = self.settings_of(ctx.sync.options.view_options)
        assert settings is not None, f"strategy {self.name} runs only on a view whose options hold its settings"
        self.settings = settings
        self.state = self.STATE.load(ctx.current, ctx.index)
        self.full: Strategy | None = None
        #: the table of the snapshot's keys, when a key sketch used one
        self.key_table: sketch_tables.SiteSketch | None = None
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
        policies = {k: v for k, v in site.policies.items() if k in names}
        return SiteSpec(
            sql=sql,
            key=site.key,
            columns=site_columns(columns),
            dumps=self.ctx.dumps,
            read_from=read_from or None,
            policies=policies or None,  # type: ignore[arg-type]
            blocked=site.blocked or None,
        )

    def exchange(self) -> Answer:
        # the stored rows the answer will touch are decoded while the agent reads (store/read_ahead.py)
        with self.ctx.read_ahead(wanted=self.full is None) as ahead:
            return self._exchange(ahead)

    def _exchange(self, ahead: ReadAhead | None) -> Answer:
        ctx = self.ctx
        # the key reconciliation needs nothing of the changed read: it runs beside it (key_reconciliation.py)
        beside = None if self.full is not None else Beside(ctx, self.snapshot, cheapest(self.snapshot.statistics))
        try:
            t0 = time.monotonic()
            try:
                self.ranged = self.changed_read()
            except AgentBusy:
                if beside is None:
                    raise
                beside.wait()  # the reconciliation holds the agent's last slot: read after it
                self.ranged = self.changed_read()
            self.report["changed_read_s"] = round(time.monotonic() - t0, 3)
        finally:
            if beside is not None:
                beside.wait()
        self.traffic_rows = ctx.metrics.rows_scanned
        self.report["rows_read"] = ctx.metrics.rows_received
        reason = self.fallback_reason()
        if reason is not None and self.full is None:
            self._reconcile(reason)  # the keys found beside are not needed
        elif reason is not None:  # reconciled anyway: the read is not to be counted against
            self.report["fallback"] = reason
        if self.full is not None:
            return self.full.exchange()
        assert beside is not None
        found = beside.result()
        self.key_table = found.key_table
        self.report.update(found.report, key_reconciliation_s=beside.seconds, key_agent_seconds=found.agent_seconds)
        if found.agent_timings:
            self.report["key_agent_timings"] = found.agent_timings
        add_agent_time(ctx, found)
        ctx.metrics.rows_scanned = self.traffic_rows + found.rows_scanned
        return self._answer(self.ranged, found.new, found.gone, ahead)

    def _answer(self, ranged: Answer, new: pa.Table, gone: pa.Table, ahead: ReadAhead | None) -> Answer:
        """Rows read whose key is there now, the snapshot keys no longer there (`gone`),
        and the rows of keys new to the warehouse (`new`) that the changed read did not return.

        The stored rows of every key involved are read here, once (SiteContext.stored_rows),
        and the delta is built from them (the answer's `touched_rows`): a row read whose key the
        snapshot lacks and that is not new was inserted between the two reads and deleted, or
        inserted after the keys were read (they run side by side): the next sync finds it.
        """
        ctx, key = self.ctx, self.ctx.site.key
        key_schema = ctx.key_schema()
        rows = pq.read_table(ranged.returned[0]).cast(ctx.rows_schema())
        read_keys = rows.select(key)
        t0 = time.monotonic()
        touched_rows = ctx.stored_rows(
            pa.concat_tables([read_keys, new, gone]).group_by(key).aggregate([]), self.snapshot, ahead
        )
        ctx.metrics.phases["read_touched"] = round(time.monotonic() - t0, 3)
        stored = touched_rows.select(key).cast(key_schema)
        # a key the agent holds and the snapshot too comes back new only if the source holds it twice
        check_unique(pa.concat_tables([new, stored.join(new, key, join_type="left semi")]), key, source_of(ctx))
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
        """Rows the reconciliation found inserted or updated that the changed read had not
        returned: compared in this process on the Arrow executor (warehouse/executor.py),
        else on the executors."""
        ctx, key = self.ctx, self.ctx.site.key
        names = [c.name for c in ctx.site.columns]
        if ctx.sync.executor == ARROW:
            schema = ctx.rows_schema()
            found = pa.concat_tables([pq.read_table(p).select(names).cast(schema) for p in answer.returned])
            read = pq.read_table(self.ranged.returned[0], columns=key).cast(ctx.key_schema())
            unread = found.join(read, key, join_type="left anti").select(names)
            return null_keys.join(unread, self.snapshot.table.select(names).cast(schema), names, "left anti").num_rows
        spark_rows = spark_schema(ctx.site.columns)
        found_frame = ctx.sync.spark.read.schema(spark_rows).parquet(*[str(p) for p in answer.returned])
        read_frame = ctx.sync.spark.read.schema(spark_rows).parquet(str(self.ranged.returned[0])).select(*key)
        unread_frame = found_frame.join(read_frame, key, "left_anti").select(*names)
        return unread_frame.exceptAll(self.snapshot.stored.select(*names)).count()

    def fragment_build(self) -> FragmentBuild:
        # the changed read and the keys vouch for the rest; a reconciliation says for itself
        return self.full.fragment_build() if self.full is not None else FragmentBuild.TOUCHED

    def unchanged_keys(self) -> DataFrame | None:
        """The snapshot keys neither read nor deleted: vouched unchanged by the changed read."""
        if self.full is not None:
            return self.full.unchanged_keys()
        ctx, key = self.ctx, self.ctx.site.key
        touched = ctx.sync.spark.read.schema(spark_schema(ctx.key_columns())).parquet(*map(str, self.touched))
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
