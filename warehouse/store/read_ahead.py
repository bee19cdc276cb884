"""Stored rows decoded while the agent reads, so that a lookup by key after its answer is a filter.

A sync reads the stored rows of the keys its answer touched (`layers.lookup`, key_ranges.py),
decoding every row group whose key range holds one of them. Keys scattered over the fragment
fall in every row group, so that lookup decodes the whole fragment and grows with it (0.6 s of
CPU for a 1M-row students fragment); and it cannot start before the answer names the keys. The
row groups it will decode can be decoded before: a `ReadAhead` started when the exchange sends
its first request decodes them on a thread of its own, group by group, while the agent reads
the site query (seconds, during which the service only waits for its answer), and the lookup
takes the groups it holds instead of decoding them again (`take`).

It holds at most `budget` bytes of decoded rows (BUDGET_BYTES): no more than the lookup
decoded at once before, for the fragments it covers whole; of a larger fragment it holds the
first row groups and the lookup decodes the rest itself. `take` stops it where it is: the
lookup never waits for groups it may not need. A read-ahead that failed (a file unreadable)
holds what it decoded before; the lookup reads the rest itself, and its errors are the lookup's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds

log = logging.getLogger("warehouse.store.read_ahead")

#: Decoded bytes a read-ahead holds at most: a 1M-row students fragment decodes to 177 MB, which
#: the lookup it stands in for held at once anyway; a larger fragment is read ahead in part.
BUDGET_BYTES = 256 << 20

#: (file path, row group) → the row group decoded (the columns asked for, as the file stores them).
Held = Mapping[tuple[str, int], pa.Table]


class ReadAhead:
    """The row groups of the Parquet files in `directories` (in order; a missing one is
    skipped), columns `columns`, decoded on a thread of their own up to `budget` bytes."""

    def __init__(self, directories: Sequence[Path], columns: list[str], budget: int = BUDGET_BYTES):
        self._held: dict[tuple[str, int], pa.Table] = {}
        self._stop = threading.Event()
        #: bytes and row groups decoded, and seconds the thread ran (once it ended)
        self.bytes = 0
        self.groups = 0
        self.seconds = 0.0
        self._thread = threading.Thread(
            target=self._run, args=(list(directories), columns, budget), name="read-ahead", daemon=True
        )
        self._thread.start()

    def _run(self, directories: list[Path], columns: list[str], budget: int) -> None:
        t0 = time.monotonic()
        try:
            for directory in directories:
                if not directory.exists():
                    continue
                for fragment in ds.dataset(directory, format="parquet").get_fragments():
                    assert isinstance(fragment, ds.ParquetFileFragment)
                    for group in range(fragment.metadata.num_row_groups):
                        if self._stop.is_set() or self.bytes >= budget:
                            return
                        table = fragment.subset(row_group_ids=[group]).to_table(columns=columns)
                        self._held[(fragment.path, group)] = table
                        self.bytes += table.nbytes
                        self.groups += 1
        except Exception as exc:  # the lookup reads what is not held itself
            log.warning("reading stored rows ahead stopped: %s", exc)
        finally:
            self.seconds = round(time.monotonic() - t0, 3)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until it has decoded all it will (or `timeout` seconds); whether it has."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def take(self) -> Held:
        """Stop decoding (after the row group under way) and hand over what is held; the
        read-ahead holds nothing after."""
        self._stop.set()
        self._thread.join()
        held, self._held = self._held, {}
        return held

    def close(self) -> None:
        """Stop and drop what is held (a sync that needed no stored rows)."""
        self.take()

    def report(self) -> dict:
        """What it did, for the site's metrics: seconds, row groups and bytes decoded."""
        return {"seconds": self.seconds, "row_groups": self.groups, "bytes": self.bytes}
