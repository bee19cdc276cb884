"""timestamp: read only the rows stamped since the last sync, and reconcile the keys.

Each table of the site query has a last-modified column (the view's `timestamps`). A sync:

1. reads the site query narrowed to the rows whose timestamp (any stamped table's, for a
   join) is at or after the previous watermark minus `timestamp_lag_s`, or NULL (a NULL
   timestamp counts as changed at every sync); the agent reads its database's clock first,
   and that clock, not the warehouse's, is the next watermark;
2. reconciles the keys and builds the exact delta as every strategy of changed rows does
   (changed_rows.py): a snapshot key gone is a delete, a new key the ranged read did not
   return (an insert committed with an older stamp) has its row fetched, and rows re-read
   because of the lag and unchanged give no delta row.

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

from dataclasses import asdict, dataclass

from warehouse.errors import ProtocolError
from warehouse.strategies.base import Answer, Asks, SiteContext, extract_exchange
from warehouse.strategies.changed_rows import ChangedRows, KeptState
from warehouse.strategies.stamps import (
    not_null_aliases,
    ranged_sql,
    since,
    site_stamps,
    site_tables,
    text_aliases,
)
from warehouse.view_options import TimestampSettings, ViewOptions

__all__ = ["STATE_FILE", "Timestamp", "Watermark", "index_serves"]

#: The state file in a version's site directory, and the format it is written in.
STATE_FILE = "timestamp.json"
STATE_FORMAT = 1


@dataclass(frozen=True)
class Watermark(KeptState):
    """The timestamp strategy's state of one site, kept with the fragment."""

    FILE = STATE_FILE
    FORMAT = STATE_FORMAT

    watermark: str  # the source's clock at the start of the last read
    syncs: int  # ranged syncs since the last full reconciliation

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Watermark:
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


def _clock(answer: Answer) -> str:
    clock = answer.summary.get("source_clock")
    if not clock:
        raise ProtocolError("the agent reported no source clock: the timestamp strategy needs an agent that reads it")
    return clock


class Timestamp(ChangedRows):
    name = "timestamp"
    STATE = Watermark
    STATE_REQUEST = Asks(source_clock=True)
    REPORT = "timestamp"

    settings: TimestampSettings

    @classmethod
    def settings_of(cls, options: ViewOptions) -> TimestampSettings | None:
        return options.timestamp_settings

    @classmethod
    def applies(cls, ctx: SiteContext) -> bool:
        """Whether the view is keyed and has a timestamp for every table of the site query."""
        settings = cls.settings_of(ctx.sync.options.view_options)
        if settings is None or not ctx.site.key or ctx.site.grouped:
            return False
        stamps = site_stamps(ctx.site, settings)
        return all(alias in stamps for _, alias in site_tables(ctx.site))

    @classmethod
    def state_from(cls, answer: Answer, syncs: int) -> Watermark:
        return Watermark(_clock(answer), syncs)

    def changed_read(self) -> Answer:
        """The rows stamped since the watermark minus the lag (none without a watermark), and the clock."""
        ctx = self.ctx
        stamps = site_stamps(ctx.site, self.settings)
        self.report["lag_s"] = self.settings.timestamp_lag_s
        if self.state is not None:
            bound = since(self.state.watermark, self.settings.timestamp_lag_s)
            not_null, text = not_null_aliases(ctx.site, self.settings), text_aliases(ctx.site, self.settings)
            sql = ranged_sql(ctx.site, stamps, bound, not_null, text)
        else:  # nothing to read from: just the clock
            bound, sql = None, ranged_sql(ctx.site, {}, None)
        answer = extract_exchange(
            ctx, spec=self.spec(sql), prefix="ts-", asks=Asks(source_clock=True, query_plan=self.state is not None)
        )
        plan = answer.summary.get("query_plan")
        if plan is not None:
            self.report["index_used"] = index_serves(plan, set(stamps.values()))
            self.report["query_plan"] = plan
        self.report.update(
            previous_watermark=self.state.watermark if self.state else None,
            read_from=bound,
            watermark=_clock(answer),
        )
        return answer
