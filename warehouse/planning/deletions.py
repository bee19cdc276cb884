"""Deletion statistics: per sync, the tuples a site held before it, deleted and inserted.

Kept as one small Parquet file per site and version; P(delete) is the mean of the ratios
(cost_model.deletion_probability).
"""

from __future__ import annotations

import pyarrow as pa

from warehouse.store import parquet_files
from warehouse.store.versions import Version

#: The column that names the sync a row of statistics belongs to.
SYNC_COLUMN = "__sync"
#: Deletion statistics per sync: tuples before (tno), deleted (dno), inserted (ino). The
#: column names are part of the storage format (formats.STORAGE_FORMAT).
DELETIONS_SCHEMA = pa.schema(
    [(SYNC_COLUMN, pa.string()), ("tno", pa.int64()), ("dno", pa.int64()), ("ino", pa.int64())]
)


def read_deletions(version: Version | None, site: int) -> list[dict]:
    """Deletion statistics rows of a site of `version`, oldest first (a small file, read on the driver)."""
    if version is None or not version.deletions(site).exists():
        return []
    return parquet_files.read(version.deletions(site), DELETIONS_SCHEMA.names).to_pylist()
