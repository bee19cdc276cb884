"""Row hashes of stored rows with the canonical encoding: of a Spark DataFrame on the
executors, or of an Arrow table in this process (the Arrow executor: warehouse/executor.py)."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import DataFrame

from deltasieve_protocol.encoding import DEFAULT_HASH_BITS, hash_to_bytes, row_hashes
from deltasieve_protocol.types import Column

ROW_HASH = "__rh"


def row_hashes_of(
    rows: DataFrame | pa.Table, columns: list[Column], keep: list[str], seed: int, bits: int = DEFAULT_HASH_BITS
) -> DataFrame | pa.Table:
    """`keep` columns plus the seeded hash of each row over `columns` (binary, bits/8 bytes),
    of the same kind as `rows`.

    The hash runs in Python on Arrow batches, exactly the code the agent runs, so a row
    read by Spark from Parquet and the same row read from SQLite or PostgreSQL agree.
    """
    by_name = {c.name: c for c in columns}

    def run(batches):
        for batch in batches:
            hashes = [hash_to_bytes(h, bits) for h in row_hashes(batch, columns, seed, bits)]
            yield pa.RecordBatch.from_arrays(
                [batch.column(k) for k in keep] + [pa.array(hashes, pa.binary())], names=[*keep, ROW_HASH]
            )

    names = [c.name for c in columns]
    if isinstance(rows, pa.Table):
        out = pa.schema([*(rows.schema.field(k) for k in keep), pa.field(ROW_HASH, pa.binary())])
        return pa.Table.from_batches(list(run(rows.select(names).to_batches())), out)
    schema = ", ".join([f"`{k}` {by_name[k].type.spark_ddl()}" for k in keep] + [f"{ROW_HASH} binary"])
    return rows.select(*names).mapInArrow(run, schema)
