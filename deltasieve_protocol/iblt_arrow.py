"""The Arrow form of an IBLT: one row per cell, the table's parameters in the schema metadata.

How the warehouse stores its tables (warehouse/strategies/sketch/tables.py) and an older
form of the sketch request; the request's own form is the binary one of iblt_bytes.py.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from deltasieve_protocol.iblt import FORMAT_VERSION, SUMS, Iblt

MAX_ABS_COUNT = 2**62
"""Largest count magnitude accepted from the wire: subtracting two such tables cannot overflow int64."""
#: Schema metadata keys of the table's parameters.
META = {"version": b"iblt.version", "cells": b"iblt.cells", "hashes": b"iblt.hashes", "seed": b"iblt.seed"}
#: Schema metadata key marking a compact table.
COMPACT_FLAG = b"iblt.compact"


def to_arrow(table: Iblt) -> pa.RecordBatch:
    """The table as an Arrow record batch, one row per cell, parameters in the schema metadata.

    A compact table's counts are uint8 and its checksums uint32.

    >>> t = Iblt(3, hashes=3, seed=9)
    >>> b = to_arrow(t)
    >>> b.schema.field("count").type, b.num_rows, b.schema.metadata[b"iblt.seed"]
    (DataType(int32), 3, b'9')
    >>> from_arrow(b), from_arrow(to_arrow(t.to_compact())).compact
    (Iblt(cells=3, hashes=3, seed=9), True)
    """
    if table.compact:
        count = pa.array(table.count.astype(np.uint8))
        check = pa.array(table.check_sum.astype(np.uint32))
    else:
        small = table.count.size == 0 or (int(table.count.min()) >= -(2**31) and int(table.count.max()) < 2**31)
        count = pa.array(table.count.astype(np.int32) if small else table.count)
        check = pa.array(table.check_sum)
    metadata = {
        META["version"]: str(FORMAT_VERSION),
        META["cells"]: str(table.cells),
        META["hashes"]: str(table.hashes),
        META["seed"]: str(table.seed),
    }
    if table.compact:
        metadata[COMPACT_FLAG] = "1"
    return pa.record_batch(
        [count, pa.array(table.key_sum), pa.array(table.hash_sum), check],
        names=["count", *SUMS],
        metadata=metadata,
    )


def from_arrow(batch: pa.RecordBatch) -> Iblt:
    """The table written by `to_arrow`; raises ValueError on anything else."""
    metadata = batch.schema.metadata or {}
    params = {}
    for name, field in META.items():
        raw = metadata.get(field)
        if raw is None:
            raise ValueError(f"IBLT batch lacks the {field.decode()} metadata")
        try:
            params[name] = int(raw.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            raise ValueError(f"IBLT metadata {field.decode()} is not an integer: {raw!r}") from None
    if params["version"] != FORMAT_VERSION:
        raise ValueError(f"unknown IBLT format version {params['version']} (this side reads version {FORMAT_VERSION})")
    compact = metadata.get(COMPACT_FLAG) == b"1"
    cells, hashes = params["cells"], params["hashes"]
    if hashes < 1 or cells < 1 or cells % hashes:
        raise ValueError(f"IBLT metadata says {cells} cells in {hashes} sub-tables: not a positive multiple")
    if batch.schema.names != ["count", *SUMS]:
        raise ValueError(f"IBLT batch has columns {batch.schema.names}, expected {['count', *SUMS]}")
    if batch.num_rows != cells:
        raise ValueError(f"IBLT batch has {batch.num_rows} rows but its metadata says {cells} cells")
    for column, name in zip(batch.columns, batch.schema.names):
        if column.null_count:
            raise ValueError(f"IBLT column {name} has nulls")
    want = {
        "count": (pa.uint8(),) if compact else (pa.int32(), pa.int64()),
        "key_sum": (pa.uint64(),),
        "hash_sum": (pa.uint64(),),
        "check_sum": (pa.uint32(),) if compact else (pa.uint64(),),
    }
    for name, types in want.items():
        if batch.column(name).type not in types:
            layout = " (compact table)" if compact else ""
            raise ValueError(
                f"IBLT column {name} is {batch.column(name).type}, expected {' or '.join(map(str, types))}{layout}"
            )
    count = batch.column(0).to_numpy().astype(np.int64)
    if ((count > MAX_ABS_COUNT) | (count < -MAX_ABS_COUNT)).any():
        raise ValueError(f"IBLT counts out of range: magnitude above {MAX_ABS_COUNT}")
    table = Iblt(cells, hashes, params["seed"], compact=compact)
    table.count[:] = count
    for name in SUMS:
        getattr(table, name)[:] = batch.column(name).to_numpy()  # cast on assignment
    table.normalize()
    return table
