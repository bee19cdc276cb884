"""The rows of the Delta files the rewrite wrote, kept in memory until it rewrites them.

Changes spread over a keyed view's keys touch every file of its Delta table, and the
rewrite (delta_rewrite.py) reads each one back before writing it again: about a third of
a file's rewrite is decoding the Parquet the previous apply wrote. A Delta file never
changes once written (a commit adds new files and removes old ones), so the rows written
under a path are that file's rows for as long as it exists. The rewrite puts them here
when it writes the file and takes them back, instead of reading it, when it rewrites it.

An entry leaves when it is taken (the rewrite removes its file from the table), when its
table is written whole or compacted (`forget`: every file is then new), or, oldest first,
when the held rows outgrow the budget (`SERVICE_DELTA_CACHE_MIB`; 0 keeps nothing). A file
not held, such as one the load or a compaction wrote through delta-rs, is read from disk:
the cache changes how fast a rewrite is, never what it writes.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass

import pyarrow as pa

from warehouse.defaults import DELTA_CACHE_BYTES


@dataclass(frozen=True)
class Held:
    """A file's rows as written, and the columns it dictionary-encoded."""

    rows: pa.Table
    encoded: list[str]


class FileCache:
    """Rows of written files by path, within a budget of bytes; safe across threads.

    >>> cache = FileCache(budget_bytes=100)
    >>> cache.put("/t/a.parquet", pa.table({"k": pa.array(range(8), pa.int64())}), ["k"])  # 64 bytes
    >>> cache.put("/t/b.parquet", pa.table({"k": pa.array(range(8), pa.int64())}), [])  # a is let go
    >>> cache.take("/t/a.parquet") is None, cache.take("/t/b.parquet").rows.num_rows, cache.held_bytes
    (True, 8, 0)
    """

    def __init__(self, budget_bytes: int = DELTA_CACHE_BYTES):
        self.budget_bytes = budget_bytes
        self._held: OrderedDict[str, Held] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    @property
    def held_bytes(self) -> int:
        return self._bytes

    def resize(self, budget_bytes: int) -> None:
        """A new budget; entries beyond it let go, oldest first."""
        with self._lock:
            self.budget_bytes = budget_bytes
            self._shrink()

    def put(self, path: str, rows: pa.Table, encoded: list[str]) -> None:
        """Hold the rows written to `path` (nothing when they alone outgrow the budget)."""
        size = rows.nbytes
        with self._lock:
            self._pop(path)
            if size > self.budget_bytes:
                return
            self._held[path] = Held(rows, list(encoded))
            self._bytes += size
            self._shrink()

    def take(self, path: str) -> Held | None:
        """The rows held for `path`, let go; None when they are not held."""
        with self._lock:
            held = self._pop(path)
            if held is None:
                self.misses += 1
            else:
                self.hits += 1
            return held

    def forget(self, directory: str) -> None:
        """Let go of every file under `directory` (a table written whole or compacted).

        >>> cache = FileCache()
        >>> cache.put("/t/a.parquet", pa.table({"k": [1]}), []); cache.put("/t2/a.parquet", pa.table({"k": [1]}), [])
        >>> cache.forget("/t"); cache.take("/t/a.parquet") is None, cache.take("/t2/a.parquet") is not None
        (True, True)
        """
        prefix = os.path.join(directory, "")
        with self._lock:
            for path in [p for p in self._held if p.startswith(prefix)]:
                self._pop(path)

    def _pop(self, path: str) -> Held | None:
        held = self._held.pop(path, None)
        if held is not None:
            self._bytes -= held.rows.nbytes
        return held

    def _shrink(self) -> None:
        while self._bytes > self.budget_bytes and self._held:
            _, held = self._held.popitem(last=False)
            self._bytes -= held.rows.nbytes


#: The service's cache, shared by every view's Delta table (its budget set from the settings).
CACHE = FileCache()
