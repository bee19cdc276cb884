"""When a sketch exchange stops and ships the site query whole instead: a bound on what a
sync after a load can cost whatever the churn.

The first sync after a load has no observation to size its main stage from, only the
prior (5 % of the rows updated). At high churn that stage fails to peel, and each wider
one sent after it is paid on top of what follows: a sync at 50 % churn cost 1.15× a full
ship when it ended in the group-hash exchange. Two rules bound it:

- under auto with no observation behind the statistics (`Sketch._guessing`: a view that
  asks for sketch itself keeps its exchange as sized), the stages sent before the change is known
  (the probe and the main stage) may cost at most RISK of shipping the site query whole;
- after the probe, or a stage, fails in such a sync, the next is the widest the agent's
  table allows within that budget (`affordable_width`), narrower than asked if need be;
- after a stage fails, the next goes only if it is worth it: when the failed difference
  still had empty cells, its size is known (`differences_seen`) and the next stage goes
  if its table and the rows it brings back cost less than shipping the site query whole;
  when it had none (only a lower bound is known), and nothing was observed before, only
  while all stages sent stay within RISK of it. Otherwise the site ships whole
  (full_ship's exchange) in the same sync: at most (1 + RISK)× full_ship's bytes.

A sync whose statistics rest on observations keeps to its plan, as sized; only the first
rule's test of worth applies to it.
"""

from __future__ import annotations

import math

from deltasieve_protocol import iblt_bytes
from deltasieve_protocol.defaults import DIGEST_BITS, ROW_CHECK_BITS
from warehouse.planning.cost_model import REQUEST_BYTES, CostModel
from warehouse.strategies.sketch import tables as sketch_tables

#: Share of full_ship's bytes that the stages of a sync with no observation behind it may
#: spend before the change is known (then it either peels or ships whole): the first sync
#: after a load costs at most about 1.08× full_ship whatever the churn (the goal is 1.1×).
RISK = 0.08


def stage_bytes(width: int) -> int:
    """Bytes of a stage `width` cells wide per sub-table (its table, before compression).

    >>> stage_bytes(1), stage_bytes(100)
    (67, 6081)
    """
    return iblt_bytes.table_bytes(width * sketch_tables.HASHES)


def capped_width(main: int, first: int, stored: int, full_bytes: float) -> int:
    """The main stage's width within RISK of `full_bytes`, the probe (`first` wide)
    included: the widest divisor of `stored` not above `main` that fits, at least 1.

    >>> capped_width(630, 1, 1260, 1e9), capped_width(630, 1, 1260, 200_000)
    (630, 252)
    """
    budget = RISK * full_bytes - (stage_bytes(first) if first < main else 0)
    fits = [d for d in sketch_tables.divisors(stored) if d <= main and stage_bytes(d) <= budget]
    return max(fits, default=1)


def affordable_width(width: int, last: int, widest: int, sunk: int, full_bytes: float) -> int:
    """The stage to send after one `last` wide failed, in a sync with nothing observed,
    when the next stage asked for (`width`, a divisor of the agent's table `widest`) would
    take the tables sent past RISK of `full_bytes` with `sunk` bytes sent already: the
    widest divisor of `widest` wider than `last` that stays within it, else `width`.

    The agent's table is often narrower than the warehouse asked (its memory budget), and
    the main stage need not divide it: at 10M rows a main stage of 430,080 cells a
    sub-table against the agent's 645,120 rounded the next stage up to 645,120, 39 MB
    against a budget of 34 MB, and the sync shipped the table whole (410 MiB) where a stage
    of 322,560 (16 MB) peels a change of several percent.

    >>> affordable_width(645_120, 1, 645_120, 71, 430e6)
    322560
    >>> affordable_width(630, 1, 1260, 71, 1e9)  # within budget already
    630
    >>> affordable_width(645_120, 322_560, 645_120, 16_000_000, 430e6)  # nothing wider fits
    645120
    """
    room = RISK * full_bytes - sunk
    if stage_bytes(width) <= room:
        return width
    fits = [d for d in sketch_tables.divisors(widest) if last < d < width and stage_bytes(d) <= room]
    return max(fits, default=width)


def worth_another_stage(
    width: int, seen: float, sunk: int, full_bytes: float, tuple_bytes: float, observed: bool
) -> bool:
    """Whether a stage `width` wide is worth sending after one that failed, having seen
    `seen` differing pairs (infinite: the failed difference had no empty cell) and sent
    `sunk` bytes of tables; otherwise the site ships whole.

    >>> worth_another_stage(600, 900.0, 20_000, 1e6, 50.0, observed=False)  # 36 KB + ~450 rows
    True
    >>> worth_another_stage(60_000, 90_000.0, 20_000, 1e6, 50.0, observed=True)  # more than all the rows
    False
    >>> worth_another_stage(600, math.inf, 60_000, 1e6, 50.0, observed=False)  # past RISK of a guess
    False
    >>> worth_another_stage(600, math.inf, 60_000, 1e6, 50.0, observed=True)
    True
    """
    if not math.isfinite(seen):
        return observed or sunk + stage_bytes(width) <= RISK * full_bytes
    # each changed row is one pair (insert) or two (update): at least seen / 2 rows come back
    return stage_bytes(width) + seen / 2 * tuple_bytes < full_bytes


def probe_pays(first: int, main: int, changes: float, observed: bool) -> bool:
    """Whether a probe `first` wide goes before the main stage (`main` wide): it ends a sync
    that finds nothing in one small table, and adds its table and a request to one that
    finds something. It goes when the chance of finding nothing (the `changes` the
    statistics expect, as Poisson) times the main stage and request it saves outweighs
    that; and always on a guess (`observed` False: the prior's changes are no expectation).

    >>> probe_pays(1, 60, 0.1, True), probe_pays(1, 60, 10.0, True), probe_pays(1, 60, 10.0, False)
    (True, False, True)
    """
    if not observed:
        return True
    return stage_bytes(first) + REQUEST_BYTES < math.exp(-changes) * (stage_bytes(main) + REQUEST_BYTES)


def whole_updates(updates: float, columns: int, cost: CostModel) -> bool:
    """Whether a peeled stage should bring the `updates` expected updated rows whole rather
    than as column digests followed by a cells request: the digests path moves, per row,
    its key, a digest per column, its row check, a bitmap of the changed columns and at least
    one cell back, and costs a request more (REQUEST_BYTES); whole rows cost `tuple_bytes`.

    A 1,000-row table of six columns with 1 % updated brings them whole; ten times as many do not:

    >>> cost = CostModel(tuple_bytes=40.0, key_bytes=3.0, hash_bytes=17.0)
    >>> whole_updates(10.0, 6, cost), whole_updates(100.0, 6, cost)
    (True, False)
    """
    digests = cost.key_bytes + (columns * DIGEST_BITS + ROW_CHECK_BITS) / 8 + math.ceil(columns / 8)
    per_row = digests + cost.tuple_bytes / max(columns, 1)  # at least one changed cell comes back
    return updates * cost.tuple_bytes <= updates * per_row + REQUEST_BYTES
