"""The rows a full read received in a sync's failed attempts, kept for its retry to resume after.

The parts are Parquet files of whole frames, in key order, in a folder of the sync's
staging beside the attempt's own folder (which each attempt starts afresh), with a
record of their names, their rows and the key of the last row (strategies/resumable.py).
They go with the sync's staging when it ends.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

#: The record of a folder's parts, rewritten whole after each attempt.
RECORD = "read.json"


@dataclass
class ReadSoFar:
    """The rows a site's full read received in a sync's failed attempts: whole frames, in key order.

    Its folder lies beside the attempt's staging folder (which each attempt starts afresh)
    and holds the parts and their record: file names, rows, the last row's key.
    """

    folder: Path
    parts: list[str] = field(default_factory=list)
    rows: int = 0
    after: list | None = None  # the key of the last row kept (None: nothing kept)
    serial: int = 0  # parts ever filed: a name is never used twice

    @classmethod
    def beside(cls, staging: Path) -> ReadSoFar:
        """What the earlier attempts kept beside the attempt folder `staging` (nothing at first)."""
        folder = staging.with_name(f"{staging.name}-read")
        try:
            data = json.loads((folder / RECORD).read_text())
        except FileNotFoundError:
            return cls(folder)
        return cls(folder, data["parts"], data["rows"], data["after"], data["serial"])

    @property
    def paths(self) -> list[Path]:
        return [self.folder / name for name in self.parts]

    def take(self, received: Path, key: list[str], *, continued: bool, complete: bool) -> None:
        """Keep the rows an attempt filed at `received` as the next part.

        `continued`: the agent read after the kept key; else it read from the first key, and
        once it sent a row (or its whole answer: `complete`) what was kept is stale.
        """
        rows = pq.read_metadata(received).num_rows if received.exists() else 0
        if not continued and (rows or complete):
            for path in self.paths:
                path.unlink(missing_ok=True)
            self.parts, self.rows, self.after = [], 0, None
        if rows:
            self.folder.mkdir(parents=True, exist_ok=True)
            name = f"part-{self.serial}.parquet"
            os.replace(received, self.folder / name)
            self.parts.append(name)
            self.rows += rows
            self.serial += 1
            self.after = last_key(self.folder / name, key)
        record = self.folder / f"{RECORD}.tmp"
        if self.folder.exists():
            record.write_text(
                json.dumps({"parts": self.parts, "rows": self.rows, "after": self.after, "serial": self.serial})
            )
            os.replace(record, self.folder / RECORD)


def last_key(path: Path, key: list[str]) -> list:
    """The key of the last row of the Parquet file at `path` (which has rows), one value per key column."""
    file = pq.ParquetFile(path)
    for group in reversed(range(file.num_row_groups)):
        rows = file.read_row_group(group, columns=key)
        if rows.num_rows:
            return [rows.column(k)[rows.num_rows - 1].as_py() for k in key]
    raise ValueError(f"{path} holds no rows")
