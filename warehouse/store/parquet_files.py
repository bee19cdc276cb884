"""One Parquet file read whole, the cheap way for the small files a sync reads many of.

`pyarrow.parquet.read_table` goes through the dataset layer (a file system resolved, a
dataset discovered) and hands the decoding to Arrow's thread pool: for a file of a few
thousand rows that fixed cost is most of the read, about twice the CPU time of reading the
file directly in the calling thread. A sync of a small view reads a dozen such files (the
agent's answer, the update statistics, the deletions, the keys it touched), so `read` opens
the file itself and decodes it in the calling thread, leaving the pool to files large enough
to gain from it.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

#: File size (bytes) from which the columns are decoded on Arrow's threads: below it, handing
#: them over costs more CPU than it saves (a 1,000-row file of six columns is about 25 kB).
THREADED_BYTES = 4 << 20


def read(path: Path | str, columns: list[str] | None = None) -> pa.Table:
    """The rows of a Parquet file, of `columns` (all if None), as `pyarrow.parquet.read_table`
    gives them; a directory of parts is read by `read_table` itself.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     pq.write_table(pa.table({"k": [1, 2], "v": ["a", None]}), f"{d}/t.parquet")
    ...     read(f"{d}/t.parquet", ["v"]).to_pydict(), read(f"{d}/t.parquet").equals(pq.read_table(f"{d}/t.parquet"))
    ...     read(d, ["k"]).to_pydict()
    ({'v': ['a', None]}, True)
    {'k': [1, 2]}
    """
    path = Path(path)
    found = path.stat()
    if stat.S_ISDIR(found.st_mode):
        return pq.read_table(path, columns=columns)
    with pq.ParquetFile(path) as file:
        return file.read(columns=columns, use_threads=found.st_size >= THREADED_BYTES)
