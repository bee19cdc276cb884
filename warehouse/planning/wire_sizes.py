"""Measure the bytes of a tuple, a key and a group hash from the wire encoding, on a sample of the snapshot."""

from __future__ import annotations

import os
import random

import pyarrow as pa
from pyspark.sql import DataFrame

from deltasieve_protocol import frames
from deltasieve_protocol.types import arrow_schema
from deltasieve_protocol.wire import HASH, UID
from warehouse.planning.cost_model import CostModel
from warehouse.viewdef import SiteQuery

#: Rows sampled to measure sizes: enough for zstd to reach its steady ratio, cheap to encode.
SAMPLE_ROWS = 20_000
#: Fewer rows than this in the view's random sample, and the fragment is read instead.
MIN_SAMPLE_ROWS = 100
#: Group size assumed when measuring how keys compress next to their uids.
SAMPLE_GROUP_SIZE = 16
#: Sizes used before anything is stored (first load): only the ratio matters, not the scale.
FALLBACK = CostModel(tuple_bytes=100.0, key_bytes=8.0, hash_bytes=20.0)


def measure(snapshot: DataFrame | None, site: SiteQuery, hash_bits: int) -> CostModel:
    """Average encoded bytes per tuple, per key and per unit hash, as they would travel."""
    if snapshot is None:
        return FALLBACK
    return measure_sample(
        snapshot.select(*[c.name for c in site.columns]).limit(SAMPLE_ROWS).toArrow(), site, hash_bits
    )


def measure_sample(sample: pa.Table, site: SiteQuery, hash_bits: int) -> CostModel:
    """`measure` on rows already at hand (up to SAMPLE_ROWS of them are used)."""
    sample = sample.select([c.name for c in site.columns]).slice(0, SAMPLE_ROWS)
    n = sample.num_rows
    if n == 0:
        return FALLBACK
    sample = sample.cast(arrow_schema(site.columns))
    tuple_bytes = _marginal(frames.UNGROUPED_ROWS, sample)
    uids = pa.array([i // SAMPLE_GROUP_SIZE for i in range(n)], pa.int64())
    # Groups gather tuples by stability, not by key: measure keys in scattered order.
    shuffled = sample.take(pa.array(random.Random(n).sample(range(n), n)))
    keys = pa.table({UID: uids, **{k: shuffled.column(k) for k in site.key}})
    key_bytes = _marginal(frames.UNIT_KEYS, keys)
    n_units = max(1, n // SAMPLE_GROUP_SIZE)
    units = pa.table(
        {
            UID: pa.array(range(n_units), pa.int64()),
            HASH: pa.array([os.urandom(hash_bits // 8) for _ in range(n_units)], pa.binary(hash_bits // 8)),
        }
    )
    hash_bytes = _marginal(frames.UNITS, units)
    return CostModel(tuple_bytes=tuple_bytes, key_bytes=key_bytes, hash_bytes=hash_bytes)


def _marginal(kind: bytes, table: pa.Table) -> float:
    """Bytes per row of `table` in a data frame, without the frame's fixed overhead (schema).

    Batches are large on the wire, so the per-frame overhead is spread thin there; on a
    small sample it would dominate the figure.
    """
    whole = len(frames.arrow_frame(kind, table))
    empty = len(frames.arrow_frame(kind, table.slice(0, 0)))
    return max(whole - empty, 1) / table.num_rows
