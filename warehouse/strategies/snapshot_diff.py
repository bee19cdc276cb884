"""snapshot_diff: sources that are directories of dump files; the agent ships the differential.

A legacy system without a database login drops periodic dumps (remote_agent/adapters/dumps.py).
The view's copy of a site was made from certain dumps, kept in `snapshot_diff.json` beside the
fragment; at the next sync the agent compares the site query over those dumps with the site
query over the current ones, at the legacy host, and sends only what differs
(remote_agent/strategies/snapshot_diff.py, with the algorithms of Labio and Garcia-Molina,
"Efficient Snapshot Differential Algorithms for Data Warehousing"). The link carries the
change, not the dump.

The agent's differential is a candidate one. With the window algorithm a record that moved
further than the aging buffers reach comes as a delete and an insert of one key: a *useless
pair*. Here every candidate row is compared with the stored row of its key (one Arrow
read of the touched keys) and a deleted key that also came back is not deleted, so the
delta is exact whatever the buffer size: a pair whose row equals the stored one gives
nothing, one whose row differs an update. The report gives that paper's quality figures:
`useless_pairs` produced, how many of them `cancelled` and how many were `split_updates`.

No read of the current dumps is needed when they are the ones the copy was made from. When
one of the previous dumps is gone (or the view has none kept) the site is reconciled with
the differencing strategy auto would choose, pinned to the current dumps, and the report's
`fallback` says why. Every later request of the sync reads the very dumps compared
(`SiteContext.dumps`), so the state kept names the dumps the new copy holds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import pyarrow as pa
import pyarrow.parquet as pq

from deltasieve_protocol import frames
from deltasieve_protocol.models import SnapshotDiffControl
from warehouse import null_keys
from warehouse.deltas.unique_keys import check_unique
from warehouse.errors import ProtocolError
from warehouse.store.sinks import Sink
from warehouse.strategies.base import ROWS_ONLY, Answer, Asks, SiteContext, SiteEstimate, add_timings
from warehouse.strategies.changed_rows import ChangedRows, KeptState, source_of
from warehouse.view_options import SnapshotDiffSettings, ViewOptions

#: The state file in a version's site directory, and the format it is written in.
STATE_FILE = "snapshot_diff.json"
STATE_FORMAT = 1
#: Useless pairs, as a share of the records, past which a sync says the window collapsed.
USELESS_SHARE = 0.1
#: Candidate rows per changed row expected, for the cost estimate (useless pairs included).
CANDIDATE_MARGIN = 1.2


@dataclass(frozen=True)
class DumpState(KeptState):
    """The dumps a site's copy was made from (table -> file name), kept with the fragment."""

    FILE = STATE_FILE
    FORMAT = STATE_FORMAT

    dumps: dict
    syncs: int

    def to_json(self) -> dict:
        return {"dumps": self.dumps, "syncs": self.syncs}

    @classmethod
    def from_json(cls, data: dict) -> DumpState:
        return cls(dict(data["dumps"]), int(data["syncs"]))


def _dumps(answer: Answer) -> dict:
    reported = answer.summary.get("dumps")
    if not isinstance(reported, dict) or not reported:
        raise ProtocolError("the agent named no dump files it read: snapshot_diff needs an agent on a dump directory")
    return reported


def advice(diff: SnapshotDiffSettings, useless_pairs: int, records: int) -> str | None:
    """What to change when the window's buffers were too small for the rows a dump moved:
    past USELESS_SHARE of the records as useless pairs, the window has collapsed (the moved
    rows kept its buffers full, and nearly every later record came out unmatched).

    >>> window = SnapshotDiffSettings(algorithm="window", aging_rows=1000)
    >>> advice(window, 400_000, 1_000_000)[:60]
    'the window shipped 400,000 useless delete+insert pairs (of 1'
    >>> advice(window, 10, 1_000_000) is None
    True
    """
    if diff.algorithm != "window" or useless_pairs <= USELESS_SHARE * records:
        return None
    return (
        f"the window shipped {useless_pairs:,} useless delete+insert pairs (of {records:,} records): its aging "
        f"buffers of {diff.aging_rows:,} records hold fewer than the rows this dump moved; redefine the "
        "view with a larger snapshot_diff.aging_rows, or algorithm sort_merge when the dumps are not written in a "
        "stable order"
    )


class SnapshotDiff(ChangedRows):
    name = "snapshot_diff"
    STATE = DumpState
    STATE_REQUEST: ClassVar[Asks] = ROWS_ONLY
    REPORT = "snapshot_diff"

    @classmethod
    def applies(cls, ctx: SiteContext) -> bool:
        """Whether the view is keyed and the site's source was a dump directory when the view was defined."""
        settings = ctx.sync.options.view_options.dump_settings
        return settings is not None and bool(ctx.site.key) and ctx.site.source in settings.dump_sources

    @classmethod
    def state_from(cls, answer: Answer, syncs: int) -> DumpState:
        return DumpState(_dumps(answer), syncs)

    @classmethod
    def settings_of(cls, options: ViewOptions) -> None:
        """None: snapshot_diff never reconciles on a count of syncs; its own settings are the
        dumps' (`ViewOptions.dump_settings`), which `plan` reads."""
        return None

    def plan(self) -> None:
        ctx = self.ctx
        settings = ctx.sync.options.view_options.dump_settings
        assert settings is not None, "strategy snapshot_diff runs only on a view whose options hold its settings"
        self.diff = settings.snapshot_diff
        self.state = self.STATE.load(ctx.current, ctx.index)
        self.full = None
        self.key_table = None
        self.report: dict = {"reconciled": False, "algorithm": self.diff.algorithm}
        setattr(ctx.metrics, self.REPORT, self.report)
        # no periodic reconciliation: comparing whole dumps misses nothing a full one would find

    def changed_read(self) -> Answer:
        """The agent's differential of the previous dumps and the current ones."""
        ctx = self.ctx
        previous = self.state.dumps if self.state is not None else {}
        control = SnapshotDiffControl(
            site=self.spec(ctx.site.sql),
            previous=previous,
            algorithm=self.diff.algorithm,
            aging_rows=self.diff.aging_rows,
            block_rows=self.diff.block_rows,
            batch_rows=ctx.sync.options.batch_rows,
        )
        body = [frames.json_frame(frames.CONTROL, control.model_dump())]
        rows_path, deleted_path = ctx.staging / "sd-returned.parquet", ctx.staging / "sd-deleted.parquet"
        summary: dict = {}
        with Sink(rows_path, ctx.rows_schema()) as rows, Sink(deleted_path, ctx.deleted_schema()) as deleted:
            sinks = {frames.CHANGED_ROWS: rows, frames.DELETED_KEYS: deleted}
            for frame in ctx.client.exchange("/v1/snapshot_diff", iter(body)):
                if frame.kind == frames.SUMMARY:
                    summary = frame.json()
                elif frame.kind in sinks:
                    sinks[frame.kind].write(frame.batch())
                    ctx.tick(rows.rows)
        m = ctx.metrics
        m.rows_scanned = summary.get("rows_scanned", 0)
        m.rows_received = rows.rows
        m.agent_seconds = summary.get("elapsed_s")
        m.agent_timings = add_timings(m.agent_timings, summary.get("timings"))
        answer = Answer([rows_path], deleted_path, summary)
        self.ctx = replace(ctx, dumps=_dumps(answer))  # every later request of this sync reads these
        self.report.update(
            previous_dumps=previous or None,
            dumps=self.ctx.dumps,
            unchanged=bool(summary.get("unchanged")),
            candidates={op: summary.get(f"{op}s") for op in ("insert", "update", "delete")},
            records={"old": summary.get("records_old"), "new": summary.get("records_new")},
        )
        return answer

    def fallback_reason(self) -> str | None:
        if self.state is None:
            return "no previous dumps kept (the view was loaded by another strategy)"
        gone = self.ranged.summary.get("previous_gone")
        return f"the previous dump cannot be compared: {gone}" if gone else None

    def exchange(self) -> Answer:
        self.ranged = self.changed_read()
        reason = self.fallback_reason()
        if reason is not None:
            return self._reconcile(reason).exchange()
        return self._folded(self.ranged)

    def _folded(self, answer: Answer) -> Answer:
        """The candidate differential folded against the stored rows: a key both deleted
        and returned is not deleted; the stored rows of every key touched are read once,
        and the delta compares the returned rows with them (equal rows give nothing)."""
        ctx, key = self.ctx, self.ctx.site.key
        key_schema = ctx.key_schema()
        rows = pq.read_table(answer.returned[0]).cast(ctx.rows_schema())
        check_unique(rows.select(key), key, source_of(ctx))
        deleted = pq.read_table(answer.deleted).select(key).cast(key_schema)
        pairs = deleted.join(rows.select(key), key, join_type="left semi")
        gone = deleted.join(rows.select(key), key, join_type="left anti")
        touched_rows = ctx.stored_rows(pa.concat_tables([rows.select(key).cast(key_schema), gone]), self.snapshot)
        stored = touched_rows.select(ctx.rows_schema().names).cast(ctx.rows_schema())
        names = ctx.rows_schema().names
        paired_rows = rows.join(pairs, key, join_type="left semi").select(names)
        same = null_keys.join(paired_rows, stored, names, "left semi").num_rows if pairs.num_rows else 0
        self.report.update(useless_pairs=pairs.num_rows, cancelled=same, split_updates=pairs.num_rows - same)
        hint = advice(self.diff, pairs.num_rows, answer.summary.get("records_new") or 0)
        if hint:
            self.report["advice"] = hint
        gone_path = ctx.staging / "sd-gone.parquet"
        pq.write_table(gone, gone_path)
        self.report["keys_deleted"] = gone.num_rows
        self.touched = [answer.returned[0], gone_path]
        return Answer(answer.returned, gone_path, answer.summary, touched_rows)

    def follow_up(self, answer: Answer) -> Answer:
        return self.full.follow_up(answer) if self.full is not None else answer

    @classmethod
    def expected_bytes(cls, estimate: SiteEstimate) -> float:
        """The changed rows (a margin for useless pairs) and the deleted keys: no key
        reconciliation, the agent compares whole dumps.

        >>> from warehouse.planning.cost_model import CostModel
        >>> SnapshotDiff.expected_bytes(SiteEstimate(200, 0.01, 0.1, CostModel(50, 4, 16), 128))
        2520.0
        """
        return CANDIDATE_MARGIN * estimate.changes * estimate.cost.tuple_bytes
