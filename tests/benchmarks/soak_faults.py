"""When the soak kills what: agents at random times throughout, the service in the first part of the run only."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

#: Seconds, on average, between two agent kills, and between two service kills where the service is killed.
AGENT_EVERY_S, SERVICE_EVERY_S = 120.0, 300.0
#: How long a killed process stays down before it is started again (seconds, drawn uniformly).
AGENT_DOWN_S, SERVICE_DOWN_S = (5.0, 30.0), (2.0, 10.0)
#: The share of the run where the service is killed: growth over the second half compares the
#: windows at 45–55 % and 90–100 % (soak_summary.growth), which must see one service, warmed
#: up, for memory to be compared with memory (a JVM started again holds a fraction of its heap;
#: in a development run it took minutes to grow back).
SERVICE_KILLED_IN = (0.05, 0.30)
#: Seconds kept free after a fault before the next one (a service takes up to a minute to answer again).
SETTLE_S = 60.0


@dataclass(frozen=True)
class Fault:
    """A SIGKILL `at_s` seconds into the run of the service or an agent (`target`: its source)."""

    at_s: float
    kind: str
    target: str
    down_s: float


def plan_faults(span_s: float, rng: random.Random, sources: Sequence[str]) -> list[Fault]:
    """The faults of a run of `span_s` seconds: about one agent kill every AGENT_EVERY_S (at
    least two) throughout, and one service kill every SERVICE_EVERY_S (at least one) within
    SERVICE_KILLED_IN, at uniformly drawn times; an agent's kill drawn within SETTLE_S of another
    fault (after its down time) is left out, so that one outage ends before the next begins.

    >>> faults = plan_faults(1800, random.Random(1), ["a", "b", "c"])
    >>> sorted({f.kind for f in faults}), all(f.at_s < 1800 for f in faults)
    (['agent', 'service'], True)
    >>> [90 <= f.at_s < 540 for f in faults if f.kind == "service"]  # 5 % to 30 % of 1,800 s
    [True, True]
    >>> all(b.at_s >= a.at_s + a.down_s + SETTLE_S for a, b in zip(faults, faults[1:]))
    True
    """
    drawn: list[Fault] = []
    for _ in range(max(2, round(span_s / AGENT_EVERY_S))):
        at = rng.uniform(0.05, 0.95) * span_s
        drawn.append(Fault(round(at, 1), "agent", rng.choice(list(sources)), round(rng.uniform(*AGENT_DOWN_S), 1)))
    lo, hi = SERVICE_KILLED_IN
    for _ in range(max(1, round((hi - lo) * span_s / SERVICE_EVERY_S))):
        at = rng.uniform(lo, hi) * span_s
        drawn.append(Fault(round(at, 1), "service", "service", round(rng.uniform(*SERVICE_DOWN_S), 1)))
    kept: list[Fault] = []
    for fault in sorted(drawn, key=lambda f: (f.kind != "service", f.at_s)):  # the service's kills first
        if not any(_overlap(fault, other) for other in kept):
            kept.append(fault)
    return sorted(kept, key=lambda f: f.at_s)


def _overlap(a: Fault, b: Fault) -> bool:
    return a.at_s < b.at_s + b.down_s + SETTLE_S and b.at_s < a.at_s + a.down_s + SETTLE_S
