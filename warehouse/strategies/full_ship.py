"""full_ship: the agent sends the whole site query; the warehouse diffs it with its snapshot.

The baseline every other strategy must beat, and what a verify sync reads to audit them.
Also every view's load. A read that fails part way resumes from the rows received
(resumable.py).
"""

from __future__ import annotations

from warehouse.strategies.base import Answer, FragmentBuild, SiteEstimate, Strategy
from warehouse.strategies.resumable import full_read


class FullShip(Strategy):
    name = "full_ship"

    def plan(self) -> None:
        self.ctx.metrics.tuples_ungrouped = self.ctx.metrics.rows_before

    def exchange(self) -> Answer:
        return full_read(self.ctx)

    def fragment_build(self) -> FragmentBuild:
        return FragmentBuild.UNTOUCHED_GONE  # the whole site query came back

    @classmethod
    def expected_bytes(cls, estimate: SiteEstimate) -> float:
        """Every row, whatever changed.

        >>> from warehouse.planning.cost_model import CostModel
        >>> FullShip.expected_bytes(SiteEstimate(1000, 0.01, 0.0, CostModel(50, 4, 16), 128))
        50000.0
        """
        return estimate.full_bytes
