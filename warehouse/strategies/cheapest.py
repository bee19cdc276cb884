"""The strategy that moves the fewest bytes, among those that run on any site.

auto chooses with it, and the change-stamp strategies hand a site to it when they fall back
to a reconciliation of the whole site query. On a sync the Arrow executor runs
(warehouse/executor.py) it leaves out the candidates with a Spark-only step while another can
serve: one would start Spark jobs, about a second of them, for a view small enough to be
synced in tens of milliseconds whole. The strategies a view's own settings make candidates
(`extra`: timestamps, row versions, dump files) are priced as ever: they read only the
changed rows, which the view asked for.
"""

from __future__ import annotations

import math

from warehouse.strategies.base import SiteEstimate, Strategy
from warehouse.strategies.full_ship import FullShip
from warehouse.strategies.group_hash.strategy import GroupHash
from warehouse.strategies.sketch.strategy import Sketch

#: What auto chooses among; of two that expect the same, the earlier (the simpler exchange) wins.
CANDIDATES: tuple[type[Strategy], ...] = (FullShip, GroupHash, Sketch)


def choose(estimate: SiteEstimate, extra: tuple[type[Strategy], ...] = (), *, arrow: bool = False) -> type[Strategy]:
    """The candidate (or one of `extra`) with the least expected bytes; with `arrow` (the
    sync runs on the Arrow executor), a candidate with a Spark-only step
    (`Strategy.spark_only`) is left out while another can serve (`extra` are all kept).

    >>> from warehouse.planning.cost_model import CostModel
    >>> choose(SiteEstimate(100_000, 0.001, 0.0, CostModel(50, 4, 16), 128)).name
    'sketch'
    >>> choose(SiteEstimate(1_000, 0.9, 0.05, CostModel(50, 4, 16), 128)).name
    'full_ship'
    >>> small = SiteEstimate(100, 0.01, 0.0, CostModel(50, 4, 16), 128)
    >>> choose(small).spark_only, choose(small, arrow=True).spark_only
    (True, False)
    """
    costs = {cls: cls.expected_bytes(estimate) for cls in CANDIDATES + extra}  # each priced once
    candidates = list(costs)
    if arrow:
        on_arrow = [c for c in CANDIDATES if not c.spark_only and math.isfinite(costs[c])]
        candidates = [c for c in candidates if c in on_arrow or c in extra] if on_arrow else candidates
    return min(candidates, key=costs.__getitem__)
