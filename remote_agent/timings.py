"""Seconds an agent's answer spent in each phase, reported in its SUMMARY frame as `timings`.

The phases never overlap in the answer's own thread, so their sum is at most the answer's
`elapsed_s` (the rest is frame encoding, peeling and bookkeeping) — except that a scan
read ahead in a reader process (readahead.py) counts that process's reading and
converting, which run beside the answer's thread:

- `read_s`: waiting for rows from the database (the chunked reads of chunks.py);
- `convert_s`: turning the driver's rows into Arrow batches of canonical values;
- `hash_s`: fingerprints and row hashes, and folding them into the answer's tables
  (the sketch's IBLT, the units' sums, the ranges' sums);
- `send_s`: suspended while a frame was handed on, until the next one was asked for
  (the time the HTTP layer took to send it, or to wait for room to);
- `lookup_s`: looking up the current rows of given keys (reads and conversion included);
- `wait_s`: the answer's thread waiting for the reader process's next batch (how much of
  the reading the overlap did not hide).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")

#: The phases, in the order the summary lists them.
PHASES = ("read_s", "convert_s", "hash_s", "send_s", "lookup_s", "wait_s")
#: The phases a reader process spends beside the answer's thread when a scan reads ahead.
READER_PHASES = ("read_s", "convert_s")


class Timings:
    """Seconds per phase of one answer (see the module docstring).

    >>> t = Timings()
    >>> with t.phase("hash_s"):
    ...     pass
    >>> sorted(t.to_json()) == sorted(PHASES), t.to_json()["hash_s"] >= 0
    (True, True)
    """

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Count the time spent in the block to `name`."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - started

    def timed(self, name: str, items: Iterable[T]) -> Iterator[T]:
        """The items of `items`, the time spent producing each counted to `name`.

        >>> t = Timings()
        >>> list(t.timed("read_s", [1, 2]))
        [1, 2]
        """
        source = iter(items)
        while True:
            started = time.perf_counter()
            try:
                item = next(source)
            except StopIteration:
                return
            finally:
                self.seconds[name] += time.perf_counter() - started
            yield item

    def sending(self, frames: Iterable[bytes]) -> Iterator[bytes]:
        """The frames of `frames`, the time suspended at each yield counted to `send_s`."""
        for frame in frames:
            started = time.perf_counter()
            yield frame
            self.seconds["send_s"] += time.perf_counter() - started

    def to_json(self) -> dict[str, float]:
        return {name: round(seconds, 4) for name, seconds in self.seconds.items()}
