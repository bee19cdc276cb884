"""Parquet files written batch by batch on the driver, from frames as they arrive."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from warehouse.errors import SourceDataError


class Sink:
    """A Parquet file written batch by batch (bounded memory); counts its rows."""

    def __init__(self, path: Path, schema: pa.Schema):
        self.path = path
        self.schema = schema
        self.rows = 0
        self._writer: pq.ParquetWriter | None = None

    def __enter__(self) -> Sink:
        self._writer = pq.ParquetWriter(self.path, self.schema, compression="zstd")
        return self

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.schema != self.schema:
            try:
                batch = batch.select(self.schema.names).cast(self.schema)
            except (KeyError, pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise SourceDataError(f"the agent's rows do not match the expected columns: {exc}") from None
        if self._writer is None:
            raise RuntimeError("a Sink is written inside its with block")
        self._writer.write_batch(batch)
        self.rows += batch.num_rows

    def __exit__(self, *exc) -> None:
        if self._writer is not None:
            self._writer.close()
