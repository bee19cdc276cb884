"""auto: per site and per sync, the strategy the statistics expect to move the fewest bytes.

Each candidate says what this sync would cost it (`expected_bytes`, from the same update and
deletion statistics and the measured sizes of a tuple, a key and a hash); auto hands the site's sync to the cheapest.
The sync's metrics say what was chosen (`chosen`) and what each candidate expected. The
choice is the same on both executors: every candidate runs on either.

Some strategies need something of the view: `timestamp` a timestamp column for every table
of the site query (the view's `timestamps`), `row_version` a PostgreSQL source (as it was
when the view was defined), `snapshot_diff` a source that is a directory of dump files. Where the view has them, auto counts that strategy among the
candidates, and the view's load reads the source's clock (or snapshot) so that a later sync
can start from it; elsewhere it never considers it.
"""

from __future__ import annotations

from warehouse.strategies.base import SiteContext, SiteEstimate, Snapshot, Strategy
from warehouse.strategies.cheapest import choose
from warehouse.strategies.row_version.strategy import RowVersion
from warehouse.strategies.snapshot_diff import SnapshotDiff
from warehouse.strategies.timestamp import Timestamp

#: Candidates only where the view or its source allows them (`applies`), after the others.
CONDITIONAL: tuple[type[Strategy], ...] = (Timestamp, RowVersion, SnapshotDiff)


def conditional(ctx: SiteContext) -> tuple[type[Strategy], ...]:
    """The conditional candidates this site allows."""
    return tuple(cls for cls in CONDITIONAL if cls.applies(ctx))


class Auto(Strategy):
    """Never runs itself: `create` hands the site to the chosen strategy."""

    name = "auto"

    @classmethod
    def create(cls, ctx: SiteContext, snapshot: Snapshot) -> Strategy:
        chosen = choose(snapshot.statistics, conditional(ctx))
        ctx.metrics.chosen = chosen.name
        return chosen.create(ctx, snapshot)

    @classmethod
    def create_load(cls, ctx: SiteContext, snapshot: Snapshot) -> Strategy | None:
        """The load of the first conditional candidate that applies (it keeps state), else the shared one."""
        for candidate in conditional(ctx):
            return candidate.create_load(ctx, snapshot)
        return None

    @classmethod
    def expected_bytes(cls, estimate: SiteEstimate) -> float:
        return choose(estimate).expected_bytes(estimate)
