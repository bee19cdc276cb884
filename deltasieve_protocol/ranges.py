"""A set of non-overlapping key ranges, and which range holds a key.

The range-checksum exchange uses it on both sides: the agent to sum the rows of each
range it was sent, the warehouse to split its snapshot into ranges.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field


class RangesOverlap(ValueError):
    """Two ranges of a set overlap: no key could be placed in one range."""


@dataclass
class RangeSet:
    """Non-overlapping half-open key ranges [lo, hi); a missing bound (None) is unbounded.

    >>> rs = RangeSet(key=["id"])
    >>> rs.append(0, None, 10); rs.append(1, 10, 20); rs.append(2, 30, None)
    >>> rs.freeze()
    >>> [rs.locate(k) for k in (-5, 10, 19, 25, 99)]
    [0, 1, 1, None, 2]
    """

    key: list[str]
    rids: list[int] = field(default_factory=list)
    los: list = field(default_factory=list)
    his: list = field(default_factory=list)
    ship: list[bool] = field(default_factory=list)
    expected: list[tuple[int, int]] = field(default_factory=list)

    def append(self, rid: int, lo, hi, ship: bool = False, expected: tuple[int, int] = (0, 0)) -> None:
        self.rids.append(rid)
        self.los.append(lo)
        self.his.append(hi)
        self.ship.append(bool(ship))
        self.expected.append(expected)

    def freeze(self) -> None:
        """Sort by lower bound; raises RangesOverlap if two ranges overlap."""
        order = sorted(
            range(len(self.rids)),
            key=lambda i: (self.los[i] is not None, self.los[i] if self.los[i] is not None else 0),
        )
        for name in ("rids", "los", "his", "ship", "expected"):
            values = getattr(self, name)
            setattr(self, name, [values[i] for i in order])
        self._open_first = bool(self.los) and self.los[0] is None
        self._bounded = self.los[1:] if self._open_first else self.los
        for a, b in zip(self.his, self.los[1:]):
            if a is None or b is None or b < a:
                raise RangesOverlap("ranges overlap")

    def locate(self, k) -> int | None:
        """Index of the range holding key k, or None."""
        i = bisect.bisect_right(self._bounded, k) - 1
        if self._open_first:
            i += 1
        if i < 0:
            return None
        hi = self.his[i]
        return i if hi is None or k < hi else None
