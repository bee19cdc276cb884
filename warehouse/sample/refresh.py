"""Deferred refresh of a random sample from its candidate log.

The algorithms are those of Gemulla and Lehner, "Deferred Maintenance of Disk-Based Random
Samples" (the deferred-sampling paper).

A sample of m rows kept by reservoir sampling logs, instead of applying, each inserted row
that passes the acceptance test: the candidate log c_0, c_1, ..., c_{l-1}, in order of
arrival. Applied one by one, each candidate would overwrite a uniformly chosen position of
the sample, and a later candidate may overwrite an earlier one. A refresh computes at once
which candidates are final (never overwritten) and which positions they take, so that it
reads only those candidates and writes only those positions, both in ascending order: one
sequential pass over the log and one over the sample. Each function below returns that
plan as (position, candidate index) pairs, positions ascending, indexes ascending.

- `array_refresh`: replays the log on an array of m slots (memory m), then hands the final
  candidates to the occupied slots in log order.
- `stack_refresh`: walks the log backwards. The newest candidate is final; after k final
  ones, the next final one is found by skipping a geometric number of candidates (each
  lands on one of the k taken positions with probability k/m). The indexes are stacked
  (memory Ψ, the number of final candidates), then the sample is scanned and position j
  takes the next one with probability (candidates left) / (positions left).
- `nomem_refresh`: the same skips, generated twice from one saved generator state, the
  first time only to add them up, so that the indexes come out ascending without being
  stored (memory O(1), twice the random numbers).

The three give the same distribution of plans; `method` picks stack while the expected
number of final candidates is small and nomem above, as the deferred-sampling paper advises.
"""

from __future__ import annotations

import copy

import numpy as np

#: Below this many expected final candidates the stack's memory is negligible and it is
#: the fastest; above, nomem refreshes without memory (as the deferred-sampling
#: paper advises).
STACK_LIMIT = 4_000

Plan = list[tuple[int, int]]


def expected_displaced(m: int, log_length: int) -> float:
    """E(Ψ), the expected number Ψ of final candidates: m (1 - (1 - 1/m)^l).

    m is the sample size and l the length of the candidate log.

    >>> round(expected_displaced(5, 11), 2), expected_displaced(10, 0)
    (4.57, 0.0)
    """
    if m <= 0 or log_length <= 0:
        return 0.0
    return m * (1.0 - (1.0 - 1.0 / m) ** log_length)


def method(m: int, log_length: int) -> str:
    """The refresh to use: "stack" while E(Ψ) is below STACK_LIMIT, else "nomem".

    >>> method(10_000, 100), method(1_000_000, 100_000)
    ('stack', 'nomem')
    """
    return "stack" if expected_displaced(m, log_length) < STACK_LIMIT else "nomem"


def refresh(name: str, m: int, log_length: int, rng: np.random.Generator) -> Plan:
    """The plan of the refresh called `name` ("array", "stack" or "nomem")."""
    return {"array": array_refresh, "stack": stack_refresh, "nomem": nomem_refresh}[name](m, log_length, rng)


def array_refresh(m: int, log_length: int, rng: np.random.Generator) -> Plan:
    """Replay the log on m slots: candidate i overwrites a random slot. The final candidates
    are then read in log order and written to the occupied slots in position order (which
    candidate takes which of those slots does not matter: positions are exchangeable).

    >>> plan = array_refresh(5, 11, np.random.default_rng(1))
    >>> [p for p, _ in plan] == sorted(p for p, _ in plan) and all(0 <= i < 11 for _, i in plan)
    True
    """
    if m <= 0 or log_length <= 0:
        return []
    slots = np.full(m, -1, dtype=np.int64)
    for i, slot in enumerate(rng.integers(0, m, size=log_length)):
        slots[slot] = i
    taken = np.flatnonzero(slots >= 0)
    return list(zip(taken.tolist(), np.sort(slots[taken]).tolist(), strict=True))


def _skip(k: int, m: int, rng: np.random.Generator) -> int:
    """Candidates skipped, walking back, before the next final one when k are final: each
    falls on a taken position with probability k/m (a geometric count of failures)."""
    return int(rng.geometric((m - k) / m)) - 1


def _scatter(indexes, count: int, m: int, rng: np.random.Generator) -> Plan:
    """Hand out `count` indexes, produced ascending one at a time, to the positions scanned
    in order: position j takes the next index with probability (indexes left) / (positions
    left), so every set of `count` positions is as likely."""
    plan, left = [], count
    coins = rng.random(m)
    for j in range(m):
        if left and coins[j] * (m - j) < left:
            plan.append((j, next(indexes)))
            left -= 1
    return plan


def stack_refresh(m: int, log_length: int, rng: np.random.Generator) -> Plan:
    """Select the final candidates newest first by geometric skips, stack them, scatter.

    >>> plan = stack_refresh(5, 11, np.random.default_rng(1))
    >>> plan[-1][1]  # the newest candidate is always final
    10
    """
    if m <= 0 or log_length <= 0:
        return []
    stack, i = [], log_length - 1
    while True:
        stack.append(i)
        if len(stack) == m:
            break
        i -= _skip(len(stack), m, rng) + 1
        if i < 0:
            break
    return _scatter(iter(stack[::-1]), len(stack), m, rng)


def nomem_refresh(m: int, log_length: int, rng: np.random.Generator) -> Plan:
    """The stack's selection without the stack: the skips for k = m-1 ... 1 are generated
    once to add them up (the distance from the newest final candidate down to the oldest
    possible one), then again from the saved generator state while walking up.

    >>> plan = nomem_refresh(5, 11, np.random.default_rng(1))
    >>> [i for _, i in plan] == sorted(i for _, i in plan), plan[-1][1]
    (True, 10)
    """
    if m <= 0 or log_length <= 0:
        return []
    skips = np.random.default_rng(int(rng.integers(1 << 62)))
    saved = copy.deepcopy(skips.bit_generator.state)
    total = sum(_skip(k, m, skips) + 1 for k in range(m - 1, 0, -1))
    skips.bit_generator.state = saved
    i, k = log_length - 1 - total, m - 1
    while i < 0:  # selections that would fall before the log's start do not exist
        i += _skip(k, m, skips) + 1
        k -= 1
    count = k + 1  # the oldest final candidate is selection k + 1 of the walk back

    def ascending():
        nonlocal i, k
        while True:
            yield i
            if k == 0:
                return
            i += _skip(k, m, skips) + 1
            k -= 1

    return _scatter(ascending(), count, m, rng)
