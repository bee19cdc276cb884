"""One timed phase of a sync or of one of its sites: checked for a stop, announced, timed."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def timed_phase(
    step: str,
    run: Callable[..., T],
    args: tuple[Any, ...],
    *,
    check: Callable[[], None],
    announce: Callable[[], None],
    phases: dict[str, float],
) -> T:
    """Run `run(*args)` as phase `step`: `check()` for a stop first, `announce()` that it
    starts, and its wall time added to `phases[step]` (seconds, to the millisecond: a step
    run in two parts, with another between them, counts both).

    >>> phases, said = {}, []
    >>> timed_phase("plan", max, (2, 5), check=lambda: None, announce=lambda: said.append("plan"), phases=phases)
    5
    >>> said, list(phases)
    (['plan'], ['plan'])
    """
    check()
    announce()
    t0 = time.monotonic()
    out = run(*args)
    phases[step] = round(phases.get(step, 0.0) + time.monotonic() - t0, 3)
    return out
