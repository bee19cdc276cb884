"""row_version: on PostgreSQL, read only the rows written since the last sync's snapshot.

PostgreSQL stamps every row version with the transaction that wrote it (`xmin`), which a
SELECT-only role may read, so a table needs no timestamp column. A sync, per site:

1. asks the agent for the site query narrowed to the rows of any of its tables whose xmin is
   at or after the previous snapshot's xmin (`changed_since`: the agent writes the predicate
   itself and the database evaluates it, so only candidate rows cross the link) and for the
   database's current snapshot (`source_snapshot`), read before the first chunk: the next
   sync's starting point. Why the previous *xmin*, and why that is safe with transactions
   that were running and with subtransactions, is in warehouse/strategies/row_version/xid_snapshots.py;
2. reconciles the keys and builds the exact delta as every strategy of changed rows does
   (changed_rows.py): hard deletes and rows that left the WHERE clause show as keys gone;
   candidates that did not change (a transaction that rewrote equal values, rows re-read
   because their transaction ended between the snapshot's xmin and xmax) give no delta row.

When the snapshot cannot be compared — none kept, another server, a counter that went back,
too many transactions since — the site is reconciled in full and the report's `fallback`
says why; so it is every `reconcile_every` syncs. The snapshot, the server's identity and the
syncs since the last reconciliation are kept in `row_version.json` beside the fragment.
"""

from __future__ import annotations

from dataclasses import dataclass

from warehouse.errors import ProtocolError
from warehouse.strategies.base import Answer, Asks, SiteContext, extract_exchange
from warehouse.strategies.changed_rows import ChangedRows, KeptState
from warehouse.strategies.row_version.xid_snapshots import Snapshot, fallback_reason
from warehouse.strategies.stamps import ranged_sql
from warehouse.view_options import RowVersionSettings, ViewOptions

#: The state file in a version's site directory, and the format it is written in.
STATE_FILE = "row_version.json"
STATE_FORMAT = 1


@dataclass(frozen=True)
class SnapshotState(KeptState):
    """The row_version strategy's state of one site, kept with the fragment."""

    FILE = STATE_FILE
    FORMAT = STATE_FORMAT

    snapshot: Snapshot  # the source's snapshot at the start of the last read
    syncs: int  # syncs of changed rows since the last full reconciliation

    def to_json(self) -> dict:
        return {"snapshot": self.snapshot.to_json(), "syncs": self.syncs}

    @classmethod
    def from_json(cls, data: dict) -> SnapshotState:
        return cls(Snapshot.from_json(data["snapshot"]), int(data["syncs"]))


def _snapshot(answer: Answer) -> Snapshot:
    reported = answer.summary.get("source_snapshot")
    if not reported:
        raise ProtocolError("the agent reported no source snapshot: row_version needs an agent that reads it")
    try:
        return Snapshot.from_json(reported)
    except (KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(f"the agent's source snapshot is malformed: {exc}") from None


class RowVersion(ChangedRows):
    name = "row_version"
    STATE = SnapshotState
    STATE_REQUEST = Asks(source_snapshot=True)
    REPORT = "row_version"

    @classmethod
    def settings_of(cls, options: ViewOptions) -> RowVersionSettings | None:
        return options.row_version_settings

    @classmethod
    def applies(cls, ctx: SiteContext) -> bool:
        """Whether the view is keyed and the site's source was on PostgreSQL when the view was defined."""
        settings = cls.settings_of(ctx.sync.options.view_options)
        return (
            settings is not None
            and bool(ctx.site.key)
            and not ctx.site.grouped
            and ctx.site.source in settings.row_version_sources
        )

    @classmethod
    def state_from(cls, answer: Answer, syncs: int) -> SnapshotState:
        return SnapshotState(_snapshot(answer), syncs)

    def changed_read(self) -> Answer:
        """The rows written since the previous snapshot's xmin (none without one), and the snapshot."""
        ctx = self.ctx
        previous = self.state.snapshot if self.state is not None else None
        if previous is not None:
            answer = extract_exchange(ctx, prefix="rv-", asks=Asks(source_snapshot=True, changed_since=previous.xmin))
        else:  # nothing to compare with: just the snapshot
            answer = extract_exchange(
                ctx, spec=self.spec(ranged_sql(ctx.site, {}, None)), prefix="rv-", asks=Asks(source_snapshot=True)
            )
        self.current = _snapshot(answer)
        self.report.update(
            previous_snapshot=previous.to_json() if previous else None,
            snapshot=self.current.to_json(),
            read_from_xmin=previous.xmin if previous else None,
        )
        return answer

    def fallback_reason(self) -> str | None:
        return fallback_reason(self.state.snapshot if self.state else None, self.current)
