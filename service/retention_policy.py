"""Retention policies: what SERVICE_KEEP_DELTAS says (`Keep`), and the defaults of retention.

Kept apart from retention.py, which applies a policy, so that the service's settings check the
variable at start without loading the catalog and the store (and Spark and Arrow with them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The policy when SERVICE_KEEP_DELTAS is not set: a month of syncs.
DEFAULT_KEEP = "30d"
#: Seconds between two rounds of the background task: removal is cheap and never urgent.
DEFAULT_INTERVAL_S = 3600.0
#: Seconds of each unit a duration may be given in.
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@dataclass(frozen=True)
class Keep:
    """A retention policy: keep the syncs of the last `seconds`, or the newest `count`."""

    seconds: float | None = None
    count: int | None = None

    @classmethod
    def parse(cls, text: str) -> Keep:
        """The policy a SERVICE_KEEP_DELTAS value says; ValueError when it says none.

        >>> Keep.parse("30d"), Keep.parse("12h"), Keep.parse("1000")
        (Keep(seconds=2592000, count=None), Keep(seconds=43200, count=None), Keep(seconds=None, count=1000))
        >>> Keep.parse(" 90 m ").seconds
        5400
        >>> Keep.parse("0")
        Traceback (most recent call last):
        ...
        ValueError: SERVICE_KEEP_DELTAS must be a duration like 30d, 12h, 45m, 90s, 2w or a count of syncs like 1000 (at least 1), not '0'
        """
        match = re.fullmatch(r"\s*(\d+)\s*([smhdw]?)\s*", text.lower())
        if match is None or int(match.group(1)) < 1:
            raise ValueError(
                "SERVICE_KEEP_DELTAS must be a duration like 30d, 12h, 45m, 90s, 2w or a count of syncs "
                f"like 1000 (at least 1), not {text!r}"
            )
        number, unit = int(match.group(1)), match.group(2)
        return cls(seconds=number * UNITS[unit]) if unit else cls(count=number)
