"""How long a sync of a view is expected to take, from the view's own history: the ETA of a running sync.

A sync's cost follows its view's size and rate of change, which move slowly, so the recent
syncs of the same view predict the next one better than any count of rows would: the
median of the last few that succeeded (of the same mode, audit or not), leaving out the
view's load, which reads everything once.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from service.records import SyncRecord

#: Succeeded syncs the estimate looks back on.
RECENT = 5


def expected_seconds(history: Sequence[SyncRecord], verify: bool = False) -> float | None:
    """The median wall time of the view's last `RECENT` succeeded syncs of the same mode, the load left out.

    `history`: the view's sync records, newest first (as `Catalog.syncs` returns them).
    None: nothing to go by (the load itself, or no succeeded sync of that mode since).

    >>> from types import SimpleNamespace as Sync
    >>> syncs = [Sync(status="succeeded", metrics={"wall_seconds": s}) for s in (2.0, 3.0, 9.0, 60.0)]
    >>> expected_seconds(syncs)  # the oldest, 60 s, was the load
    3.0
    >>> expected_seconds(syncs[-1:]) is None, expected_seconds(syncs, verify=True) is None
    (True, True)
    """
    succeeded = [s for s in history if s.status == "succeeded" and (s.metrics or {}).get("wall_seconds")]
    if not succeeded:
        return None
    after_load = succeeded[:-1]  # newest first: the last one is the view's first success, its load
    same = [s for s in after_load if ((s.metrics.get("mode") == "verify") == verify)][:RECENT]
    if not same:
        return None
    return round(statistics.median(s.metrics["wall_seconds"] for s in same), 3)


def remaining(expected_s: float | None, elapsed_s: float) -> dict:
    """The progress fields of a running sync: elapsed seconds and, where expected, the ETA.

    The ETA is rounded down to a tenth of a second, so it never passes the expected time
    (0.191 s expected, 0.01 s elapsed: 0.1, where rounding to the nearest would say 0.2).

    >>> remaining(10.0, 4.0), remaining(10.0, 12.5), remaining(None, 1.0)
    ({'elapsed_s': 4.0, 'expected_s': 10.0, 'eta_s': 6.0}, {'elapsed_s': 12.5, 'expected_s': 10.0, 'eta_s': 0.0}, {'elapsed_s': 1.0})
    >>> remaining(0.191, 0.01)["eta_s"]
    0.1
    """
    out = {"elapsed_s": round(elapsed_s, 1)}
    if expected_s is not None:
        left = max(expected_s - elapsed_s, 0.0)
        out.update(expected_s=expected_s, eta_s=math.floor(round(left * 10, 6)) / 10)
    return out
