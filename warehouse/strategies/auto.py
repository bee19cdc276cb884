"""auto: per site and per sync, the strategy the statistics expect to move the fewest bytes.

Each candidate says what this sync would cost it (`expected_bytes`, from the same ω± and ω−
and the measured Φ sizes); auto hands the site's sync to the cheapest.
The sync's metrics say what was chosen (`chosen`) and what each candidate expected.
"""

from __future__ import annotations

from .base import SiteContext, SiteEstimate, Strategy
from .full_ship import FullShip
from .group_hash import GroupHash
from .sketch import Sketch

#: What auto chooses among; of two that expect the same, the earlier (the simpler exchange) wins.
CANDIDATES: tuple[type[Strategy], ...] = (FullShip, GroupHash, Sketch)


def choose(estimate: SiteEstimate) -> type[Strategy]:
    """The candidate with the least expected bytes.

    >>> from warehouse.planning import CostModel
    >>> choose(SiteEstimate(100_000, 0.001, 0.0, CostModel(50, 4, 16), 128)).name
    'sketch'
    >>> choose(SiteEstimate(1_000, 0.9, 0.05, CostModel(50, 4, 16), 128)).name
    'full_ship'
    """
    return min(CANDIDATES, key=lambda cls: cls.expected_bytes(estimate))


class Auto(Strategy):
    """Never runs itself: `create` hands the site to the chosen strategy."""

    name = "auto"

    @classmethod
    def create(cls, ctx: SiteContext) -> Strategy:
        chosen = choose(ctx.estimate)
        ctx.metrics.chosen = chosen.name
        return chosen.create(ctx)

    @classmethod
    def expected_bytes(cls, estimate: SiteEstimate) -> float:
        return choose(estimate).expected_bytes(estimate)
