"""Probabilities, the cost model and group selection: the planning half of a sync.

Everything here is pure and uses the standard library only, so the same code runs on the
driver (tests, small plans) and inside Spark executors (one `GroupBuilder` per partition).

Vocabulary: a tuple's *update probability* comes from its update statistics, two counters
stored beside it (names.TNO, names.UNO): *syncs seen*, counting the one that brought it in,
and *updates seen*, counting that entry as one. The site's *deletion probability* comes from
its deletion statistics: per sync, the tuples before it and the tuples it deleted. A
group's *survival* is the chance that none of its tuples is updated or deleted before the
next sync, i.e. that its hash will match and its tuples need not travel.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

#: Largest group the planner builds, even while the expected benefit still grows. A changed
#: group is re-shipped whole and the agent keeps a group's keys in memory while it reads,
#: so the cap bounds both the worst-case cost of one miss and the agent's bookkeeping.
MAX_GROUP_SIZE = 4096

#: How a group decides to take the next tuple.
#: "per_tuple": while it raises the group's expected benefit per tuple, EB / n (EB: expected
#:   benefit in bytes; n: tuples in the group). Over a run of similar tuples this maximises
#:   the plan's total Σ EB: growing each group for as long as its own EB rises makes groups
#:   of about 1/P(change per tuple) tuples, far past the size at which a change (which
#:   re-ships the whole group) stops paying for the hash saved. With tuples of 45 bytes,
#:   keys of 3.4 and hashes of 17.7 (CostModel) and 0.3 % change per tuple, "group" forms
#:   groups of ~300 tuples, "per_tuple" of ~11.
#: "group": while it raises the group's own EB, as Algorithm 1 (group selection) of Lu, Liu
#:   and Hyland does.
GROUPING_CRITERIA = ("per_tuple", "group")
DEFAULT_GROUPING: Final = "per_tuple"

#: What a request to the agent costs on the wire whatever it carries: HTTP headers both ways
#: (about 510 bytes), a control frame naming the site query by reference and a summary frame.
#: Measured: a change-token request, which carries nothing else, moves 795-800 bytes
#: (bench-small, 1,000 and 10,000 rows, loopback). Planning prices a round trip at these
#: bytes alone, a lower bound of what it costs in time: a round trip this saves moves no more bytes.
REQUEST_BYTES = 800


@dataclass(frozen=True)
class CostModel:
    """Average on-the-wire sizes in bytes, measured from the actual encoding."""

    tuple_bytes: float  # Φ_t: a tuple, as encoded
    key_bytes: float  # Φ_k: a key, as encoded
    hash_bytes: float  # Φ_h: a group hash plus its per-unit overhead such as the uid

    def __post_init__(self) -> None:
        for name in ("tuple_bytes", "key_bytes", "hash_bytes"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite size >= 0, got {value!r}")
            object.__setattr__(self, name, float(value))  # ints welcome; results stay float
        if self.tuple_bytes == 0:
            raise ValueError("tuple_bytes must be > 0")


@dataclass
class Group:
    """A planned group: a contiguous run of the sorted input."""

    start: int  # index into the sorted input of the first tuple
    size: int
    survival: float  # probability that no tuple of the group is updated or deleted
    benefit: float  # expected benefit EB in bytes


@dataclass
class ClosedGroup(Group):
    """A group reported by `GroupBuilder`, with its builder-local id."""

    index: int  # 0, 1, 2, ... in the order the builder opened the groups


# --- probabilities -----------------------------------------------------------------------


def _check_probability(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:  # also rejects NaN
        raise ValueError(f"{name} must lie in [0, 1], got {value!r}")


def update_probability(syncs_seen: int, updates_seen: int, prior: float | None = None) -> float:
    """Probability that a tuple is updated before the next sync, from its statistics.

    Args:
        syncs_seen: syncs the tuple has been part of, counting its entry (starts at 1).
        updates_seen: 1 for the entry plus one per sync that really updated it
            (1 <= updates_seen <= syncs_seen).
        prior: None for Lu, Liu and Hyland's estimate updates_seen / syncs_seen; otherwise
            the mean p0 of a Beta prior worth one observation, giving the posterior mean
            (updates_seen - 1 + p0) / syncs_seen. The entry carries no update information,
            so only syncs_seen - 1 syncs are evidence.

    >>> update_probability(4, 2)
    0.5
    >>> update_probability(1, 1, prior=0.25)    # a new tuple: just the prior
    0.25
    >>> update_probability(4, 2, prior=0.2)     # (1 + 0.2) / 4
    0.3
    >>> update_probability(4, 2, prior=1.0) == update_probability(4, 2)
    True
    """
    if syncs_seen < 1:
        raise ValueError(f"syncs seen must be >= 1, got {syncs_seen}")
    if not 1 <= updates_seen <= syncs_seen:
        raise ValueError(f"updates seen must lie in [1, syncs seen ({syncs_seen})], got {updates_seen}")
    if prior is None:
        p = updates_seen / syncs_seen
    else:
        _check_probability("prior", prior)
        p = (updates_seen - 1 + prior) / syncs_seen
    return min(1.0, max(0.0, p))


def site_prior(observations: int, updates: int, default: float) -> float:
    """The update rate observed over all of a site's tuples, or `default` before any sync.

    Args:
        observations: sum over the tuples of their syncs seen minus their entry.
        updates: sum over the tuples of their updates seen minus their entry: real updates.
        default: the prior to use while nothing has been observed.

    >>> site_prior(40, 10, default=0.5)
    0.25
    >>> site_prior(0, 0, default=0.5)
    0.5
    """
    _check_probability("default", default)
    if observations < 0 or updates < 0:
        raise ValueError("statistic sums must be >= 0")
    if updates > observations:
        raise ValueError(f"more updates ({updates}) than observations ({observations})")
    if observations == 0:
        return default
    return updates / observations


def deletion_probability(history: Sequence[tuple[int, int]]) -> float:
    """Probability that a tuple is deleted by the next sync: the mean per-sync deletion ratio.

    Args:
        history: deletion statistics, one (tuples before, tuples deleted) pair per past
            sync. Syncs that began on an empty snapshot carry no ratio.

    >>> deletion_probability([(100, 10), (50, 0), (0, 0)])
    0.05
    >>> deletion_probability([])
    0.0
    """
    ratios = []
    for before, deleted in history:
        if before < 0 or not 0 <= deleted <= max(before, 0):
            raise ValueError(f"deletion statistics need 0 <= deleted <= before, got ({before}, {deleted})")
        if before > 0:
            ratios.append(deleted / before)
    return sum(ratios) / len(ratios) if ratios else 0.0


def _survival_step(survival: float, p_update: float, p_keep: float) -> float:
    """Survival of a group after one more tuple joins it."""
    return survival * (p_keep * (1.0 - p_update))


def group_survival(update_probs: Sequence[float], p_delete: float) -> float:
    """Probability that no tuple of a group is updated or deleted before the next sync.

    Equal to (1 - p_delete)**n * prod(1 - p); computed tuple by tuple, in the same order and
    with the same rounding as `GroupBuilder`, so both give bit-identical results.

    >>> group_survival([0.5, 0.0], p_delete=0.5)
    0.125
    >>> group_survival([], p_delete=0.3)
    1.0
    """
    _check_probability("p_delete", p_delete)
    survival, keep = 1.0, 1.0 - p_delete
    for p in update_probs:
        if not 0.0 <= p <= 1.0:
            _check_probability("update probability", p)
        survival = survival * (keep * (1.0 - p))  # _survival_step, inline: auto prices groups at every sync
    return survival


# --- cost model --------------------------------------------------------------------------


def saving_if_identical(n: int, cost: CostModel) -> float:
    """μ: bytes saved by a group of n tuples whose hash matches (keys and hash sent instead).

    >>> saving_if_identical(20, CostModel(tuple_bytes=100, key_bytes=10, hash_bytes=20))
    1780.0
    """
    return (cost.tuple_bytes - cost.key_bytes) * n - cost.hash_bytes


def expected_benefit(n: int, survival: float, cost: CostModel) -> float:
    """EB: bytes a group of n tuples is expected to save, given its survival probability.

    When the group survives it saves μ; when it does not, its keys and hash were sent for
    nothing (and the tuples travel anyway), a loss of Φ_k·n + Φ_h, where Φ_k is the bytes
    of a key and Φ_h those of a group hash (CostModel).

    Lu, Liu and Hyland's example: 20 tuples of 100 bytes, 10-byte keys, a 160-bit hash, no change
    expected, saves 1,780 bytes (14,240 bits).

    >>> cost = CostModel(tuple_bytes=100, key_bytes=10, hash_bytes=20)
    >>> expected_benefit(20, 1.0, cost), expected_benefit(20, 1.0, cost) * 8
    (1780.0, 14240.0)
    >>> expected_benefit(1, 0.0, cost)      # surely changed: keys and hash are wasted
    -30.0
    """
    if n < 1:
        raise ValueError(f"a group holds at least one tuple, got n={n}")
    _check_probability("survival", survival)
    loss = cost.key_bytes * n + cost.hash_bytes
    return saving_if_identical(n, cost) * survival - loss * (1.0 - survival)


def saving_ratio(n: int, cost: CostModel) -> float:
    """Fraction of a group's bytes saved when its hash matches: μ / (Φ_t·n).

    Φ_t is the bytes of a tuple and μ the bytes the group saves (saving_if_identical).

    >>> saving_ratio(20, CostModel(tuple_bytes=100, key_bytes=10, hash_bytes=20))
    0.89
    """
    if n < 1:
        raise ValueError(f"a group holds at least one tuple, got n={n}")
    return saving_if_identical(n, cost) / (cost.tuple_bytes * n)


# --- group selection ---------------------------------------------------------------------


class GroupBuilder:
    """Streaming group selection (Lu, Liu and Hyland's Algorithm 1, corrected) over tuples in ascending order.

    Feed the update probabilities of the tuples one by one, most stable first:

    - `push(p)` returns the builder-local id (0, 1, 2, ...) of the group the tuple joins,
      or None when it stays ungrouped (the agent will send it in full). The id is
      provisional while its group is open (`open_start` is not None and the tuple's
      position is at or after it): if that group closes with EB <= 0 it is `rejected` and
      its tuples are ungrouped after all.
    - `closed` lists the accepted groups (`ClosedGroup`: index, start, size, survival,
      benefit) in order; a group is appended when the tuple after it cannot raise its EB,
      and the last open one at `finish()`.

    Rules: a tuple joins the open group while that strictly raises the group's EB per tuple
    (criterion "per_tuple", the default) or its EB ("group", Lu, Liu and Hyland's rule), and the
    group is below `max_group_size`; otherwise the group closes and the tuple opens a new
    one. A group starts from one tuple even when that tuple alone is not worth a hash (a
    hash usually costs more than one compressed tuple); it is judged when it closes. A
    closed group whose EB is <= 0 stops the selection: its tuples and every later one are
    ungrouped, since later tuples are less stable and cannot form a better group. Each
    push costs O(1): the open group keeps its running survival.

    >>> b = GroupBuilder(0.0, CostModel(tuple_bytes=64, key_bytes=16, hash_bytes=8))
    >>> [b.push(p) for p in (0.0, 0.0, 0.5, 0.75)]
    [0, 0, 1, 2]
    >>> [(g.index, g.start, g.size, g.benefit) for g in b.finish()]
    [(0, 0, 2, 88.0), (1, 2, 1, 8.0)]
    >>> (b.rejected.start, b.rejected.size, b.rejected.benefit)
    (3, 1, -8.0)
    """

    def __init__(
        self, p_delete: float, cost: CostModel, max_group_size: int = MAX_GROUP_SIZE, criterion: str = DEFAULT_GROUPING
    ):
        _check_probability("p_delete", p_delete)
        if criterion not in GROUPING_CRITERIA:
            raise ValueError(f"unknown grouping criterion {criterion!r}; use one of {GROUPING_CRITERIA}")
        self.per_tuple = criterion == "per_tuple"
        if max_group_size < 1:
            raise ValueError(f"max_group_size must be >= 1, got {max_group_size}")
        self.cost = cost
        self.max_group_size = max_group_size
        self.closed: list[ClosedGroup] = []
        self.rejected: ClosedGroup | None = None
        self.stopped = False
        self._keep = 1.0 - p_delete
        self._pushed = 0
        self._last_p = 0.0
        self._open: ClosedGroup | None = None
        self._finished = False

    @property
    def pushed(self) -> int:
        """Tuples fed so far."""
        return self._pushed

    @property
    def open_start(self) -> int | None:
        """Position of the first tuple of the open group: decisions from there on may change."""
        return None if self._open is None else self._open.start

    def push(self, p: float) -> int | None:
        """Place the next tuple, whose update probability is p; return its group id or None."""
        if self._finished:
            raise RuntimeError("push() after finish()")
        _check_probability("update probability", p)
        if p < self._last_p:
            raise ValueError(f"update probabilities must arrive in ascending order: {p!r} after {self._last_p!r}")
        self._last_p = p
        position = self._pushed
        self._pushed += 1
        if self.stopped:
            return None
        group = self._open
        if group is not None and group.size < self.max_group_size:
            survival = _survival_step(group.survival, p, self._keep)
            benefit = expected_benefit(group.size + 1, survival, self.cost)
            if self._better(benefit, group.size + 1, group.benefit, group.size):
                group.size += 1
                group.survival, group.benefit = survival, benefit
                return group.index
        if not self._close_open():
            return None
        survival = _survival_step(1.0, p, self._keep)
        benefit = expected_benefit(1, survival, self.cost)
        self._open = ClosedGroup(start=position, size=1, survival=survival, benefit=benefit, index=len(self.closed))
        return self._open.index

    def _better(self, benefit: float, size: int, old_benefit: float, old_size: int) -> bool:
        # Strictly: a tie cuts, since a bigger group for nothing is a worse bet.
        if self.per_tuple:
            return benefit * old_size > old_benefit * size
        return benefit > old_benefit

    def finish(self) -> list[ClosedGroup]:
        """Close the open group, if any, and return every accepted group; idempotent."""
        self._close_open()
        self._finished = True
        return self.closed

    def _close_open(self) -> bool:
        """Close the open group; False (and stop) if it is not worth its hash."""
        group, self._open = self._open, None
        if group is None:
            return True
        if group.benefit <= 0:
            self.rejected = group
            self.stopped = True
            return False
        self.closed.append(group)
        return True


def select_groups(
    update_probs: Sequence[float],
    p_delete: float,
    cost: CostModel,
    max_group_size: int = MAX_GROUP_SIZE,
    criterion: str = DEFAULT_GROUPING,
) -> list[Group]:
    """The grouping plan of tuples already sorted most stable first (ascending probability).

    Returns:
        The groups in order; they cover a prefix of the input without gaps, and the tuples
        after the last group stay ungrouped.

    >>> cost = CostModel(tuple_bytes=64, key_bytes=16, hash_bytes=8)
    >>> select_groups([0.0, 0.0, 0.5, 0.5], p_delete=0.0, cost=cost)
    [Group(start=0, size=2, survival=1.0, benefit=88.0), Group(start=2, size=1, survival=0.5, benefit=8.0), Group(start=3, size=1, survival=0.5, benefit=8.0)]
    >>> select_groups([1.0], p_delete=0.0, cost=cost)
    []
    """
    builder = GroupBuilder(p_delete, cost, max_group_size, criterion)
    for p in update_probs:  # keeps pushing after a stop, to check the order of every tuple
        builder.push(p)
    return [Group(g.start, g.size, g.survival, g.benefit) for g in builder.finish()]
