"""full_ship: the agent sends the whole site query; the warehouse diffs it with its snapshot.

The baseline every other strategy must beat, and what a verify sync reads to audit them.
"""

from __future__ import annotations

from remote_agent.protocol import frames
from remote_agent.protocol.models import ExtractControl

from .base import Answer, SiteEstimate, Strategy, extract_exchange
from .tuple_hash import TUPLE_HASH_BITS


class FullShip(Strategy):
    name = "full_ship"

    def plan(self) -> None:
        self.ctx.metrics.tuples_ungrouped = self.ctx.metrics.rows_before

    def exchange(self) -> Answer:
        ctx = self.ctx
        control = ExtractControl(
            site=ctx.spec(),
            seed=ctx.seed,
            hash_bits=ctx.options.hash_bits,
            batch_rows=ctx.options.batch_rows,
            tuple_hash_bits=TUPLE_HASH_BITS,
        )
        answer, _ = extract_exchange(
            ctx, iter([frames.json_frame(frames.CONTROL, control.model_dump())]), hash_bits=ctx.options.hash_bits
        )
        return answer

    @classmethod
    def expected_bytes(cls, estimate: SiteEstimate) -> float:
        """Every row, whatever changed.

        >>> from warehouse.planning import CostModel
        >>> FullShip.expected_bytes(SiteEstimate(1000, 0.01, 0.0, CostModel(50, 4, 16), 128))
        50000.0
        """
        return estimate.full_bytes
