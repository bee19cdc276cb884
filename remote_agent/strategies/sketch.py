"""The agent's answer to /v1/sketch: set reconciliation of the site query with the warehouse.

The warehouse sends its reconciliation table (an IBLT of (key fingerprint, row hash) pairs,
see protocol/iblt.py). The agent reads the site query once, in its usual chunks, folds the
pair of every row into the table with the opposite sign, and peels what is left:

- pairs only the source holds are new or changed rows: their current rows go back (ROWS);
- pairs only the warehouse holds are deleted rows or the old side of updates: they go back
  as they are (PAIRS), and the warehouse tells the two apart by the keys of the rows;
- a table that does not peel (more differences than it was sized for) is said so in the
  summary, and the warehouse falls back to another strategy.

Memory: the table (28 bytes a cell, sized for the expected differences) and one batch of
rows. A key of one integer column is its own fingerprint, so the keys of the rows to send
come straight out of the peel. Any other key is written with its fingerprint to a
temporary file on the agent's disk while the site query is read (never to the database),
and read back once to find the keys of the differing pairs.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from .. import chunks
from ..adapters.base import Adapter
from ..adapters.rows import RowConverter
from ..protocol import frames
from ..protocol.fingerprints import (
    integer_key,
    key_fingerprints,
    keys_from_fingerprints,
    row_fingerprints,
    sketch_seeds,
)
from ..protocol.iblt import Iblt
from ..protocol.types import Column
from ..protocol.wire import KEY_FP, ROW_FP, key_values
from ..sitequery import ValidatedQuery
from .checks import key_columns
from .fetch import lookup_rows

#: Rows per spilled batch and per PAIRS frame.
SPILL_ROWS = 65_536


def sketch_answer(
    adapter: Adapter,
    query: ValidatedQuery,
    table: Iblt,
    *,
    seed: int,
    batch_rows: int,
    chunk_rows: int = chunks.DEFAULT_CHUNK_ROWS,
    spill_dir: str | None = None,
) -> Iterator[bytes]:
    """The answer of /v1/sketch, as frames; see the module docstring."""
    converter = RowConverter(adapter, query.columns, query.where())
    key = key_columns(query)
    columns = [Column(c.name, c.type) for c in query.columns]
    key_seed, row_seed = sketch_seeds(seed)

    def answer() -> Iterator[bytes]:
        started = time.monotonic()
        scanned = 0
        with tempfile.TemporaryDirectory(prefix="deltasieve-sketch-", dir=spill_dir) as tmp:
            spill = None if integer_key(key) else _Spill(Path(tmp) / "keys.arrow", key)
            with adapter.session() as session:
                for rows in chunks.slices(chunks.scan(adapter, session, query, chunk_rows), min(batch_rows, 10_000)):
                    batch = converter.batch(rows, query.key)
                    scanned += batch.num_rows
                    kf = key_fingerprints(batch, key, key_seed)
                    table.add(kf, row_fingerprints(batch, columns, row_seed), sign=-1)
                    if spill is not None:
                        spill.write(kf, batch)
            if spill is not None:
                spill.close()
            peeled = table.peel()
            summary = {"rows_scanned": scanned, "complete": peeled.complete, "cells": table.cells}
            if not peeled.complete:
                yield frames.json_frame(frames.SUMMARY, {**summary, "elapsed_s": round(time.monotonic() - started, 4)})
                return
            wanted = np.unique(peeled.minus_keys)  # pairs only the source holds
            if spill is None:
                keys = key_values(keys_from_fingerprints(wanted, key), query.key)
            else:
                keys = spill.keys_of(wanted)
            sent = 0
            with adapter.session() as session:
                for batch in lookup_rows(adapter, session, query, converter, keys, batch_rows, chunk_rows):
                    sent += batch.num_rows
                    yield frames.arrow_frame(frames.ROWS, batch)
            left = pa.table(
                {KEY_FP: pa.array(peeled.plus_keys, pa.uint64()), ROW_FP: pa.array(peeled.plus_hashes, pa.uint64())}
            )
            for part in left.to_batches(max_chunksize=SPILL_ROWS):
                yield frames.arrow_frame(frames.PAIRS, part)
        differences = len(peeled.plus_keys) + len(peeled.minus_keys)
        yield frames.json_frame(
            frames.SUMMARY,
            {
                **summary,
                "differences": differences,
                "rows_sent": sent,
                "pairs_sent": left.num_rows,
                "elapsed_s": round(time.monotonic() - started, 4),
            },
        )

    return answer()


class _Spill:
    """Fingerprints with their keys, written to a file while the site query is read."""

    def __init__(self, path: Path, key: list[Column]):
        self.path = path
        self.names = [c.name for c in key]
        fields = [pa.field(KEY_FP, pa.uint64())] + [pa.field(c.name, c.type.arrow()) for c in key]
        self.schema = pa.schema(fields)
        self._sink = pa.OSFile(str(path), "wb")
        self._writer = ipc.new_stream(self._sink, self.schema, options=ipc.IpcWriteOptions(compression="zstd"))

    def write(self, fingerprints: np.ndarray, batch: pa.RecordBatch) -> None:
        arrays = [pa.array(fingerprints, pa.uint64())] + [batch.column(n) for n in self.names]
        self._writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=self.schema))

    def close(self) -> None:
        self._writer.close()
        self._sink.close()

    def keys_of(self, fingerprints: np.ndarray) -> list:
        """The keys spilled with these fingerprints."""
        if len(fingerprints) == 0:
            return []
        wanted = pa.array(fingerprints, pa.uint64())
        out: list = []
        with pa.OSFile(str(self.path), "rb") as source:
            for batch in ipc.open_stream(source):
                hit = batch.filter(pc.is_in(batch.column(KEY_FP), value_set=wanted))
                if hit.num_rows:
                    out.extend(key_values(hit, self.names))
        return out
