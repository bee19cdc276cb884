"""auto: per site and per sync, the strategy the statistics expect to move the fewest bytes.

Each candidate says what this sync would cost it (`expected_bytes`, from the same ω± and ω−
and the measured Φ sizes); auto plans with the cheapest and hands every later step to it.
The sync's metrics say what was chosen (`chosen`) and what each candidate expected.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from ..storage import Version
from .base import Answer, DeltaInputs, SiteEstimate, Strategy
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
    name = "auto"

    def plan(self) -> None:
        chosen = choose(self.ctx.estimate)
        self.ctx.metrics.chosen = chosen.name
        self.inner = chosen(self.ctx)
        self.inner.plan()

    def exchange(self) -> Answer:
        return self.inner.exchange()

    def follow_up(self, answer: Answer) -> Answer:
        return self.inner.follow_up(answer)

    def unchanged_keys(self) -> DataFrame | None:
        return self.inner.unchanged_keys()

    def delta_inputs(self, answer: Answer) -> DeltaInputs:
        return self.inner.delta_inputs(answer)

    def stage(self, staged: Version) -> None:
        self.inner.stage(staged)

    @classmethod
    def expected_bytes(cls, estimate: SiteEstimate) -> float:
        return choose(estimate).expected_bytes(estimate)
