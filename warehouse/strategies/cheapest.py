"""The strategy that moves the fewest bytes, among those that run on any site.

auto chooses with it, and the change-stamp strategies hand a site to it when they fall back
to a reconciliation of the whole site query. Every candidate runs on either executor
(warehouse/executor.py), so the choice is the same on both.
"""

from __future__ import annotations

from warehouse.strategies.base import SiteEstimate, Strategy
from warehouse.strategies.full_ship import FullShip
from warehouse.strategies.group_hash.strategy import GroupHash
from warehouse.strategies.sketch.strategy import Sketch

#: What auto chooses among; of two that expect the same, the earlier (the simpler exchange) wins.
CANDIDATES: tuple[type[Strategy], ...] = (FullShip, GroupHash, Sketch)


def choose(estimate: SiteEstimate, extra: tuple[type[Strategy], ...] = ()) -> type[Strategy]:
    """The candidate (or one of `extra`) with the least expected bytes.

    >>> from warehouse.planning.cost_model import CostModel
    >>> choose(SiteEstimate(100_000, 0.001, 0.0, CostModel(50, 4, 16), 128)).name
    'sketch'
    >>> choose(SiteEstimate(1_000, 0.9, 0.05, CostModel(50, 4, 16), 128)).name
    'full_ship'
    """
    costs = {cls: cls.expected_bytes(estimate) for cls in CANDIDATES + extra}  # each priced once
    return min(costs, key=costs.__getitem__)
