"""Pacing the chunked scan: a chunk size that follows a target duration, and a row-rate cap.

A legacy database serves its own users first. The chunks of a scan (chunks.py) are short
read-only transactions; pacing decides how many rows each asks for, and how long the
connection stays idle before the next (Carnes and Hanson, "Query-Based Change Detection": the load on
the source is what such a method must keep small). Two settings, both off by default:

- `target_chunk_s` (AGENT_TARGET_CHUNK_S): each chunk should take about this long, as
  pt-table-checksum's `--chunk-time` does. The first chunk asks for `FIRST_CHUNK_ROWS` (or
  `chunk_rows` if smaller); after each chunk the read rate, smoothed over the chunks so far,
  times the target gives the next size, which grows at most `MAX_GROWTH` times a chunk
  and never passes `chunk_rows` (which still bounds the rows held in memory).
- `max_rows_per_s` (AGENT_MAX_ROWS_PER_S): the scan reads at most this many rows per
  second on average. After each chunk the scan sleeps until the rows read so far are due
  at that rate (the last chunk too, so that the scan as a whole keeps the rate), and a
  chunk holds at most `RATE_WINDOW_S` seconds' worth of rows, so the rate is kept chunk by
  chunk rather than over the whole scan.

The time asleep is not reading: the scan's `read_s` leaves it out, and the pacing report of
the answer's summary (`pacing`) states it with the chunks read and their sizes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

#: Rows of the first chunk when a target duration is set: small enough to measure the rate
#: without a long first transaction.
FIRST_CHUNK_ROWS = 1_000
#: Fewest rows a paced chunk asks for.
MIN_CHUNK_ROWS = 100
#: Largest factor between two successive chunk sizes.
MAX_GROWTH = 4.0
#: Weight of the newest chunk's rate in the smoothed rate.
NEWEST_WEIGHT = 0.5
#: With a rate cap, a chunk holds at most this many seconds' worth of rows.
RATE_WINDOW_S = 0.25


@dataclass(frozen=True)
class Pacing:
    """The pacing settings of a scan (None: that kind of pacing is off)."""

    target_chunk_s: float | None = None
    max_rows_per_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("target_chunk_s", "max_rows_per_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be positive (or unset), not {value!r}")


class Pacer:
    """The chunk sizes and pauses of one scan (see the module docstring).

    `clock` and `sleep` are `time.monotonic` and `time.sleep` unless a test gives others.

    A scan at 10,000 rows/s with a target of 0.1 s settles at 1,000-row chunks:

    >>> p = Pacer(50_000, Pacing(target_chunk_s=0.1))
    >>> sizes = []
    >>> for _ in range(6):
    ...     rows = p.next_rows()
    ...     sizes.append(rows)
    ...     _ = p.chunk_read(rows, rows / 10_000)
    >>> sizes
    [1000, 1000, 1000, 1000, 1000, 1000]

    At 100,000 rows/s it grows toward 10,000-row chunks, at most 4 times a chunk:

    >>> p = Pacer(50_000, Pacing(target_chunk_s=0.1))
    >>> sizes = []
    >>> for _ in range(4):
    ...     rows = p.next_rows()
    ...     sizes.append(rows)
    ...     _ = p.chunk_read(rows, rows / 100_000)
    >>> sizes
    [1000, 4000, 10000, 10000]

    Without settings it asks for `chunk_rows` every time and never sleeps:

    >>> p = Pacer(7, Pacing())
    >>> p.next_rows(), p.chunk_read(7, 0.01), p.report()["chunks"]
    (7, 0.0, 1)

    A cap of 1,000 rows/s takes 250-row chunks and sleeps until each chunk's rows are due
    (here with a clock that only the sleeps move):

    >>> now = [0.0]
    >>> p = Pacer(50_000, Pacing(max_rows_per_s=1_000), clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    >>> [(p.next_rows(), p.chunk_read(p.next_rows(), 0.0)) for _ in range(3)]
    [(250, 0.25), (250, 0.25), (250, 0.25)]
    >>> p.report()["rows_per_s"], p.report()["slept_s"]
    (1000.0, 0.75)
    """

    def __init__(self, chunk_rows: int, pacing: Pacing, *, clock=time.monotonic, sleep=time.sleep):
        if chunk_rows < 1:
            raise ValueError("chunk_rows must be at least 1")
        self.pacing = pacing
        self.max_rows = chunk_rows
        if pacing.max_rows_per_s is not None:
            self.max_rows = max(1, min(chunk_rows, int(pacing.max_rows_per_s * RATE_WINDOW_S)))
        self.rows = min(self.max_rows, FIRST_CHUNK_ROWS) if pacing.target_chunk_s is not None else self.max_rows
        self.clock = clock
        self.sleep = sleep
        self.rate: float | None = None  # smoothed rows per second of the reads
        self.started: float | None = None  # when the first chunk was asked for
        self.finished: float | None = None  # when the last chunk was read
        self.rows_read = 0
        self.chunks = 0
        self.slept_s = 0.0
        self._untaken_sleep = 0.0
        self.smallest = self.largest = 0

    def next_rows(self) -> int:
        """Rows the next chunk asks for."""
        return self.rows

    def chunk_read(self, rows: int, seconds: float) -> float:
        """Record a chunk of `rows` rows read in `seconds`, size the next one, and sleep until
        the rows read so far are due under the rate cap (the connection idle, no transaction
        open); the seconds slept."""
        now = self.clock()
        if self.started is None:
            self.started = now - seconds
        self.chunks += 1
        self.rows_read += rows
        if rows:  # the read that finds nothing after the last row sizes nothing
            self.smallest = rows if not self.smallest else min(self.smallest, rows)
            self.largest = max(self.largest, rows)
        target = self.pacing.target_chunk_s
        if target is not None and rows and seconds > 0:
            rate = rows / seconds
            self.rate = rate if self.rate is None else NEWEST_WEIGHT * rate + (1 - NEWEST_WEIGHT) * self.rate
            wanted = int(self.rate * target)
            self.rows = min(self.max_rows, max(MIN_CHUNK_ROWS, min(wanted, int(self.rows * MAX_GROWTH))))
        pause = 0.0
        cap = self.pacing.max_rows_per_s
        if cap is not None:
            pause = self.started + self.rows_read / cap - now
            if pause > 0:
                self.sleep(pause)
                self.slept_s += pause
                self._untaken_sleep += pause
            else:
                pause = 0.0
        self.finished = self.clock()
        return pause

    def take_slept(self) -> float:
        """Seconds slept since the last call (for the caller's reading time to leave out)."""
        slept, self._untaken_sleep = self._untaken_sleep, 0.0
        return slept

    def absorb(self, other: Pacer) -> None:
        """Take the state of the same scan's pacer from the reader process."""
        self.__dict__.update({k: v for k, v in other.__dict__.items() if k not in ("clock", "sleep")})

    def report(self) -> dict:
        """What the answer's summary says of the pacing (its `pacing` object)."""
        elapsed = self.finished - self.started if self.started is not None and self.finished is not None else 0.0
        return {
            "target_chunk_s": self.pacing.target_chunk_s,
            "max_rows_per_s": self.pacing.max_rows_per_s,
            "chunks": self.chunks,
            "chunk_rows_min": self.smallest,
            "chunk_rows_max": self.largest,
            "slept_s": round(self.slept_s, 4),
            "rows_per_s": round(self.rows_read / elapsed, 1) if elapsed > 0 and self.rows_read else None,
        }
