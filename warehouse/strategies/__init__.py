"""The ways to find a site query's delta, one module each, registered here by name.

A view's `strategy` names one of them. Whatever the strategy, a view's first sync (the load)
ships its site queries whole: there is nothing yet to compare with.
"""

from __future__ import annotations

import math

from warehouse.strategies.auto import Auto
from warehouse.strategies.base import FragmentBuild, SiteContext, SiteEstimate, Snapshot, Strategy
from warehouse.strategies.full_ship import FullShip
from warehouse.strategies.group_hash.strategy import GroupHash
from warehouse.strategies.range_checksum import RangeChecksum
from warehouse.strategies.row_version.strategy import RowVersion
from warehouse.strategies.sketch.strategy import Sketch
from warehouse.strategies.snapshot_diff import SnapshotDiff
from warehouse.strategies.timestamp import Timestamp
from warehouse.strategies.tuple_hash import TupleHash

#: Name -> strategy class, in the order the README and the benchmarks list them.
STRATEGIES: dict[str, type[Strategy]] = {
    cls.name: cls
    for cls in (Auto, Sketch, GroupHash, TupleHash, RangeChecksum, FullShip, Timestamp, RowVersion, SnapshotDiff)
}
#: The strategy of a load, whatever the view's.
LOAD = FullShip

__all__ = ["LOAD", "STRATEGIES", "FragmentBuild", "SiteContext", "SiteEstimate", "Snapshot", "Strategy"]


def expected_bytes(estimate: SiteEstimate, ctx: SiteContext | None = None) -> dict[str, float | None]:
    """What each strategy expects a sync to cost, given the statistics; None for one that
    cannot serve this sync, or (given the site's `ctx`) cannot run on the site as the view is
    defined (row_version off PostgreSQL, snapshot_diff off dump files, timestamp without
    stamps; each of them under a strategy other than itself and auto, whose options hold
    none of its settings).

    >>> from warehouse.planning.cost_model import CostModel
    >>> costs = expected_bytes(SiteEstimate(10_000, 0.001, 0.0, CostModel(50, 4, 16), 128))
    >>> sorted(costs) == sorted(set(STRATEGIES) - {"auto"}) and costs["full_ship"] == 500_000.0
    True
    """
    out: dict[str, float | None] = {}
    for name, cls in STRATEGIES.items():
        if cls is not Auto:
            if ctx is not None and not cls.applies(ctx):
                out[name] = None
                continue
            cost = cls.expected_bytes(estimate)
            out[name] = round(cost, 1) if math.isfinite(cost) else None  # None: cannot serve this sync
    return out
