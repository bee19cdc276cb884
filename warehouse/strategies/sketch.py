"""sketch: set reconciliation of (key fingerprint, row hash) pairs with an IBLT, O(differences).

plan: the fragment's table (sketches.py; rebuilt on the executors when missing or due for a
new seed) is shrunk to the width the statistics ask for this sync: cells for the expected
number of differing pairs (two per update, one per delete and per insert) plus a margin
for their spread, so that about 1 % of syncs fail to peel. exchange: the agent reads the
site query once, folds every row's pair in with the opposite sign and peels the table; it
answers with the rows of the pairs only it holds (new and changed rows) and the pairs only
the warehouse holds (deleted rows, the old side of updates). A key in the latter but not
among the returned rows is deleted. When the table does not peel, the site falls back to
the group-hash exchange, one more scan. stage: the table of the new fragment is the old
one minus the pairs that left plus the pairs of the returned rows, O(changes).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame

from remote_agent.protocol import frames
from remote_agent.protocol.fingerprints import integer_key, key_fingerprints, keys_from_fingerprints, sketch_seeds
from remote_agent.protocol.iblt import cells_for
from remote_agent.protocol.models import SketchControl
from remote_agent.protocol.wire import KEY_FP, ROW_FP

from .. import sketches
from ..errors import ProtocolError
from ..sinks import Sink
from ..storage import Version
from .base import Answer, SiteEstimate, Strategy, spark_schema
from .group_hash import GroupHash

#: Share of syncs allowed to fail to peel (each then costs a group-hash exchange more).
PEEL_FAILURE = 0.01
#: Bytes of one cell on the wire: a 32-bit count and three 64-bit sums (random: no compression).
CELL_BYTES = 28
#: Bytes of a pair sent back (two 64-bit values).
PAIR_BYTES = 16


def sketch_dir(version: Version, site: int):
    return version.path / f"site-{site}" / "sketch"


class Sketch(Strategy):
    name = "sketch"

    def plan(self) -> None:
        ctx = self.ctx
        est = ctx.estimate
        m = ctx.metrics
        stored = sketches.SiteSketch.load(sketch_dir(ctx.current, ctx.index)) if ctx.current else None
        if (
            stored is None
            or stored.syncs >= ctx.options.sketch_seed_rotation
            or stored.table.width < sketches.stored_width(est.rows) // 4
        ):
            stored = sketches.build(ctx.snapshot, ctx.site.columns, ctx.key_columns(), est.rows)
            m.sketch_rebuilt = True
        self.stored = stored
        m.differences_expected = round(est.differences, 1)
        cells = cells_for(est.differences, est.differences_variance, PEEL_FAILURE, sketches.HASHES)
        width = sketches.sent_width(cells, stored.table.width)
        self.fallback: GroupHash | None = None
        if width is None:  # more differences expected than the stored table can resolve
            self._fall_back()
            return
        self.sent = stored.table.shrink(width)
        m.sketch_cells = self.sent.cells

    def exchange(self) -> Answer:
        if self.fallback is not None:
            return self.fallback.exchange()
        ctx = self.ctx
        control = SketchControl(site=ctx.spec(), seed=self.stored.secret, batch_rows=ctx.options.batch_rows)
        table = self.sent.to_arrow()
        ctx.metrics.sketch_bytes = len(frames.arrow_frame(frames.SKETCH, table))
        body: Iterator[bytes] = iter(
            [frames.json_frame(frames.CONTROL, control.model_dump()), frames.arrow_frame(frames.SKETCH, table)]
        )
        returned_path = ctx.staging / "sketch-returned.parquet"
        pairs: list[pa.RecordBatch] = []
        summary = None
        with Sink(returned_path, ctx.rows_schema()) as returned:
            for frame in ctx.client.exchange("/v1/sketch", body):
                if frame.kind == frames.ROWS:
                    returned.write(frame.batch())
                    ctx.tick(returned.rows)
                elif frame.kind == frames.PAIRS:
                    pairs.append(frame.batch())
                elif frame.kind == frames.SUMMARY:
                    summary = frame.json()
        if summary is None:
            raise ProtocolError("sketch answer ended without a summary")
        m = ctx.metrics
        m.rows_scanned = summary.get("rows_scanned", 0)
        m.agent_seconds = summary.get("elapsed_s")
        if not summary.get("complete"):
            m.peel_failed = True
            self._fall_back()
            return self.fallback.exchange()
        m.rows_received = returned.rows
        m.differences_found = summary.get("differences", 0)
        self.left = pa.Table.from_batches(pairs, schema=pa.schema([(KEY_FP, pa.uint64()), (ROW_FP, pa.uint64())]))
        # the pairs of the rows that came back: they name the keys not deleted, and join the table
        self.back = self.stored.pairs(pq.read_table(returned_path), ctx.site.columns, ctx.key_columns())
        return Answer([returned_path], self._deleted_keys())

    def _fall_back(self) -> None:
        """Hand the site to the group-hash exchange for this sync (planned from the same snapshot)."""
        self.ctx.metrics.fallback = GroupHash.name
        self.fallback = GroupHash(self.ctx)
        self.fallback.plan()

    def follow_up(self, answer: Answer) -> Answer:
        return self.fallback.follow_up(answer) if self.fallback is not None else answer

    def _deleted_keys(self) -> Path:
        """Keys of the pairs that left whose key did not come back: deleted at the source."""
        ctx = self.ctx
        key = ctx.key_columns()
        gone = np.setdiff1d(self.left.column(KEY_FP).to_numpy(), self.back[0])
        path = ctx.staging / "sketch-deleted.parquet"
        if integer_key(key):
            keys = keys_from_fingerprints(gone, key)
        else:
            keys = self._keys_of(gone)
        with Sink(path, pa.schema([pa.field(c.name, c.type.arrow()) for c in key])) as sink:
            for batch in keys.to_batches():
                sink.write(batch)
        return path

    def _keys_of(self, fingerprints: np.ndarray) -> pa.Table:
        """The snapshot keys with these fingerprints (keys that are not their own), on the executors."""
        ctx = self.ctx
        key = ctx.key_columns()
        schema = pa.schema([pa.field(c.name, c.type.arrow()) for c in key])
        if len(fingerprints) == 0:
            return schema.empty_table()
        key_seed, _ = sketch_seeds(self.stored.secret)
        wanted = pa.array(fingerprints, pa.uint64())

        def run(batches):
            for batch in batches:
                fps = pa.array(key_fingerprints(batch, key, key_seed))
                yield batch.filter(pc.is_in(fps, value_set=wanted))

        found = ctx.snapshot.select(*[c.name for c in key]).mapInArrow(run, spark_schema(key)).toArrow()
        return found.cast(schema)

    def unchanged_keys(self) -> DataFrame | None:
        if self.fallback is not None:
            return self.fallback.unchanged_keys()
        return self.ctx.snapshot.select(*self.ctx.site.key)

    def stage(self, staged: Version) -> None:
        """The new fragment's table: the old one less the pairs that left, plus the returned rows'."""
        if self.fallback is not None:
            return  # rebuilt from the fragment at the next sketch sync
        ctx = self.ctx
        table = self.stored.table.copy()
        table.add(self.left.column(KEY_FP).to_numpy(), self.left.column(ROW_FP).to_numpy(), sign=-1)
        table.add(*self.back)
        sketches.SiteSketch(table, self.stored.syncs + 1).save(sketch_dir(staged, ctx.index))

    @classmethod
    def expected_bytes(cls, estimate: SiteEstimate) -> float:
        """The shrunk table one way; changed and new rows, and the pairs that left, the other.

        >>> from warehouse.planning import CostModel
        >>> est = SiteEstimate(100_000, 0.001, 0.0, CostModel(50, 4, 16), 128)
        >>> 0 < Sketch.expected_bytes(est) < 0.1 * est.full_bytes
        True
        """
        cells = cells_for(estimate.differences, estimate.differences_variance, PEEL_FAILURE, sketches.HASHES)
        width = sketches.sent_width(cells, sketches.stored_width(estimate.rows))
        if width is None:
            return float("inf")
        rows_back = estimate.updates + estimate.inserts
        pairs_back = estimate.updates + estimate.deletes
        return width * sketches.HASHES * CELL_BYTES + rows_back * estimate.cost.tuple_bytes + pairs_back * PAIR_BYTES
