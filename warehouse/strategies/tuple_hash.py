"""tuple_hash: one short hash per tuple, the compressed record ⟨K, b⟩ (key K, b-bit hash).

The record compression is that of Labio and Garcia-Molina, "Efficient Snapshot Differential
Algorithms for Data Warehousing".

The warehouse sends every key with a 64-bit hash of its row; the agent answers with the
rows whose hash differs or whose key is new, and the keys that are gone.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from pyspark.sql import DataFrame

from deltasieve_protocol import frames
from deltasieve_protocol.wire import HASH
from warehouse.executor import ARROW
from warehouse.store import layers
from warehouse.strategies.base import (
    SEND_BATCH_ROWS,
    TUPLE_HASH_BITS,
    Answer,
    FragmentBuild,
    SiteEstimate,
    Strategy,
    extract_exchange,
)
from warehouse.strategies.hashing import ROW_HASH, row_hashes_of


class TupleHash(Strategy):
    name = "tuple_hash"

    def plan(self) -> None:
        ctx = self.ctx
        if self.snapshot.read is None:  # a load
            return
        if ctx.sync.executor == ARROW:  # the stored rows hashed in this process (warehouse/executor.py)
            assert ctx.current is not None, "a tuple_hash sync follows the load"
            stored = layers.table(ctx.current, ctx.index, ctx.site.columns, ctx.site.key)
            hashed = row_hashes_of(stored, ctx.site.columns, ctx.site.key, ctx.sync.seed, TUPLE_HASH_BITS)
            self._tuples.mkdir(parents=True, exist_ok=True)
            pq.write_table(hashed, self._tuples / "part-0.parquet")
        else:
            hashed = row_hashes_of(self.snapshot.stored, ctx.site.columns, ctx.site.key, ctx.sync.seed, TUPLE_HASH_BITS)
            hashed.write.parquet(str(self._tuples))
        ctx.metrics.tuples_grouped = ctx.metrics.rows_before

    @property
    def _tuples(self) -> Path:
        return self.ctx.staging / "tuples"

    def exchange(self) -> Answer:
        return extract_exchange(self.ctx, self._frames())

    def _frames(self) -> Iterator[bytes]:
        """The request's data frames."""
        ctx = self.ctx
        if self.snapshot.read is None:
            return
        key_types = {c.name: c.type.arrow() for c in ctx.site.columns}
        tuples = ds.dataset(self._tuples, format="parquet")
        for batch in tuples.to_batches(columns=[*ctx.site.key, ROW_HASH], batch_size=SEND_BATCH_ROWS):
            if batch.num_rows:
                arrays = [batch.column(i).cast(key_types[k]) for i, k in enumerate(ctx.site.key)] + [
                    batch.column(len(ctx.site.key)).cast(pa.binary(TUPLE_HASH_BITS // 8))
                ]
                yield frames.arrow_frame(
                    frames.TUPLE_HASHES, pa.RecordBatch.from_arrays(arrays, names=[*ctx.site.key, HASH])
                )

    def fragment_build(self) -> FragmentBuild:
        if self.snapshot.read is None:
            return FragmentBuild.WHOLE
        return FragmentBuild.TOUCHED  # every key went with its hash; the agent names the gone ones

    def unchanged_keys(self) -> DataFrame | None:
        if self.snapshot.read is None:
            return None
        return self.ctx.sync.spark.read.parquet(str(self._tuples)).select(*self.ctx.site.key)

    @classmethod
    def expected_bytes(cls, estimate: SiteEstimate) -> float:
        """Every key and its hash one way; changed and new rows, and deleted keys, the other.

        >>> from warehouse.planning.cost_model import CostModel
        >>> TupleHash.expected_bytes(SiteEstimate(1000, 0.01, 0.0, CostModel(50, 4, 16), 128))
        12500.0
        """
        cost = estimate.cost
        sent = estimate.rows * (cost.key_bytes + TUPLE_HASH_BITS / 8)
        back = estimate.rows * (
            (estimate.p_update + estimate.p_delete) * cost.tuple_bytes + estimate.p_delete * cost.key_bytes
        )
        return sent + back
