"""group_hash's closed-form estimate: the survival it carries from size to size is
group_survival's, bit for bit, so auto's choice is what it was when each size started afresh."""

from __future__ import annotations

import random

from warehouse.planning import cost_model as planning
from warehouse.strategies import SiteEstimate
from warehouse.strategies.group_hash.strategy import _SIZES, GroupHash


def _afresh(estimate: SiteEstimate) -> float:
    """The estimate with each size's survival computed by group_survival on its own."""
    p_update = min(max(estimate.p_update, 0.0), 1.0)
    p_delete = min(max(estimate.p_delete, 0.0), 1.0)
    best = 0.0
    for size in _SIZES:
        survival = planning.group_survival([p_update] * size, p_delete)
        best = max(best, planning.expected_benefit(size, survival, estimate.cost) / size)
    return estimate.full_bytes - estimate.rows * best


def test_carried_survival_equals_group_survival_bit_for_bit() -> None:
    rng = random.Random(11)
    for _ in range(200):
        estimate = SiteEstimate(
            rng.randrange(1, 10**6),
            rng.random() ** rng.choice([1, 3, 8]),
            rng.random() ** rng.choice([1, 4, 10]) if rng.random() < 0.7 else 0.0,
            planning.CostModel(rng.uniform(8, 400), rng.uniform(1, 20), 16),
            128,
        )
        assert GroupHash.expected_bytes(estimate) == _afresh(estimate)
